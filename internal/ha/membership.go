package ha

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/kafkaerr"
)

// The lock group's members must be one pipeline's instances with the same
// settings, each with an id of its own: the checks an instance makes
// before it joins (awaitInstanceID) and before it acts on the lease
// (agree, claim).

// instanceIDOf is the lock group's static membership id of an instance with
// configuration cfg: ha.instance_id, or by default the host name, the
// source.server_id and the port of http.listen, which instances sharing a
// host are told to give each their own (characters Kafka does not take in
// an id replaced by '-').
func instanceIDOf(cfg config.Config) string {
	if cfg.HA.InstanceID != "" {
		return cfg.HA.InstanceID
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	id := host + "-" + strconv.FormatUint(uint64(cfg.Source.ServerID), 10)
	if _, port, err := net.SplitHostPort(cfg.HTTP.Listen); err == nil && port != "" {
		id += "-" + port
	}
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-' {
			return r
		}
		return '-'
	}, id)
}

// awaitInstanceID waits, before joining, until no member of the lock
// group holds this instance's id. Joining with the id of a member takes
// its place at once: right for this instance's own earlier process that
// died (kill -9: its member lingers until its session ends), wrong for a
// live instance that shares the id (two instances on one host with the
// same settings), which would be evicted while active. A member of a dead
// process is gone within a session timeout of the last heartbeat the
// coordinator handled; a loaded coordinator handles heartbeats and ends
// sessions late (5 s late on a loaded machine, Apache Kafka), so the wait
// allows it another session timeout. One still there after that is alive,
// and this instance refuses to start (configuration error) rather than take
// its place. Errors reaching Kafka are left to the join.
func (e *Elector) awaitInstanceID(ctx context.Context) error {
	cl, err := kgo.NewClient(e.c.Kafka.Admin()...)
	if err != nil {
		return nil
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	deadline := time.Now().Add(2*e.times.session + 2*e.times.heartbeat + time.Second)
	logged := false
	for {
		dctx, cancel := context.WithTimeout(ctx, e.c.Relay.Kafka.RequestTimeout)
		groups, err := adm.DescribeGroups(dctx, e.id.group)
		cancel()
		if err != nil || groups.Error() != nil {
			return nil
		}
		var holder *kadm.DescribedGroupMember
		for _, g := range groups {
			for i, m := range g.Members {
				if m.InstanceID != nil && *m.InstanceID == e.id.instance {
					holder = &g.Members[i]
				}
			}
		}
		if holder == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: a live member of the lock group %s (%s, %s) has this instance's ha.instance_id %q "+
				"(by default the host name, source.server_id and the port of http.listen): give every instance of pipeline %s its own",
				config.ErrInvalid, e.id.group, holder.ClientHost, holder.ClientID, e.id.instance, e.c.Relay.Name)
		}
		if !logged {
			e.c.Log.Info().Str("instance_id", e.id.instance).Str("member", holder.ClientID).
				Msg("a member with this instance id is in the lock group (this instance's earlier process, or another one): waiting for it to leave")
			logged = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(e.times.heartbeat):
		}
	}
}

// agree checks, before this member acts on the lease, that every member of
// the lock group subscribes to the same lock topic: two instances of one
// pipeline with different ha.lock_topic settings would each be given
// partition 0 of their own topic, and both would be active. Such a
// member refuses the lease with a configuration error; so does the other one
// when it next acquires it. The same for members that capture other tables
// or map them to other topics (captureTag, carried in the client id).
func (e *Elector) agree(ctx context.Context) error {
	members, ok := e.members(ctx, "members' lock topics not checked")
	if !ok {
		return nil
	}
	for _, m := range members {
		if err := e.disagreement(m); err != nil {
			return err
		}
	}
	return nil
}

// agreeWithHolder is a standby's check of the member that holds the lease
// (partition 0 of the lock topic): a holder this instance disagrees with
// (another fingerprint, other captured tables or topic mapping) is one it
// could not take over from, so the standby refuses now, at its start,
// instead of at the failover it waits for. agree sees only the members
// present when the lease is assigned; a member that joins after that is
// checked here. Other standbys are not compared (each checks the holder).
// Best effort, as agree.
func (e *Elector) agreeWithHolder(ctx context.Context) error {
	members, ok := e.members(ctx, "the lease holder's settings not checked")
	if !ok {
		return nil
	}
	for _, m := range members {
		if m.ClientID == e.id.client || !holdsPartition0(m, e.id.topic) {
			continue
		}
		if err := e.disagreement(m); err != nil {
			return fmt.Errorf("%w (this instance is its standby: it could not take the lease over)", err)
		}
	}
	return nil
}

// members are the lock group's members as the coordinator describes them;
// false (logged with what is skipped) when it does not answer: Kafka just
// assigned the lease, or the group is rebalancing, so a failed description
// is likely passing and must not block a takeover.
func (e *Elector) members(ctx context.Context, skipped string) ([]kadm.DescribedGroupMember, bool) {
	dctx, cancel := context.WithTimeout(ctx, e.c.Relay.Kafka.RequestTimeout)
	defer cancel()
	groups, err := kadm.NewClient(e.cl).DescribeGroups(dctx, e.id.group)
	if err == nil {
		err = groups.Error()
	}
	if err != nil && ctx.Err() != nil {
		return nil, false // stopping (SIGTERM): nothing skipped to warn about
	}
	if err != nil {
		e.c.Log.Warn().Err(err).Msg("describe the lock group: " + skipped)
		return nil, false
	}
	var out []kadm.DescribedGroupMember
	for _, g := range groups {
		out = append(out, g.Members...)
	}
	return out, true
}

// holdsPartition0 reports whether m is assigned partition 0 of topic.
func holdsPartition0(m kadm.DescribedGroupMember, topic string) bool {
	a, ok := m.Assigned.AsConsumer()
	if !ok {
		return false
	}
	for _, t := range a.Topics {
		if t.Topic == topic && slices.Contains(t.Partitions, 0) {
			return true
		}
	}
	return false
}

// disagreement is why m cannot be an instance of this pipeline beside this
// one (a configuration error), or nil.
func (e *Elector) disagreement(m kadm.DescribedGroupMember) error {
	prefix := e.fingerprint() + "-"
	if !strings.HasPrefix(m.ClientID, prefix) {
		return fmt.Errorf("%w: instances of pipeline %s disagree on kafka.checkpoint_topic, kafka.delivery or "+
			"ha.lock_topic: member %s (%s) is not %s; a standby taking over with another checkpoint would publish "+
			"from another position: give every instance of one name the same settings", config.ErrInvalid,
			e.c.Relay.Name, m.ClientHost, m.ClientID, strings.TrimSuffix(prefix, "-"))
	}
	if tag := memberCapture(m.ClientID, prefix); tag != "" && tag != e.captureTag() {
		return fmt.Errorf("%w: instances of pipeline %s capture different things: member %s (%s) has other source.tables "+
			"or another topic mapping of the router (topic_prefix, topic_regex, topic_replacement, aggregate columns) than this one "+
			"(%s); taking over each other's checkpoint, one would never publish the rows of the tables only the other captures: "+
			"give every instance of one name the same source.tables and router (to change them on purpose: docs/cli.md, "+
			"\"A pipeline's identity\")", config.ErrInvalid, e.c.Relay.Name, m.ClientHost, m.ClientID,
			strings.Join(checkpoint.TablesOf(e.c.Relay.Source.Tables), ", "))
	}
	meta, ok := m.Join.AsConsumer()
	if !ok || len(meta.Topics) == 0 {
		return nil // between generations, a member may show no subscription
	}
	if len(meta.Topics) != 1 || meta.Topics[0] != e.id.topic {
		return fmt.Errorf("%w: instances of pipeline %s disagree on ha.lock_topic: this one uses %q, member %s (%s) "+
			"subscribes to %v; give every instance of one name the same settings", config.ErrInvalid,
			e.c.Relay.Name, e.id.topic, m.ClientHost, m.ClientID, meta.Topics)
	}
	return nil
}

// The lock group keeps, as the metadata of an offset committed for the
// lock topic's partition 0, the checkpoint topic of the last instance that
// held the lease. agree compares the members present; this record outlives
// them: after a rolling restart a lone instance with another
// kafka.checkpoint_topic would otherwise take the lease and publish from
// a position that is not the pipeline's (source.start, or an old
// checkpoint). Kafka keeps the record offsets.retention.minutes (7 days by
// default) after the group empties. A deliberate move to another
// checkpoint topic deletes the lock group first (docs/ha.md).
const claimPrefix = "outbox-relay checkpoint_topic="

// claimPrefixV2 starts the record once the pipeline has a checkpoint:
// "outbox-relay v2 checkpoint_topic=T topic_id=HEX", the id of the topic
// its checkpoints are in (the relay's identity.go). An older build reads it as another
// product's record and writes its own over it (the id is then unknown
// until a newer build writes it again).
const claimPrefixV2 = "outbox-relay v2 checkpoint_topic="

// parseClaim reads a record: the checkpoint topic and, in the v2 form, the
// topic's id; ours is false for a record that is neither form.
func parseClaim(meta string) (topic, id string, ours bool) {
	if rest, ok := strings.CutPrefix(meta, claimPrefixV2); ok {
		topic, rest, _ = strings.Cut(rest, " ")
		id, _ = strings.CutPrefix(rest, "topic_id=")
		return topic, id, true
	}
	if topic, ok := strings.CutPrefix(meta, claimPrefix); ok {
		return topic, "", true
	}
	return "", "", false
}

// claim checks the lock group's record of the pipeline's checkpoint topic
// and writes this instance's: a configuration error (config.ErrInvalid)
// when the record names another topic. It keeps the recorded topic id
// (recordedID) for the attempts of the term. Reading and writing the
// record are best effort: Kafka just assigned the lease, and a passing
// failure must not block a takeover.
func (e *Elector) claim(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, e.c.Relay.Kafka.RequestTimeout)
	defer cancel()
	want := claimPrefix + e.c.Relay.Kafka.CheckpointTopic
	e.recordedID = ""
	offs, err := kadm.NewClient(e.cl).FetchOffsets(ctx, e.id.group)
	if err != nil {
		e.c.Log.Warn().Err(err).Msg("read the lock group's checkpoint topic record: not checked")
		return nil
	}
	if o, ok := offs.Lookup(e.id.topic, 0); ok && o.Err == nil && o.Metadata != "" {
		if prev, id, ours := parseClaim(o.Metadata); ours && prev != e.c.Relay.Kafka.CheckpointTopic {
			return fmt.Errorf("%w: pipeline %s last published with kafka.checkpoint_topic %q, this instance uses %q: "+
				"taking over it would publish from another position; give every instance of one name the same settings, "+
				"or, moving the pipeline to another checkpoint topic on purpose, stop every instance and delete the lock group %s "+
				"(kafka-consumer-groups.sh --delete --group %s) first", config.ErrInvalid, e.c.Relay.Name, prev,
				e.c.Relay.Kafka.CheckpointTopic, e.id.group, e.id.group)
		} else if ours {
			e.recordedID = id
			return nil
		}
	}
	if err := e.commitClaim(ctx, want); err != nil {
		e.c.Log.Warn().Err(err).Msg("record the checkpoint topic in the lock group")
	}
	return nil
}

// RecordedID is the checkpoint topic id the lock group's record holds
// ("" when none): read when the term began (Acquire).
func (e *Elector) RecordedID() string { return e.recordedID }

// Mark records in the lock group that the pipeline's checkpoints are in
// the checkpoint topic with id (the relay's identity.go), unless the record says so
// already. Best effort: a failure is logged.
func (e *Elector) Mark(ctx context.Context, id string) {
	if id == "" || id == e.recordedID || e.cl == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, e.c.Relay.Kafka.RequestTimeout)
	defer cancel()
	if err := e.commitClaim(ctx, claimPrefixV2+e.c.Relay.Kafka.CheckpointTopic+" topic_id="+id); err != nil {
		e.c.Log.Warn().Err(err).Str("group", e.id.group).Msg("record the checkpoint topic's id in the lock group: a checkpoint topic deleted " +
			"and created again while every instance is stopped is not detected until it is")
		return
	}
	e.recordedID = id
}

// commitClaim writes meta as the metadata of the lock group's offset of
// the lock topic's partition 0.
func (e *Elector) commitClaim(ctx context.Context, meta string) error {
	// OffsetCommit v10+ names the topic by its id.
	tds, err := kadm.NewClient(e.cl).ListTopics(ctx, e.id.topic)
	if err != nil {
		return err
	}
	member, gen := e.cl.GroupMetadata()
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.MemberID, req.Generation, req.InstanceID = e.id.group, member, gen, &e.id.instance
	t := kmsg.NewOffsetCommitRequestTopic()
	t.Topic, t.TopicID = e.id.topic, tds[e.id.topic].ID
	pt := kmsg.NewOffsetCommitRequestTopicPartition()
	pt.Partition, pt.Offset, pt.Metadata = 0, 0, &meta
	t.Partitions = append(t.Partitions, pt)
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, e.cl)
	if err == nil {
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				err = errors.Join(err, kafkaerr.FromCode(rp.ErrorCode))
			}
		}
	}
	return err
}

// fingerprint names the settings every instance of a pipeline must share
// (a hash, carried in the lock group member's client id).
func (e *Elector) fingerprint() string {
	c := e.c.Relay
	h := fnv.New32a()
	for _, s := range []string{c.Kafka.CheckpointTopic, string(c.Kafka.Delivery), c.HA.LockTopic} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return "outbox-relay-" + strconv.FormatUint(uint64(h.Sum32()), 36)
}

// captureTag fingerprints what the pipeline publishes: its captured tables
// and, for each, the router settings that choose a record's topic and key
// (so its partition). Every member of the lock group must carry the same
// (agree).
func (e *Elector) captureTag() string {
	c := e.c.Relay
	h := fnv.New32a()
	for _, t := range checkpoint.TablesOf(c.Source.Tables) {
		rc := c.Router.For(t)
		for _, s := range []string{t, rc.TopicPrefix, rc.TopicRegex, rc.TopicReplacement, rc.AggregateTypeColumn, rc.AggregateIDColumn} {
			h.Write([]byte(s))
			h.Write([]byte{0})
		}
	}
	return "c" + strconv.FormatUint(uint64(h.Sum32()), 36)
}

// memberCapture is the capture tag in a member's client id; "" for a member
// of a build that did not carry one.
func memberCapture(clientID, prefix string) string {
	rest, ok := strings.CutPrefix(clientID, prefix)
	if !ok {
		return ""
	}
	tag, _, ok := strings.Cut(rest, ".")
	if !ok {
		return ""
	}
	return tag
}
