package checkpoint

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/outbox-relay/outbox-relay/internal/kafkaerr"
)

// ErrLost is returned when a pipeline that has had a checkpoint finds none
// (no record of its name, and no tombstone an operator wrote): the checkpoint
// topic was deleted and created again, or its records were deleted. The
// relay never starts over from source.start then: an operator restores the
// position (checkpoint set) or says to start over (checkpoint reset).
var ErrLost = errors.New("checkpoint lost")

// ErrTablesChanged is returned when the checkpoint was written by a pipeline
// capturing other tables than the configuration's source.tables: resuming
// from it would skip (or publish anew) the rows of the tables that differ.
var ErrTablesChanged = errors.New("checkpoint of other captured tables")

// Loaded is Load's answer with what tells a pipeline that never had a
// checkpoint from one whose checkpoint is gone.
type Loaded struct {
	// Checkpoint is the newest committed checkpoint of the name; nil when
	// there is none.
	Checkpoint *Checkpoint
	// Reset: the newest record of the name is a reset marker, written by
	// `checkpoint reset` (ResetBy says who, when and from where), or a
	// tombstone (an older build's reset): an operator said to start at
	// source.start.
	Reset bool
	// ResetBy is the Operator of a reset marker; nil for a tombstone.
	ResetBy *Operator
	// Partitions are the partition counts a reset marker carries over
	// from the checkpoint it replaced (see ResetMarker); nil otherwise.
	Partitions map[string]int32
}

// LoadState is Load, also reporting whether the name's newest record is a
// reset marker or a tombstone (Loaded.Reset). Compaction removes a tombstone after the
// topic's delete.retention.ms (a day by default): see TopicState.
func (s *Store) LoadState(ctx context.Context, name string) (Loaded, error) {
	var last stored
	err := s.scan(ctx, name, func(r stored) { last = r })
	if hb, ok := errors.AsType[*HeldBackError](err); ok {
		hb.Visible, _, _ = last.decodeReset()
		return Loaded{}, err
	}
	if err != nil {
		return Loaded{}, err
	}
	if s.txnOnly && last.found && !last.txn {
		return Loaded{}, notTransactional(name, last) // one it cannot decode: that error
	}
	cp, err := last.decode()
	if cp != nil && cp.IsReset() {
		return Loaded{Reset: true, ResetBy: cp.Operator, Partitions: cp.Partitions}, nil
	}
	return Loaded{Checkpoint: cp, Reset: last.found && last.value == nil}, err
}

// TopicState is what identifies the checkpoint topic and its history.
type TopicState struct {
	// ID is the topic's id: a topic deleted and created again under the
	// same name has another one. Zero when the brokers do not report ids.
	ID kadm.TopicID
	// LogStart is partition 0's log start offset: above 0 once records were
	// deleted (kafka-delete-records.sh, or retention with cleanup.policy
	// delete); compaction alone leaves it at 0.
	LogStart int64
}

// IDString renders a topic id as the relay records it (hex; "" for none).
func IDString(id kadm.TopicID) string {
	if id == (kadm.TopicID{}) {
		return ""
	}
	return hex.EncodeToString(id[:])
}

// Describe returns the checkpoint topic's id and log start offset, and
// checks its cleanup.policy: one without compact is an ErrTopicLayout (the
// broker would delete checkpoints by age: a pipeline idle or stopped longer
// than retention.ms would lose its position). A policy the principal may not
// describe is not checked (least privilege: DESCRIBE_CONFIGS is not among
// the relay's grants).
//
// A topic just created (EnsureTopic) may be unknown to the broker asked for
// a moment (Apache Kafka propagates the metadata after it answered the
// creation): Describe asks again while the answer is a retriable Kafka
// error, for at most DescribeWait, then returns that error.
func (s *Store) Describe(ctx context.Context, adm *kadm.Client) (TopicState, error) {
	var st TopicState
	err := s.askAgain(ctx, func(asked context.Context) (err error) {
		st, err = s.describe(asked, adm)
		return err
	})
	return st, err
}

// askAgain calls ask until it returns nil or an error other than a
// retriable Kafka one (UNKNOWN_TOPIC_OR_PARTITION: a topic just created is
// not yet known to the broker asked), for at most DescribeWait while ctx
// lasts, then returns ask's last error. Each ask after the first goes past
// franz-go's metadata cache: kadm answers from it for up to MetadataMinAge
// (5 s), an UNKNOWN_TOPIC_OR_PARTITION included, unless the request also
// asks for the authorized operations (a direct request).
func (s *Store) askAgain(ctx context.Context, ask func(context.Context) error) error {
	wait := s.describeWait
	if wait == 0 {
		wait = DescribeWait
	}
	deadline := time.Now().Add(wait)
	for asked := ctx; ; asked = kadm.WithAuthorizedOps(ctx) {
		err := ask(asked)
		if err == nil || kafkaerr.KindOf(err) != kafkaerr.Retriable || !time.Now().Before(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// DescribeWait is how long Describe (and EnsureTopic, for a topic that
// exists) asks again while the checkpoint topic is not yet known to the
// broker it asks.
const DescribeWait = 15 * time.Second

func (s *Store) describe(ctx context.Context, adm *kadm.Client) (TopicState, error) {
	var st TopicState
	details, err := adm.ListTopics(ctx, s.topic)
	if err != nil {
		return st, fmt.Errorf("describe checkpoint topic %s: %w", s.topic, err)
	}
	d, ok := details[s.topic]
	if !ok || d.Err != nil {
		return st, fmt.Errorf("describe checkpoint topic %s: %w", s.topic, topicErr(ok, d.Err))
	}
	st.ID = d.ID
	if n := len(d.Partitions); n != 1 {
		return st, fmt.Errorf("%w: topic %s has %d partitions, need exactly 1: the checkpoint topic was created again with other settings? "+
			"create it compacted with 1 partition", ErrTopicLayout, s.topic, n)
	}
	start, _, err := s.offset(ctx, adm.ListStartOffsets)
	if err != nil {
		return st, err
	}
	st.LogStart = start
	configs, err := adm.DescribeTopicConfigs(ctx, s.topic)
	if err == nil {
		var rc kadm.ResourceConfig
		if rc, err = configs.On(s.topic, nil); err == nil {
			err = rc.Err
		}
		if err == nil {
			values := map[string]string{}
			for _, c := range rc.Configs {
				if c.Value != nil {
					values[c.Key] = *c.Value
				}
			}
			if policy, ok := values["cleanup.policy"]; ok && !slices.Contains(policies(policy), "compact") {
				return st, fmt.Errorf("%w: topic %s has cleanup.policy=%s: the broker deletes checkpoints by age (a pipeline stopped longer than "+
					"retention.ms loses its position); set it compacted: kafka-configs.sh --alter --entity-type topics --entity-name %s "+
					"--add-config cleanup.policy=compact", ErrTopicLayout, s.topic, policy, s.topic)
			}
			if why := DeletesByAge(values); why != "" {
				return st, fmt.Errorf("%w: topic %s has %s: the broker deletes checkpoints by age or size besides compacting them (a pipeline "+
					"stopped or idle that long loses its position); make it compacted only: kafka-configs.sh --alter --entity-type topics "+
					"--entity-name %s --add-config cleanup.policy=compact", ErrTopicLayout, s.topic, why, s.topic)
			}
			return st, nil
		}
	}
	if kafkaerr.TopicOrClusterDenied(err) {
		return st, nil
	}
	return st, fmt.Errorf("describe the settings of checkpoint topic %s: %w", s.topic, err)
}

// Inspect returns the checkpoint topic's id and log start offset as they
// are, for a command that only reads: exists is false when the topic does
// not exist (then st is zero), and its layout and settings are not judged
// (`check` reports them, the relay refuses a wrong one).
func (s *Store) Inspect(ctx context.Context, adm *kadm.Client) (st TopicState, exists bool, err error) {
	details, err := adm.ListTopics(ctx, s.topic)
	if err != nil {
		return st, false, fmt.Errorf("describe checkpoint topic %s: %w", s.topic, err)
	}
	d, ok := details[s.topic]
	if !ok || kafkaerr.UnknownTopic(d.Err) {
		return st, false, nil
	}
	if d.Err != nil {
		return st, false, fmt.Errorf("describe checkpoint topic %s: %w", s.topic, d.Err)
	}
	st.ID = d.ID
	start, _, err := s.offset(ctx, adm.ListStartOffsets)
	if err != nil {
		return st, true, err
	}
	st.LogStart = start
	return st, true, nil
}

// topicErr is the error of a topic the brokers did not describe (ok false:
// not listed at all), kept as Kafka's so that callers can tell a refusal
// (not authorised) from a topic that is missing for a moment.
func topicErr(ok bool, err error) error {
	if !ok || err == nil {
		return kafkaerr.ErrUnknownTopic
	}
	return err
}

func policies(policy string) []string {
	return strings.Split(strings.ReplaceAll(policy, " ", ""), ",")
}

// DeletesByAge says how a checkpoint topic with these settings (config
// name -> value, as DescribeConfigs reports them) loses records besides
// compaction: cleanup.policy with delete (compact,delete) and a finite
// retention.ms (absent: Kafka's default, 7 days) or retention.bytes. ""
// when it never does (compact alone, or delete with both -1).
func DeletesByAge(configs map[string]string) string {
	policy := configs["cleanup.policy"]
	if !slices.Contains(policies(policy), "delete") {
		return ""
	}
	ms, ok := configs["retention.ms"]
	if !ok {
		ms = "604800000"
	}
	if ms != "-1" {
		return fmt.Sprintf("cleanup.policy=%s with retention.ms=%s", policy, ms)
	}
	if b, ok := configs["retention.bytes"]; ok && b != "-1" {
		return fmt.Sprintf("cleanup.policy=%s with retention.bytes=%s", policy, b)
	}
	return ""
}

// TablesOf returns tables sorted, without duplicates, as a checkpoint
// records them.
func TablesOf(tables []string) []string {
	out := slices.Clone(tables)
	slices.Sort(out)
	return slices.Compact(out)
}

// CheckTables returns an ErrTablesChanged error when cp was written by a
// pipeline capturing other tables than tables (source.tables); nil when
// they are the same, or cp does not say (written before checkpoints
// recorded them). The error names both sets and the operator's way to
// change them on purpose.
func CheckTables(cp *Checkpoint, tables []string) error {
	if cp == nil || cp.Tables == nil {
		return nil
	}
	want := TablesOf(tables)
	if slices.Equal(TablesOf(cp.Tables), want) {
		return nil
	}
	var added, removed []string
	for _, t := range want {
		if !slices.Contains(cp.Tables, t) {
			added = append(added, t)
		}
	}
	for _, t := range cp.Tables {
		if !slices.Contains(want, t) {
			removed = append(removed, t)
		}
	}
	var diff []string
	if len(added) > 0 {
		diff = append(diff, "not captured by it: "+strings.Join(added, ", ")+" (their rows before the checkpoint would never be published)")
	}
	if len(removed) > 0 {
		diff = append(diff, "captured by it, not by this configuration: "+strings.Join(removed, ", ")+" (their rows from here on would never be published)")
	}
	return fmt.Errorf("%w: the checkpoint of %s at %s was written capturing source.tables [%s], this configuration captures [%s]; %s. "+
		"Another instance of the same name with other tables, or a changed configuration: give every instance of one name the same source.tables; "+
		"to change them on purpose, stop every instance, then record the new tables with `outbox-relay checkpoint tables --config FILE --yes`",
		ErrTablesChanged, cp.Name, cp.GTIDSet, strings.Join(cp.Tables, ", "), strings.Join(want, ", "), strings.Join(diff, "; "))
}
