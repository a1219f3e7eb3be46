package main

import (
	"fmt"
	"os"
	"os/user"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
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

// reachedBy refuses, unless force, a position that names transactions the
// server srv has not executed (binlog.Server.Unexecuted): a typo, or a
// position of another server. The relay could never resume there: it
// would wait for the server to catch up, or stop calling the server
// diverged. With force it is stored anyway (a replica that has not yet
// received those transactions), with a warning.
func reachedBy(srv *binlog.Server, pos string, force bool) error {
	rel, why, err := srv.Relate(pos)
	if err != nil {
		return err
	}
	if rel == binlog.Contains {
		return nil
	}
	what := fmt.Sprintf("the source %s cannot serve --gtid %s: %s", srv.Addr, pos, why)
	if missing, err := srv.Unexecuted(pos); err == nil && missing != "" {
		what = fmt.Sprintf("the source %s has not executed %s of --gtid %s (its binlog holds %s)", srv.Addr, missing, pos, srv.State)
	}
	if !force {
		return fmt.Errorf("refuse checkpoint set: %s: a typo, or a position of another server? The relay could not resume there "+
			"(it would wait for the server, or stop on it as diverged). Give a GTID set the server has executed (`--to now` is its "+
			"current one), or pass --force to store it anyway (for a source that has not received those transactions yet)", what)
	}
	fmt.Fprintf(os.Stderr, "warning: %s: stored anyway (--force): the relay resumes only from a source host that has executed them\n", what)
	return nil
}
