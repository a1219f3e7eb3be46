package preflight

// The Kafka half of check: the cluster, the checkpoint topic and its
// committed checkpoint, the target topics and the principal's rights.

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/ha"
	"github.com/outbox-relay/outbox-relay/internal/kafkaerr"
)

// checkKafka checks the cluster and returns what it learned of the
// checkpoint.
func checkKafka(ctx context.Context, cfg config.Config, k clients.Kafka, c collector) checked {
	cl, err := kgo.NewClient(k.Admin()...)
	if err != nil {
		c.add("connect", Fail, err.Error(), "check kafka.brokers")
		return checked{}
	}
	defer cl.Close()
	pctx, cancel := context.WithTimeout(ctx, cfg.Kafka.RequestTimeout)
	defer cancel()
	if err := cl.Ping(pctx); err != nil {
		c.add("connect", Fail, fmt.Sprintf("%v: %v", cfg.Kafka.Brokers, err), "check kafka.brokers and that the cluster runs")
		return checked{}
	}
	c.add("connect", Pass, strings.Join(cfg.Kafka.Brokers, ","), "")
	adm := kadm.NewClient(cl)
	versions, err := adm.ApiVersions(pctx)
	txns := err == nil
	if err == nil {
		versions.Each(func(v kadm.BrokerApiVersions) {
			if v.Err != nil {
				txns = false
				return
			}
			if _, ok := v.KeyMaxVersion(26); !ok { // EndTxn
				txns = false
			}
		})
	}
	switch {
	case txns:
		c.add("transactions", Pass, "brokers support transactions", "")
	case cfg.Kafka.Delivery == config.AtLeastOnce:
		c.add("transactions", Pass, "not needed: kafka.delivery is at-least-once", "")
	default:
		c.add("transactions", Fail, "the brokers do not support transactions", "upgrade the brokers or set kafka.delivery: at-least-once")
	}
	topics, err := adm.ListTopics(pctx)
	if err != nil {
		c.add("topics", Fail, err.Error(), "")
		return checked{}
	}
	// The checkpoint judged as `run` judges it (ha.LoadJudged): a pipeline
	// that had one and finds none is a lost checkpoint, not a first start.
	loaded, j, loadErr := ha.LoadJudged(pctx, cfg, k, k.CheckpointStore())
	lost := loadErr == nil && j.Verdict == checkpoint.Lost
	undecided := loadErr == nil && j.Verdict == checkpoint.Undecided
	if d, ok := topics[cfg.Kafka.CheckpointTopic]; !ok {
		switch {
		case lost:
			c.add("checkpoint topic", Fail, cfg.Kafka.CheckpointTopic+" does not exist, and the pipeline had checkpoints in it: see the item committed checkpoint", lostFix)
		case undecided:
			c.add("checkpoint topic", Warn, cfg.Kafka.CheckpointTopic+" does not exist: not yet created, or deleted; see the item committed checkpoint", "")
		default:
			c.add("checkpoint topic", Pass, cfg.Kafka.CheckpointTopic+" does not exist yet: the relay creates it compacted with 1 partition", "")
		}
	} else {
		checkCheckpointTopic(pctx, adm, cfg, d, c)
	}
	res := checked{cp: loaded.Checkpoint, judged: j}
	switch {
	case loadErr != nil:
		c.add(committedItem, Fail, loadErr.Error(), "")
		res.judged = checkpoint.Judgement{}
	case lost:
		c.items.fail(committedItem, j.Say, lostFix, j.Err, c.target)
	case undecided:
		c.add(committedItem, Fail, j.Say, "grant the principal DESCRIBE on the group "+clients.GroupID(cfg.Name)+" and the topic "+cfg.HA.LockTopic+
			" (the relay's principal has them: READ), or run check as the relay's principal")
	case j.Verdict == checkpoint.Present:
		c.add(committedItem, Pass, fmt.Sprintf("%s at %s", j.Say, loaded.Checkpoint.GTIDSet), "")
	default:
		c.add(committedItem, Pass, j.Say, "")
	}
	checkTargetTopics(pctx, adm, cfg, topics, c)
	checkACLs(pctx, cl, cfg, topics, c)
	return res
}

// committedItem names kafka's item of the committed checkpoint (each host
// has its own item "checkpoint": its binlogs after it).
const committedItem = "committed checkpoint"

// lostFix is the way out of a lost checkpoint (checkpoint.ErrLost).
const lostFix = "restore the position with `outbox-relay checkpoint set --config FILE --gtid SET` (the GTID set the pipeline had published: " +
	"its consumers' newest records tell), or start at source.start on purpose with `outbox-relay checkpoint reset --config FILE --yes`"

// checked is what the Kafka half learned of the checkpoint: the committed
// one (nil when none), and the judgement of its absence.
type checked struct {
	cp     *checkpoint.Checkpoint
	judged checkpoint.Judgement
}

func checkCheckpointTopic(ctx context.Context, adm *kadm.Client, cfg config.Config, d kadm.TopicDetail, c collector) {
	name := "checkpoint topic"
	if n := len(d.Partitions); n != 1 {
		c.add(name, Fail, fmt.Sprintf("%s has %d partitions", d.Topic, n), "use a topic with exactly one partition (kafka.checkpoint_topic)")
		return
	}
	rc, err := adm.DescribeTopicConfigs(ctx, d.Topic)
	if err == nil {
		_, err = rc.On(d.Topic, nil)
	}
	if kafkaerr.TopicOrClusterDenied(err) {
		c.add(name, Warn, d.Topic+": 1 partition; cleanup.policy unknown: the principal may not describe its configuration (optional)",
			"make sure "+d.Topic+" has cleanup.policy=compact")
		return
	}
	if err != nil {
		c.add(name, Fail, err.Error(), "")
		return
	}
	policy := ""
	values := map[string]string{}
	if cfgs, err := rc.On(d.Topic, nil); err == nil {
		for _, e := range cfgs.Configs {
			if e.Value != nil {
				values[e.Key] = *e.Value
			}
			if e.Key == "cleanup.policy" {
				policy = e.MaybeValue()
			}
		}
	}
	if !strings.Contains(policy, "compact") {
		c.add(name, Fail, fmt.Sprintf("%s has cleanup.policy=%s", d.Topic, orUnset(policy)),
			"kafka-configs --alter --entity-type topics --entity-name "+d.Topic+" --add-config cleanup.policy=compact")
		return
	}
	if why := checkpoint.DeletesByAge(values); why != "" {
		c.add(name, Fail, fmt.Sprintf("%s has %s: the broker deletes checkpoints by age or size besides compacting them", d.Topic, why),
			"kafka-configs --alter --entity-type topics --entity-name "+d.Topic+" --add-config cleanup.policy=compact")
		return
	}
	c.add(name, Pass, d.Topic+": 1 partition, compacted", "")
}

func checkTargetTopics(ctx context.Context, adm *kadm.Client, cfg config.Config, topics kadm.TopicDetails, c collector) {
	names := eventTopics(cfg, topics)
	if len(names) == 0 {
		c.add("target topics", Pass, "none yet: the relay creates them with kafka.topic_partitions and kafka.replication_factor", "")
		return
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, names...)
	if kafkaerr.TopicOrClusterDenied(err) {
		rcs, err = nil, nil // least privilege: no DESCRIBE_CONFIGS; min.insync.replicas unknown
	}
	if err != nil {
		c.add("target topics", Fail, err.Error(), "")
		return
	}
	for _, name := range names {
		d := topics[name]
		rf := 0
		for _, p := range d.Partitions {
			rf = len(p.Replicas)
		}
		minISR := 1
		if rc, err := rcs.On(name, nil); err == nil {
			for _, e := range rc.Configs {
				if e.Key == "min.insync.replicas" {
					if v, err := strconv.Atoi(e.MaybeValue()); err == nil {
						minISR = v
					}
				}
			}
		}
		detail := fmt.Sprintf("replication factor %d, min.insync.replicas %d", rf, minISR)
		switch {
		case minISR > rf:
			c.add("topic "+name, Fail, detail+": acks=all writes fail", "lower min.insync.replicas or add replicas")
		case rf < 3 || minISR < 2:
			c.add("topic "+name, Warn, detail+": a broker failure can lose or block records",
				"for production use replication factor 3 and min.insync.replicas 2")
		default:
			c.add("topic "+name, Pass, detail, "")
		}
	}
}
