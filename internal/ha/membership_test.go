package ha

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/kafkatest"
)

// The lock group's capture fingerprint tells instances of one name that
// capture other tables, or map them to other topics, apart; the order of
// source.tables does not matter, and a member of an older build (no tag in
// its client id) is not compared.
func TestCaptureTagNamesWhatAPipelinePublishes(t *testing.T) {
	tag := func(edit func(*config.Config)) string {
		cfg := config.Default()
		cfg.Name = "p"
		cfg.Source.Tables = []string{"app.outbox", "app.audit"}
		edit(&cfg)
		return (&Elector{c: Config{Relay: cfg}}).captureTag()
	}
	base := tag(func(*config.Config) {})
	if got := tag(func(c *config.Config) { c.Source.Tables = []string{"app.audit", "app.outbox"} }); got != base {
		t.Fatalf("reordered source.tables: tag %s, want %s", got, base)
	}
	for name, edit := range map[string]func(*config.Config){
		"fewer tables":  func(c *config.Config) { c.Source.Tables = []string{"app.outbox"} },
		"other table":   func(c *config.Config) { c.Source.Tables = []string{"app.outbox", "app.audit2"} },
		"topic prefix":  func(c *config.Config) { c.Router.TopicPrefix = "other." },
		"aggregate key": func(c *config.Config) { c.Router.AggregateIDColumn = "tenant_id" },
	} {
		if got := tag(edit); got == base {
			t.Errorf("%s: the same tag %s", name, got)
		}
	}
	prefix := "outbox-relay-abc-"
	if got := memberCapture(prefix+base+".xyz", prefix); got != base {
		t.Fatalf("memberCapture of a tagged client id: %q, want %q", got, base)
	}
	if got := memberCapture(prefix+"xyz", prefix); got != "" {
		t.Fatalf("memberCapture of an older build's client id: %q, want none", got)
	}
}

// A standby that captures other tables than the lease holder refuses at
// once with a configuration error naming the difference, rather than at
// the failover it waits for (taking over the holder's checkpoint it would
// never publish the rows of the tables only the holder captures). A
// standby that agrees with the holder waits on, and the holder keeps its
// lease.
func TestStandbyRefusesAHolderThatCapturesOtherTables(t *testing.T) {
	realTime(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, held, bDone, cDone := holderAndTwoStandbys(ctx, t)
	select {
	case r := <-bDone:
		if !errors.Is(r.err, config.ErrInvalid) || !strings.Contains(r.err.Error(), "capture different things") ||
			!strings.Contains(r.err.Error(), "standby") {
			t.Fatalf("the standby that captures other tables: lease %v, %v; want a configuration error saying so", r.l != nil, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the standby that captures other tables was still waiting for the lease after 10 s")
	}
	// c has compared itself with the holder (its first check comes within a
	// second of Acquire) and waits on.
	select {
	case r := <-cDone:
		t.Fatalf("the standby that agrees with the holder stopped waiting: lease %v, %v", r.l != nil, r.err)
	case <-time.After(2 * time.Second):
	}
	if err := held.Err(); err != nil {
		t.Fatalf("the holder lost its lease to a misconfigured standby: %v", err)
	}
}

// A lease handed over in a lock group whose live members capture different
// tables ends in a configuration error naming the difference, whichever
// member gets the lease and whether or not the other one was in the group
// when it did: the one that gets it refuses (agree), or the other one
// refuses as its standby (agreeWithHolder).
func TestHandOverAmongMembersThatCaptureOtherTablesIsRefused(t *testing.T) {
	realTime(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, held, bDone, cDone := holderAndTwoStandbys(ctx, t)
	a.End(held) // the holder stops cleanly
	a.Leave()
	deadline := time.After(20 * time.Second)
	for {
		var r acquireOutcome
		select {
		case r = <-bDone:
		case r = <-cDone:
		case <-deadline:
			t.Fatal("no member refused within 20 s of the hand-over among members that capture different things")
		}
		if r.err == nil {
			continue // the lease taken: the other member must refuse
		}
		if !errors.Is(r.err, config.ErrInvalid) || !strings.Contains(r.err.Error(), "capture different things") {
			t.Fatalf("refusal %v, want a configuration error saying the members capture different things", r.err)
		}
		return
	}
}

// holderAndTwoStandbys starts a lock group whose holder a (lease held)
// captures app.outbox, then two members waiting for the lease: one that
// captures app.outbox and app.audit (b) and one that captures app.outbox
// as the holder does (c).
func holderAndTwoStandbys(ctx context.Context, t *testing.T) (a *Elector, held *Lease, bDone, cDone <-chan acquireOutcome) {
	t.Helper()
	ec := kafkatest.NewElection(t)
	a = capturing(t, ec, "app.outbox")
	held, err := a.Acquire(ctx)
	if err != nil || held == nil {
		t.Fatalf("the only member acquires the lease: %v", err)
	}
	b, c := capturing(t, ec, "app.outbox", "app.audit"), capturing(t, ec, "app.outbox")
	return a, held, acquireResult(ctx, b), acquireResult(ctx, c)
}

type acquireOutcome struct {
	l   *Lease
	err error
}

// acquireResult returns a channel that gets what e.Acquire returns.
func acquireResult(ctx context.Context, e *Elector) <-chan acquireOutcome {
	ch := make(chan acquireOutcome, 1)
	go func() {
		l, err := e.Acquire(ctx)
		ch <- acquireOutcome{l, err}
	}()
	return ch
}

// capturing is a joined member of ec's pipeline that captures tables.
func capturing(t *testing.T, ec *kafkatest.Election, tables ...string) *Elector {
	t.Helper()
	c := electionConfig(ec)
	c.Relay.Source.Tables = tables
	return joined(t, c)
}

// holdDescribe makes ec's coordinator hold the next DescribeGroups request
// after arm is called, unanswered until the test ends; held gets a value
// once it holds one.
func holdDescribe(ec *kafkatest.Election) (arm func(), held <-chan struct{}) {
	var armed atomic.Bool
	ch := make(chan struct{}, 1)
	ec.C.ControlKey(int16(kmsg.DescribeGroups), func(kmsg.Request) (kmsg.Response, error, bool) {
		ec.C.KeepControl()
		if armed.CompareAndSwap(true, false) {
			ch <- struct{}{}
			ec.C.SleepControl(func() { <-ec.Released() })
		}
		return nil, nil, false
	})
	return func() { armed.Store(true) }, ch
}

// A standby stopped (SIGTERM) while its check of the lease holder waits
// for the coordinator returns at once without a lease or an error, and
// does not warn that the holder's settings went unchecked: nothing was
// skipped, the instance is stopping.
func TestStandbyStoppedDuringItsCheckOfTheHolderDoesNotWarn(t *testing.T) {
	realTime(t)
	ec := kafkatest.NewElection(t)
	a := capturing(t, ec, "app.outbox")
	held, err := a.Acquire(context.Background())
	if err != nil || held == nil {
		t.Fatalf("the only member acquires the lease: %v", err)
	}
	arm, describing := holdDescribe(ec)
	var logs syncBuffer
	c := electionConfig(ec)
	c.Relay.Source.Tables = []string{"app.outbox"}
	c.Log = zerolog.New(&logs)
	b := joined(t, c)
	arm()
	ctx, stop := context.WithCancel(context.Background())
	bDone := acquireResult(ctx, b)
	select {
	case <-describing:
	case <-time.After(10 * time.Second):
		t.Fatal("the standby did not check the lease holder within 10 s")
	}
	stop()
	select {
	case r := <-bDone:
		if r.l != nil || r.err != nil {
			t.Fatalf("the standby stopped during its check: lease %v, %v; want neither", r.l != nil, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the standby did not return within 5 s of its stop")
	}
	if strings.Contains(logs.String(), "not checked") {
		t.Fatalf("a stop during the check logged a warning: %s", logs.String())
	}
}

// syncBuffer is a log sink the elector's goroutines may write to at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
