package relay

import (
	"context"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/clients"
)

// A pipeline's identity: what tells "never had a checkpoint" (start at
// source.start) from "the checkpoint is gone" (stop: an operator decides)
// is checkpoint.Judge, the rule every command that reads the checkpoint
// shares; the relay gives it what only it knows: the checkpoint this process
// last loaded or committed (Relay.had) and the lock group's record of the
// checkpoint topic's id (read when the term began).

// noteCheckpoint records that cp is committed (the loop, after each commit).
func (r *Relay) noteCheckpoint(cp *checkpoint.Checkpoint, topicID string) {
	if cp == nil {
		return
	}
	if r.had == nil {
		r.had = &checkpoint.Had{}
	}
	r.had.GTIDSet = cp.GTIDSet
	if topicID != "" {
		r.had.TopicID = topicID
	}
}

// loadCheckpoint loads the committed checkpoint after checking the
// checkpoint topic (settings, identity), and refuses one of other captured
// tables. Without one it decides whether the pipeline may start at
// source.start (judgeMissing). placed are the partition counts keys are
// placed by: the checkpoint's, or those a reset marker carried over.
func (r *Relay) loadCheckpoint(ctx context.Context, adm *kadm.Client) (cp *checkpoint.Checkpoint, placed map[string]int32, st checkpoint.TopicState, err error) {
	st, err = r.store.Describe(ctx, adm)
	if err != nil {
		return nil, nil, st, err
	}
	loaded, err := r.store.LoadState(ctx, r.cfg.Name)
	if err != nil {
		return nil, nil, st, err
	}
	cp = loaded.Checkpoint
	if cp == nil {
		return nil, loaded.Partitions, st, r.judgeMissing(st, loaded)
	}
	if err := checkpoint.CheckTables(cp, r.cfg.Source.Tables); err != nil {
		return nil, nil, st, err
	}
	r.noteCheckpoint(cp, checkpoint.IDString(st.ID))
	r.markCheckpoint(ctx, st)
	return cp, cp.Partitions, st, nil
}

// judgeMissing decides, when the checkpoint topic holds no checkpoint of
// the pipeline, whether it starts at source.start (checkpoint.Judge): nil on
// a first start or after an operator's reset, said in the log; a
// checkpoint.ErrLost error when it has had a checkpoint that is gone.
func (r *Relay) judgeMissing(st checkpoint.TopicState, loaded checkpoint.Loaded) error {
	j := checkpoint.Judge(checkpoint.Evidence{Name: r.cfg.Name, Topic: r.cfg.Kafka.CheckpointTopic, Start: r.cfg.Source.Start,
		Group: clients.GroupID(r.cfg.Name), State: st, Loaded: loaded, Recorded: r.recordedTopicID(), Had: r.had})
	topic := r.cfg.Kafka.CheckpointTopic
	switch j.Verdict {
	case checkpoint.ResetByOperator:
		// The operator's explicit way back to source.start: said loudly,
		// once per start from it (the initial checkpoint replaces the marker).
		by := loaded.ResetBy
		r.log.Warn().Str("reset_by", by.User).Time("reset_at", by.Time).Str("reset_from", by.From).
			Str("start", r.cfg.Source.Start).Msg("checkpoint reset by the operator (outbox-relay checkpoint reset): starting at source.start")
		r.had = nil
	case checkpoint.ResetByTombstone:
		r.log.Warn().Str("topic", topic).Str("start", r.cfg.Source.Start).
			Msg("checkpoint reset by a tombstone (an older build's checkpoint reset): starting at source.start")
		r.had = nil
	case checkpoint.TombstoneCompacted:
		r.log.Warn().Str("topic", topic).Str("start", r.cfg.Source.Start).
			Msg("no checkpoint of this pipeline, which had one, in the same checkpoint topic: it was reset with a tombstone and compaction removed it; starting at source.start")
	}
	return j.Err
}

// recordedTopicID is the checkpoint topic id the lock group's record holds
// ("" when none, or no lock group: relay tests without one).
func (r *Relay) recordedTopicID() string {
	if r.elector == nil {
		return ""
	}
	return r.elector.RecordedID()
}

// markCheckpoint records in the lock group that the pipeline has a
// checkpoint in the topic of st (best effort: logged when it fails).
func (r *Relay) markCheckpoint(ctx context.Context, st checkpoint.TopicState) {
	id := checkpoint.IDString(st.ID)
	if r.had != nil && id != "" {
		r.had.TopicID = id
	}
	if r.elector == nil {
		return
	}
	r.elector.Mark(ctx, id)
}
