package ha

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/kafkaerr"
)

// RecordedTopicID reads, without joining it, the lock group's record of
// cfg's pipeline (claim, Mark): the id of the checkpoint topic its
// checkpoints are in; "" when the record holds none (no record, an older
// build's form, or one naming another checkpoint topic, which `run`
// refuses at its claim). A record the principal may not read is an error:
// without DESCRIBE on the group Kafka refuses the group's offsets, and
// without DESCRIBE on the lock topic it leaves that topic's out, which
// reads as no record.
func RecordedTopicID(ctx context.Context, adm *kadm.Client, cfg config.Config) (string, error) {
	group := clients.GroupID(cfg.Name)
	offs, err := adm.FetchOffsets(ctx, group)
	if kafkaerr.GroupUnknown(err) {
		return "", nil // no instance ever joined: no record
	}
	if err != nil {
		return "", fmt.Errorf("read the lock group %s's record: %w", group, err)
	}
	o, ok := offs.Lookup(cfg.HA.LockTopic, 0)
	if ok && o.Err != nil {
		return "", fmt.Errorf("read the lock group %s's record: %w", group, o.Err)
	}
	if !ok {
		// None, or one Kafka left out: it does so, silently, for a topic
		// the principal may not describe.
		td, err := adm.ListTopics(ctx, cfg.HA.LockTopic)
		if err != nil {
			return "", fmt.Errorf("read the lock group %s's record: describe the lock topic %s: %w", group, cfg.HA.LockTopic, err)
		}
		if d, listed := td[cfg.HA.LockTopic]; listed && d.Err != nil && !kafkaerr.UnknownTopic(d.Err) {
			return "", fmt.Errorf("read the lock group %s's record: describe the lock topic %s: %w", group, cfg.HA.LockTopic, d.Err)
		}
		return "", nil // the lock topic is there and the group has no offset of it, or there is no lock topic
	}
	if o.Metadata == "" {
		return "", nil
	}
	topic, id, ours := parseClaim(o.Metadata)
	if !ours || topic != cfg.Kafka.CheckpointTopic {
		return "", nil
	}
	return id, nil
}

// LoadJudged loads cfg's committed checkpoint from store and judges it as
// `run` does (checkpoint.Judge, given the topic's state and the lock group's
// record): the one way the commands that read the checkpoint (check,
// checkpoint show, audit) learn whether a pipeline without one is new, reset
// or has lost it. A held-back checkpoint topic is store.LoadState's error
// (*checkpoint.HeldBackError), with what was loaded so far.
func LoadJudged(ctx context.Context, cfg config.Config, k clients.Kafka, store *checkpoint.Store) (checkpoint.Loaded, checkpoint.Judgement, error) {
	cl, err := kgo.NewClient(k.Admin()...)
	if err != nil {
		return checkpoint.Loaded{}, checkpoint.Judgement{}, fmt.Errorf("load checkpoint: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	st, exists, err := store.Inspect(ctx, adm)
	if err != nil {
		return checkpoint.Loaded{}, checkpoint.Judgement{}, err
	}
	var loaded checkpoint.Loaded
	if exists {
		if loaded, err = store.LoadState(ctx, cfg.Name); err != nil {
			return loaded, checkpoint.Judgement{}, err
		}
	}
	e := checkpoint.Evidence{Name: cfg.Name, Topic: cfg.Kafka.CheckpointTopic, Start: cfg.Source.Start, Group: clients.GroupID(cfg.Name),
		TopicMissing: !exists, State: st, Loaded: loaded}
	if loaded.Checkpoint == nil && !loaded.Reset {
		e.Recorded, e.RecordErr = RecordedTopicID(ctx, adm, cfg)
	}
	return loaded, checkpoint.Judge(e), nil
}
