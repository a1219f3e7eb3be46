package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/inbox"
)

// notifierMain is the notification service (the demo binary run with
// --notifier): an inbox consumer that "sends" (prints) each alarm once. The
// notification row and the consumed_event marker commit in one local
// transaction, then the offset is committed. With --crash-after N it kills
// itself with SIGKILL right after the database commit of the N-th alarm it
// applies, before that offset commit: the next incarnation gets those
// records again and skips them as duplicates.
func notifierMain(dsn, broker, otlp string, crashAfter int) int {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		fmt.Println("notifier:", err)
		return 1
	}
	defer db.Close()
	tp, err := tracerProvider(context.Background(), otlp, "notifier")
	if err != nil {
		fmt.Println("notifier:", err)
		return 1
	}
	defer shutdown(tp)
	applied := 0
	store := &inbox.Store{DB: db, Name: "alarm-notification", TracerProvider: tp, AfterCommit: func(r *kgo.Record, o inbox.Outcome) {
		id, _ := inbox.EventID(r)
		if o == inbox.Duplicate {
			fmt.Printf("duplicate %s: already notified, skipped (record redelivered because the offset was never committed)\n", id)
			return
		}
		applied++
		if applied == crashAfter {
			fmt.Printf("CRASH: alarm %s is committed in the database; killing this process (SIGKILL) before the Kafka offset commit\n", id)
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			time.Sleep(time.Minute)
		}
	}}
	c, err := inbox.NewConsumer(store, "alarm-notification", []string{"outbox.event.alarm"}, kgo.SeedBrokers(broker),
		kgo.SessionTimeout(6*time.Second), kgo.HeartbeatInterval(time.Second))
	if err != nil {
		fmt.Println("notifier:", err)
		return 1
	}
	defer c.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = c.Run(ctx, func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
		id, _ := inbox.EventID(r)
		key, _ := inbox.IdempotencyKey(r) // what an SMS gateway call would carry
		if _, err := tx.ExecContext(ctx, "INSERT INTO notification (event_id, device_id, body) VALUES (?, ?, ?)", id, string(r.Key), string(r.Value)); err != nil {
			return err
		}
		fmt.Printf("NOTIFY device=%s alarm=%s (Idempotency-Key: %s)\n", r.Key, r.Value, key)
		return nil
	})
	if err != nil {
		fmt.Println("notifier:", err)
		return 1
	}
	return 0
}

// startNotifier runs this binary as the notification service.
func (p *procs) startNotifier(dsn, broker, otlp string, crashAfter int) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return p.start("notifier", self, "--notifier", "--dsn", dsn, "--kafka", broker, "--otlp", otlp, "--crash-after", fmt.Sprint(crashAfter))
}

// notifyRound shows window 4 closed: the notifier is killed between its
// database commit and its offset commit, restarted, and every committed
// alarm is notified exactly once.
func notifyRound(ctx context.Context, ps *procs, app *sql.DB, dsn, broker, otlp string, committed int) (*exec.Cmd, error) {
	fmt.Println("== the notification service (package inbox) consumes the alarms; it will be killed after its 3rd database commit")
	first, err := ps.startNotifier(dsn, broker, otlp, 3)
	if err != nil {
		return nil, err
	}
	waited := make(chan error, 1)
	go func() { waited <- first.Wait() }()
	select {
	case <-waited:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(60 * time.Second):
		return nil, fmt.Errorf("the notifier did not reach its crash point within 60s")
	}
	ps.forget(first)
	fmt.Println("== notifier killed between DB commit and offset commit; restarting it (Kafka delivers the uncommitted records again)")
	second, err := ps.startNotifier(dsn, broker, otlp, 0)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		var n, distinct int
		if err := app.QueryRowContext(ctx, "SELECT COUNT(*), COUNT(DISTINCT event_id) FROM notification").Scan(&n, &distinct); err != nil {
			return second, err
		}
		if distinct == committed {
			if n != distinct {
				return second, fmt.Errorf("%d notifications for %d alarms: an alarm was notified twice", n, distinct)
			}
			fmt.Printf("== %d alarms committed, %d notifications sent: each exactly once despite the crash\n", committed, n)
			return second, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return second, fmt.Errorf("%d of %d alarms notified within 60s", distinct, committed)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
