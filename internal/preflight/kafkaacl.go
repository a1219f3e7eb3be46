package preflight

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/kafkaerr"
)

// What the relay's principal needs on Kafka (least privilege, topics
// created beforehand): READ and WRITE on the checkpoint topic, WRITE on
// each event topic (and the dead-letter topic), READ on the lock topic and
// the lock group, WRITE on each transactional id (exactly-once: one per lane,
// kafka.transaction_lanes). CREATE and
// DESCRIBE_CONFIGS are optional: without them the relay uses topics as they
// exist. checkACLs asks the brokers what this principal may do (KIP-430
// authorized operations, DescribeTransactions, DescribeGroups) and lists,
// per resource, exactly the ACLs that are missing with the kafka-acls
// command that adds them.

type aclNeed struct {
	kind, name string // kafka-acls resource: topic, group, transactional-id
	ops        []kmsg.ACLOperation
}

// checkACLs adds one "acl ..." item per resource the relay uses.
func checkACLs(ctx context.Context, cl *kgo.Client, cfg config.Config, existing kadm.TopicDetails, c collector) {
	adm := kadm.NewClient(cl)
	principal := "User:<the relay's principal>"
	if u := cfg.Kafka.SASL.User; u != "" {
		principal = "User:" + u
	}
	fix := func(kind, name string, ops []kmsg.ACLOperation) string {
		var parts []string
		for _, op := range ops {
			parts = append(parts, "--operation "+aclOpName(op))
		}
		return fmt.Sprintf("kafka-acls.sh --bootstrap-server %s --add --allow-principal %s %s --%s %s",
			cfg.Kafka.Brokers[0], principal, strings.Join(parts, " "), kind, name)
	}
	canCreate := clusterCanCreate(ctx, cl)

	needs := []aclNeed{
		{"topic", cfg.Kafka.CheckpointTopic, []kmsg.ACLOperation{kmsg.ACLOperationRead, kmsg.ACLOperationWrite}},
		{"topic", cfg.HA.LockTopic, []kmsg.ACLOperation{kmsg.ACLOperationRead}},
	}
	for _, t := range eventTopics(cfg, existing) {
		needs = append(needs, aclNeed{"topic", t, []kmsg.ACLOperation{kmsg.ACLOperationWrite}})
	}
	for _, t := range deadLetterTopics(cfg) {
		if !slices.ContainsFunc(needs, func(n aclNeed) bool { return n.name == t }) {
			needs = append(needs, aclNeed{"topic", t, []kmsg.ACLOperation{kmsg.ACLOperationWrite}})
		}
	}
	for _, n := range needs {
		name := "acl topic " + n.name
		md, err := adm.Metadata(kadm.WithAuthorizedOps(ctx), n.name)
		var d kadm.TopicDetail
		if err == nil {
			d = md.Topics[n.name]
			err = d.Err
		}
		switch {
		case kafkaerr.TopicDenied(err):
			c.add(name, Fail, "the principal may not even describe "+n.name, fix("topic", n.name, n.ops))
			continue
		case kafkaerr.UnknownTopic(err):
			if canCreate == "yes" {
				c.add(name, Pass, n.name+" does not exist yet; the principal may create it (CREATE on the cluster)", "")
			} else {
				c.add(name, Warn, n.name+" does not exist, and the principal may not create it "+canCreate,
					"create "+n.name+" beforehand (see docs/kafka-acls.md), or: "+fix("topic", n.name, []kmsg.ACLOperation{kmsg.ACLOperationCreate}))
			}
			continue
		case err != nil:
			c.add(name, Warn, "cannot tell: "+err.Error(), "")
			continue
		}
		if len(d.AuthorizedOperations) == 0 {
			c.add(name, Warn, "cannot tell: the brokers do not report authorized operations (Kafka < 2.3)", fix("topic", n.name, n.ops))
			continue
		}
		var missing []kmsg.ACLOperation
		for _, op := range n.ops {
			if !allows(d.AuthorizedOperations, op) {
				missing = append(missing, op)
			}
		}
		if len(missing) > 0 {
			c.add(name, Fail, "missing "+opNames(missing), fix("topic", n.name, missing))
		} else {
			c.add(name, Pass, opNames(n.ops), "")
		}
	}

	group := clients.GroupID(cfg.Name)
	var g kadm.DescribedGroup
	err := retryCoordinator(ctx, func() error {
		gs, err := adm.DescribeGroups(ctx, group)
		if err == nil {
			g = gs[group]
			err = g.Err
		}
		return err
	})
	read := []kmsg.ACLOperation{kmsg.ACLOperationRead}
	switch {
	case kafkaerr.GroupDenied(err):
		c.add("acl group "+group, Fail, "missing READ (the lease of the active instance)", fix("group", group, read))
	case kafkaerr.GroupUnknown(err):
		c.add("acl group "+group, Pass, "the principal may describe it; no instance has joined yet, so READ shows once one has", "")
	case err != nil:
		c.add("acl group "+group, Warn, "cannot tell: "+err.Error(), "")
	case len(g.AuthorizedOperations) > 0 && !allows(g.AuthorizedOperations, kmsg.ACLOperationRead):
		c.add("acl group "+group, Fail, "missing READ (the lease of the active instance)", fix("group", group, read))
	default:
		c.add("acl group "+group, Pass, "READ", "")
	}

	if cfg.Kafka.Delivery != config.ExactlyOnce {
		return
	}
	write := []kmsg.ACLOperation{kmsg.ACLOperationWrite}
	// Every lane's transactional id (kafka.transaction_lanes).
	for _, id := range checkpoint.TransactionalIDs(cfg.Name)[:cfg.Kafka.TransactionLanes] {
		err = retryCoordinator(ctx, func() error {
			txns, err := adm.DescribeTransactions(ctx, id)
			if err == nil {
				if t, ok := txns[id]; ok {
					err = t.Err
				}
			}
			return err
		})
		switch {
		case err == nil, kafkaerr.TxnIDUnknown(err):
			c.add("acl transactional-id "+id, Pass, "the principal may use it", "")
		case kafkaerr.TxnIDDenied(err):
			c.add("acl transactional-id "+id, Fail, "missing WRITE (exactly-once transactions)", fix("transactional-id", id, write))
		default:
			c.add("acl transactional-id "+id, Warn, "cannot tell: "+err.Error(), "")
		}
	}
}

// retryCoordinator retries fn while the coordinator is not ready (a new
// cluster creates its internal topics on the first request), up to 10 s.
func retryCoordinator(ctx context.Context, fn func() error) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := fn()
		if !kafkaerr.CoordinatorMoving(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// clusterCanCreate answers "yes", or why not / why it cannot tell.
func clusterCanCreate(ctx context.Context, cl *kgo.Client) string {
	req := kmsg.NewPtrDescribeClusterRequest()
	req.IncludeClusterAuthorizedOperations = true
	resp, err := req.RequestWith(ctx, cl)
	switch {
	case err != nil:
		return "(cannot tell: " + err.Error() + ")"
	case resp.ErrorCode != 0:
		return "(cannot tell: " + kafkaerr.FromCode(resp.ErrorCode).Error() + ")"
	}
	ops := kadm.DecodeACLOperations(resp.ClusterAuthorizedOperations)
	if len(ops) == 0 {
		return "(cannot tell: the brokers report no cluster operations)"
	}
	if allows(ops, kmsg.ACLOperationCreate) {
		return "yes"
	}
	return "(no CREATE on the cluster)"
}

func deadLetterTopics(cfg config.Config) []string {
	var out []string
	for _, t := range append([]string{""}, cfg.Source.Tables...) {
		r := cfg.Router
		if t != "" {
			r = r.For(t)
		}
		if r.OnError != "dead-letter" {
			continue
		}
		name := r.DeadLetterTopic
		if name == "" {
			name = "outbox-relay.dead-letter." + cfg.Name
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

// allows reports whether ops grants op (ALL grants everything).
func allows(ops []kmsg.ACLOperation, op kmsg.ACLOperation) bool {
	for _, o := range ops {
		if o == op || o == kmsg.ACLOperationAll {
			return true
		}
	}
	return false
}

func aclOpName(op kmsg.ACLOperation) string {
	switch op {
	case kmsg.ACLOperationRead:
		return "Read"
	case kmsg.ACLOperationWrite:
		return "Write"
	case kmsg.ACLOperationCreate:
		return "Create"
	case kmsg.ACLOperationDescribe:
		return "Describe"
	case kmsg.ACLOperationDescribeConfigs:
		return "DescribeConfigs"
	}
	return op.String()
}

func opNames(ops []kmsg.ACLOperation) string {
	var s []string
	for _, op := range ops {
		s = append(s, strings.ToUpper(aclOpName(op)))
	}
	return strings.Join(s, " and ")
}
