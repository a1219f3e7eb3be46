package ha

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/errclass"
	"github.com/outbox-relay/outbox-relay/internal/kafkaerr"
)

// liveMember is one member of a pipeline's lock group: a running relay
// instance (active or standby), or one killed (SIGKILL, a lost host) less
// than ha.session_timeout ago, whose session the coordinator has not ended
// yet. A relay that stops, cleanly or on an error, leaves the group first.
type liveMember struct {
	InstanceID string // its ha.instance_id (static membership)
	ClientID   string
	Host       string // the address the coordinator sees it from
}

func (m liveMember) String() string {
	s := "instance " + m.InstanceID
	if m.InstanceID == "" {
		s = "member " + m.ClientID
	}
	if m.Host != "" {
		s += " at " + strings.TrimPrefix(m.Host, "/")
	}
	return s
}

// ErrRelayLive is wrapped by RefuseLive's verdict when a
// relay of the pipeline is a member of its lock group.
var ErrRelayLive = errclass.New(errclass.Transient, "relay_live", "a relay of the pipeline is running")

// liveRelays returns the members of cfg's lock group (GroupID), asked with
// the Kafka connection options kopts: every
// running relay of the pipeline is one, whether it holds the lease or
// waits as a standby, and a relay that exited is none (it left the group),
// whatever the age of its last checkpoint. An error means it cannot tell.
func liveRelays(ctx context.Context, cfg config.Config, kopts []kgo.Opt) ([]liveMember, error) {
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return nil, fmt.Errorf("describe lock group %s: %w", clients.GroupID(cfg.Name), err)
	}
	defer cl.Close()
	groups, err := describeGroup(ctx, kadm.NewClient(cl), clients.GroupID(cfg.Name))
	if err != nil {
		return nil, fmt.Errorf("describe lock group %s: %w%s", clients.GroupID(cfg.Name), err, adminHint(err))
	}
	var out []liveMember
	for _, g := range groups {
		if kafkaerr.GroupUnknown(g.Err) {
			continue // never joined, or emptied and expired: no relay
		}
		if g.Err != nil {
			return nil, fmt.Errorf("describe lock group %s: %w%s", g.Group, g.Err, adminHint(g.Err))
		}
		for _, m := range g.Members {
			lm := liveMember{ClientID: m.ClientID, Host: m.ClientHost}
			if m.InstanceID != nil {
				lm.InstanceID = *m.InstanceID
			}
			out = append(out, lm)
		}
	}
	return out, nil
}

// describeGroup describes group, asking again while the group coordinator
// is not available yet (a new cluster creates __consumer_offsets at the
// first group request: a `checkpoint set` before any relay ran met it) or
// moving, until ctx ends.
func describeGroup(ctx context.Context, adm *kadm.Client, group string) (kadm.DescribedGroups, error) {
	for {
		groups, err := adm.DescribeGroups(ctx, group)
		loading := err
		if err == nil {
			loading = groups[group].Err
		}
		if !kafkaerr.CoordinatorMoving(loading) {
			return groups, err
		}
		select {
		case <-ctx.Done():
			return groups, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// adminHint names the ACL a refused describe lacks.
func adminHint(err error) string {
	if kafkaerr.GroupDenied(err) {
		return " (not permitted: grant the relay's principal DESCRIBE on the group)"
	}
	return ""
}

// RefuseLive is the liveness guard of the commands that change a
// pipeline's stored state under it (checkpoint set, skip, reset): nil when
// no relay of cfg's pipeline is running (its lock group has no member),
// else an error wrapping ErrRelayLive naming the instances and what to do;
// an error too when the group cannot be described (it cannot tell). With
// kafka.delivery at-least-once a running relay cannot be fenced (it writes
// no Kafka transactions, and its next checkpoint replaces what a command
// wrote), so the advice is to stop it, --force or not.
func RefuseLive(ctx context.Context, cfg config.Config, kopts []kgo.Opt) error {
	live, err := liveRelays(ctx, cfg, kopts)
	if err != nil {
		return fmt.Errorf("cannot tell whether a relay of %s is running: %w: stop every relay of %s, then pass --force", cfg.Name, err, cfg.Name)
	}
	if len(live) == 0 {
		return nil
	}
	names := make([]string, len(live))
	for i, m := range live {
		names[i] = m.String()
	}
	fix := "or pass --force to fence the running one (its open transaction is aborted and it starts again from what this writes)"
	if cfg.Kafka.Delivery != config.ExactlyOnce {
		fix = "--force cannot fence it: with kafka.delivery " + string(cfg.Kafka.Delivery) +
			" it writes no Kafka transactions, and its next checkpoint would replace this one"
	}
	return fmt.Errorf("%w: pipeline %s has %d relay instance(s) in its lock group %s (%s): stop them first "+
		"(one killed with SIGKILL stays a member up to ha.session_timeout, %s); %s",
		ErrRelayLive, cfg.Name, len(live), clients.GroupID(cfg.Name), strings.Join(names, ", "), cfg.HA.SessionTimeout, fix)
}
