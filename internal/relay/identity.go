package relay

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/clients"
)

// A pipeline's identity: what tells "never had a checkpoint" (start at
// source.start) from "the checkpoint is gone" (stop: an operator decides),
// and what it captures (source.tables and the router's topic mapping),
// which every instance of one name and its checkpoint must agree on.
//
// "Had a checkpoint" is known three ways:
//   - in the process: the checkpoint an attempt loaded or committed
//     (Relay.had), so a later attempt of the same process that finds none
//     stops;
//   - across restarts: the lock group's record (claim, internal/ha/membership.go) also
//     holds the id of the checkpoint topic the pipeline's checkpoints are in,
//     written once an attempt has a checkpoint; a topic with another id (it
//     was deleted and created again) or one whose log start offset is past
//     0 (records deleted) without a record of the name stops the relay;
//   - an operator's word: a tombstone, the newest record of the name
//     (`checkpoint reset`), starts at source.start whatever the rest says.

// known is the checkpoint this process last loaded or committed.
type known struct {
	topicID string // checkpoint.IDString of the checkpoint topic then
	gtid    string
}

// noteCheckpoint records that cp is committed (the loop, after each commit).
func (r *Relay) noteCheckpoint(cp *checkpoint.Checkpoint, topicID string) {
	if cp == nil {
		return
	}
	if r.had == nil {
		r.had = &known{}
	}
	r.had.gtid = cp.GTIDSet
	if topicID != "" {
		r.had.topicID = topicID
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
// the pipeline, whether it starts at source.start: nil on a first start or
// after an operator's reset; a checkpoint.ErrLost error when it has had a
// checkpoint that is gone.
func (r *Relay) judgeMissing(st checkpoint.TopicState, loaded checkpoint.Loaded) error {
	topic, id := r.cfg.Kafka.CheckpointTopic, checkpoint.IDString(st.ID)
	if by := loaded.ResetBy; by != nil {
		// The operator's explicit way back to source.start: said loudly,
		// once per start from it (the initial checkpoint replaces the marker).
		r.log.Warn().Str("reset_by", by.User).Time("reset_at", by.Time).Str("reset_from", by.From).
			Str("start", r.cfg.Source.Start).Msg("checkpoint reset by the operator (outbox-relay checkpoint reset): starting at source.start")
		r.had = nil
		return nil
	}
	if loaded.Reset {
		r.log.Warn().Str("topic", topic).Str("start", r.cfg.Source.Start).
			Msg("checkpoint reset by a tombstone (an older build's checkpoint reset): starting at source.start")
		r.had = nil
		return nil
	}
	if r.had != nil {
		why := "the checkpoint topic was deleted and created again, or the records deleted"
		switch {
		case r.had.topicID != "" && id != "" && r.had.topicID != id:
			why = fmt.Sprintf("the checkpoint topic was deleted and created again (topic id %s, was %s)", id, r.had.topicID)
		case st.LogStart > 0:
			why = fmt.Sprintf("the checkpoint topic's records were deleted (log start offset %d)", st.LogStart)
		}
		return r.lost(why, fmt.Sprintf("with SET '%s', the last checkpoint this process committed, it resumes exactly there", r.had.gtid))
	}
	rec := r.recordedTopicID()
	switch {
	case rec == "":
		return nil // a first start (or a lock group that forgot: docs/operations.md)
	case id != "" && rec != id:
		return r.lost(fmt.Sprintf("the checkpoint topic was deleted and created again (topic id %s; the lock group %s recorded the pipeline's checkpoints in topic id %s)",
			id, clients.GroupID(r.cfg.Name), rec), "")
	case st.LogStart > 0:
		return r.lost(fmt.Sprintf("the checkpoint topic's records were deleted (log start offset %d)", st.LogStart), "")
	}
	// The same topic, nothing deleted: only compaction removes the newest
	// record of a name, and only a tombstone (an older build's checkpoint
	// reset, a day or more ago: delete.retention.ms); compaction keeps a
	// reset marker.
	r.log.Warn().Str("topic", topic).Str("start", r.cfg.Source.Start).
		Msg("no checkpoint of this pipeline, which had one, in the same checkpoint topic: it was reset with a tombstone and compaction removed it; starting at source.start")
	return nil
}

// lost is the stop of a pipeline whose checkpoint is gone.
func (r *Relay) lost(why, restore string) error {
	if restore == "" {
		restore = "SET being the GTID set the pipeline had published (its consumers' newest records tell; an earlier one publishes again what came after it)"
	}
	return fmt.Errorf("%w: pipeline %s has had a checkpoint, but %s holds none now: %s; the relay does not start over from source.start (%s) "+
		"by itself. Restore the position with `outbox-relay checkpoint set --config FILE --gtid SET`, %s; or start at source.start on purpose "+
		"with `outbox-relay checkpoint reset --config FILE --yes`",
		checkpoint.ErrLost, r.cfg.Name, r.cfg.Kafka.CheckpointTopic, why, r.cfg.Source.Start, restore)
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
		r.had.topicID = id
	}
	if r.elector == nil {
		return
	}
	r.elector.Mark(ctx, id)
}
