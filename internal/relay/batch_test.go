package relay

import (
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

// testPolicy is a batch policy of 10 records or 1,000 bytes, max_wait
// 200 ms, a heartbeat every 10 s, on a clock the test moves (*now).
func testPolicy(delivery config.Delivery, now *time.Time) batchPolicy {
	k := config.Default().Kafka
	k.Delivery = delivery
	k.Batch.MaxRecords, k.Batch.MaxBytes, k.Batch.MaxWait = 10, 1000, 200*time.Millisecond
	k.CheckpointInterval, k.TransactionTimeout = 10*time.Second, time.Minute
	return newBatchPolicy(k, k.Batch.MaxRecords, func() time.Time { return *now })
}

// When a source transaction's end ends the batch: at a bound or past
// max_wait at once; caught up with the source at once, or once the seal in
// flight is answered; caught up with the reader only (far behind the
// source) once the reader stays quiet; otherwise not yet.
func TestBatchEndsAtATransactionsEnd(t *testing.T) {
	t0 := time.Now()
	for _, tc := range []struct {
		name             string
		records, bytes   int
		age              time.Duration // of the batch
		behind           time.Duration // the transaction's commit time before now
		caughtUp         bool
		sealing, wanted  bool
		sealNow, due     bool
		quiet, wantAfter bool
	}{
		{name: "empty: a checkpoint-only transaction waits for the tick", records: 0, caughtUp: true},
		{name: "at the records bound", records: 10, sealNow: true},
		{name: "at the bytes bound", records: 1, bytes: 1000, sealNow: true},
		{name: "past max_wait", records: 1, age: 200 * time.Millisecond, sealNow: true},
		{name: "more to read", records: 1},
		{name: "caught up at the head", records: 1, caughtUp: true, due: true},
		{name: "caught up at the head, a seal in flight", records: 1, caughtUp: true, sealing: true, due: true},
		{name: "caught up with the reader far behind the source", records: 1, caughtUp: true, behind: 5 * time.Second, quiet: true},
		{name: "wanted since, far behind", records: 1, caughtUp: true, behind: time.Hour, wanted: true, due: true, wantAfter: true},
		{name: "wanted since, more to read", records: 1, wanted: true, due: true, wantAfter: true},
	} {
		now := t0
		b := testPolicy(config.ExactlyOnce, &now)
		if tc.records > 0 {
			b.join(tc.records, tc.bytes, false)
		}
		b.want = tc.wanted
		now = t0.Add(tc.age)
		sealNow, due := b.ended(now.Add(-tc.behind), tc.caughtUp, tc.sealing)
		if sealNow != tc.sealNow || due != tc.due || b.quiet != tc.quiet || b.want != tc.wantAfter {
			t.Errorf("%s: sealNow %v due %v quiet %v want %v; want %v %v %v %v", tc.name, sealNow, due, b.quiet, b.want,
				tc.sealNow, tc.due, tc.quiet, tc.wantAfter)
		}
	}
}

// A due batch is sealed at once, or wanted while a seal is in flight and
// sealed once it is answered; an answer with no batch open forgets it.
func TestBatchDueWhileASealIsInFlight(t *testing.T) {
	now := time.Now()
	b := testPolicy(config.ExactlyOnce, &now)
	if b.due(false) {
		t.Fatal("an empty batch is due")
	}
	b.join(1, 10, false)
	if !b.due(false) {
		t.Fatal("a due batch without a seal in flight is not sealed")
	}
	if b.due(true) || !b.want {
		t.Fatal("a due batch with a seal in flight: sealed, or not wanted")
	}
	if !b.answered() {
		t.Fatal("the wanted batch is not sealed once the seal in flight is answered")
	}
	b.sealed(now)
	if b.want || b.open() || b.answered() {
		t.Fatal("sealed: still wanted or open")
	}
	b.want = true
	if b.answered() || b.want {
		t.Fatal("an answer with no batch open kept it wanted")
	}
}

// The quiet window (catch-up) is forgotten once over, and by a hand-off.
func TestBatchQuietOnce(t *testing.T) {
	now := time.Now()
	b := testPolicy(config.ExactlyOnce, &now)
	b.join(1, 10, false)
	b.ended(now.Add(-time.Hour), true, false)
	if !b.quietOver() || b.quietOver() {
		t.Fatal("the quiet window is not over exactly once")
	}
}

// The tick: the open batch past max_wait (or, exactly-once, past half the
// transaction timeout: one outbox row then minutes of other tables' rows
// must not let the broker abort it); with none open a heartbeat every
// checkpoint interval, but not while replaying nor with a seal in flight.
func TestBatchTick(t *testing.T) {
	t0 := time.Now()
	for _, tc := range []struct {
		name      string
		delivery  config.Delivery
		open      bool
		maxWait   time.Duration
		after     time.Duration
		sealing   bool
		replaying bool
		want      bool
	}{
		{name: "open, young", delivery: config.ExactlyOnce, open: true, after: 100 * time.Millisecond},
		{name: "open, past max_wait", delivery: config.ExactlyOnce, open: true, after: 200 * time.Millisecond, want: true},
		{name: "open, a seal in flight", delivery: config.ExactlyOnce, open: true, after: time.Hour, sealing: true},
		{name: "exactly-once, half the transaction timeout", delivery: config.ExactlyOnce, open: true, maxWait: time.Hour, after: 30 * time.Second, want: true},
		{name: "at-least-once, no transaction timeout", delivery: config.AtLeastOnce, open: true, maxWait: time.Hour, after: 30 * time.Second},
		{name: "idle, before the heartbeat", delivery: config.ExactlyOnce, after: 9 * time.Second},
		{name: "idle, heartbeat", delivery: config.ExactlyOnce, after: 10 * time.Second, want: true},
		{name: "idle, replaying", delivery: config.ExactlyOnce, after: time.Hour, replaying: true},
	} {
		now := t0
		b := testPolicy(tc.delivery, &now)
		if tc.maxWait > 0 {
			b.maxWait = tc.maxWait
		}
		if tc.open {
			b.join(1, 10, false)
		}
		now = t0.Add(tc.after)
		if got := b.tick(tc.sealing, tc.replaying); got != tc.want {
			t.Errorf("%s: seal %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Sealing hands over the batch's records, counts by topic and part, and
// starts the next one (and the heartbeat's interval) afresh.
func TestBatchSealedStartsAfresh(t *testing.T) {
	t0 := time.Now()
	now := t0
	b := testPolicy(config.ExactlyOnce, &now)
	b.join(3, 30, false)
	pub, dead := topicOutcome{"t", "published"}, topicOutcome{"u", "dead_letter"}
	for _, to := range []topicOutcome{pub, pub, dead} { // counted in runs of one topic and outcome
		b.counted(to)
	}
	b.join(2, 20, true)
	b.counted(pub)
	b.counted(pub)
	if !b.over(5, 0) || b.over(4, 0) || !b.fillsAlone(10, 0) || b.fillsAlone(9, 999) {
		t.Fatal("bounds of 5 records in the batch, 10 records or 1,000 bytes a batch")
	}
	now = t0.Add(time.Second)
	records, topics, part := b.sealed(now)
	if records != 5 || topics[pub] != 4 || topics[dead] != 1 || len(topics) != 2 || !part {
		t.Fatalf("sealed %d records, topics %v, part %v", records, topics, part)
	}
	if b.open() || b.part || len(b.topics) != 0 || b.runCount != 0 || b.bytes != 0 || !b.lastSeal.Equal(now) {
		t.Fatal("the next batch does not start afresh")
	}
	b.counted(dead)
	if _, topics, _ := b.sealed(now); topics[dead] != 1 || len(topics) != 1 {
		t.Fatalf("the next batch's topics %v", topics)
	}
	now = t0.Add(10 * time.Second)
	if b.tick(false, false) {
		t.Fatal("a heartbeat 9 s after the last seal")
	}
}
