package main

import (
	"context"
	"fmt"
	"os"
	"os/user"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/source"
)

// operatorMark is the checkpoint.Operator of a record command writes over
// a checkpoint at from ("" when there was none): who, where and when.
func operatorMark(command, from string) *checkpoint.Operator {
	who := "unknown"
	if u, err := user.Current(); err == nil {
		who = u.Username
	}
	if h, err := os.Hostname(); err == nil {
		who += "@" + h
	}
	return &checkpoint.Operator{Command: command, Time: time.Now().UTC(), User: who, From: from}
}

// reachedBy refuses, unless force, checkpoint command's new position pos
// when it names transactions the server srv has not executed
// (binlog.Server.Unexecuted): a typo, or a position of another server. The
// relay could never resume there: it would wait for the server to catch
// up, or stop calling the server diverged. With force it is stored anyway
// (a replica that has not yet received those transactions), with a
// warning.
func reachedBy(srv *binlog.Server, command, pos string, force bool) error {
	rel, why, err := source.RelateHost(srv, pos)
	if err != nil {
		return err
	}
	if rel == source.Contains {
		return nil
	}
	what := fmt.Sprintf("the source %s cannot serve %s: %s", srv.Addr, pos, why)
	if missing, err := source.Unexecuted(srv, pos); err == nil && missing != "" {
		what = fmt.Sprintf("the source %s has not executed %s (its binlog holds %s)", srv.Addr, missing, srv.State)
	}
	if !force {
		return fmt.Errorf("refuse checkpoint %s to %s: %s: a typo, or a position of another server? The relay could not resume there "+
			"(it would wait for the server, or stop on it as diverged). Give GTIDs the server has executed, or pass --force to store it "+
			"anyway (for a source that has not received those transactions yet)", command, pos, what)
	}
	fmt.Fprintf(os.Stderr, "warning: %s: stored anyway (--force): the relay resumes only from a source host that has executed them\n", what)
	return nil
}

// skipReached is reachedBy for checkpoint skip's new set, when the source
// can be asked: skip needs only Kafka, so a source it cannot inspect is a
// warning, not a refusal.
func skipReached(ctx context.Context, cfg config.Config, pos string, force bool) error {
	src, err := clients.Source(cfg)
	if err != nil {
		return err
	}
	srv, err := source.Inspect(ctx, src)
	if err != nil {
		fmt.Fprintf(os.Stderr, "warning: not checked against the source (%v): that it has executed %s\n", err, pos)
		return nil
	}
	return reachedBy(srv, "skip", pos, force)
}

// ensureCheckpointTopic creates the checkpoint topic, compacted with one
// partition, when it is missing, as the relay does: an operator may restore
// a pipeline whose topic is gone (or moved to a new one) before any relay
// ran, and a produce to it would fail on the unknown topic, or leave one a
// broker auto-created with its defaults (not compacted: the relay refuses it).
func ensureCheckpointTopic(ctx context.Context, cfg config.Config, store *checkpoint.Store) error {
	k, err := clients.NewKafka(cfg)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(k.Admin()...)
	if err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	defer cl.Close()
	return store.EnsureTopic(ctx, kadm.NewClient(cl), cfg.Kafka.ReplicationFactor)
}
