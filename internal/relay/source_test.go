package relay

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/errclass"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/source"
)

// A host whose stream refused the position is held against it: with
// other hosts the attempt's error is retried (errHostRefused, not fatal)
// and the next choice sees the refusal; with one host a purged or
// diverged refusal is the answer.
func TestJudgeStream(t *testing.T) {
	// The loop returns fatal stream errors as they are, others wrapped.
	hole := fmt.Errorf("read binlog: %w: missing the GTID 0-1-5", binlog.ErrPurged)
	diverged := fmt.Errorf("read binlog: %w", binlog.ErrPositionDiverged)
	ahead := fmt.Errorf("%w: %w", errSourceStream, binlog.ErrPositionAhead)
	eof := fmt.Errorf("%w: eof", errSourceStream)
	for _, tc := range []struct {
		name      string
		hosts     int
		err       error
		wantFatal bool
		wantHeld  source.HostStatus // "" for none
	}{
		{"hole, two hosts", 2, hole, false, source.HostPurged},
		{"hole, one host", 1, hole, true, source.HostPurged},
		{"diverged, two hosts", 2, diverged, false, source.HostDiverged},
		{"diverged, one host", 1, diverged, true, source.HostDiverged},
		{"behind, one host", 1, ahead, false, source.HostBehind},
		{"connection lost", 2, eof, false, ""},
		{"kafka error", 2, errors.New("produce: broker gone"), false, ""},
		{"clean stop", 2, nil, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Relay{log: zerolog.Nop(), metrics: metrics.New("test")}
			r.source.Hosts = []string{"a:1", "b:1"}[:tc.hosts]
			srv := &binlog.Server{Addr: "a:1"}
			got := r.judgeStream(srv, "0-1-5", tc.err)
			if tc.err == nil {
				if got != nil {
					t.Fatalf("judgeStream(nil) = %v", got)
				}
				return
			}
			if errclass.Fatal(got) != tc.wantFatal {
				t.Errorf("errclass.Fatal(%v) = %v, want %v", got, errclass.Fatal(got), tc.wantFatal)
			}
			held := r.refusedBy("a:1", "0-1-5")
			if tc.wantHeld == "" {
				if held != nil {
					t.Errorf("refusal held: %v", held)
				}
				return
			}
			if st := source.StatusOf(held); st != tc.wantHeld {
				t.Errorf("held refusal %v has status %q, want %q", held, st, tc.wantHeld)
			}
			if other := r.refusedBy("b:1", "0-1-5"); other != nil {
				t.Errorf("another host is refused: %v", other)
			}
		})
	}
}

// A sticky refusal (purged, diverged) holds at the same position for good
// and, once the position moved on, only until it expires; a stream that
// said "behind" holds only until it expires.
func TestRefusalExpiry(t *testing.T) {
	r := &Relay{log: zerolog.Nop(), metrics: metrics.New("test")}
	r.source.Hosts = []string{"a:1", "b:1"}
	past := time.Now().Add(-time.Second)
	r.refused = map[string]hostRefusal{
		"a:1": {from: "0-1-5", err: binlog.ErrPurged, until: past, sticky: true},
		"b:1": {from: "0-1-5", err: binlog.ErrPositionAhead, until: past},
	}
	if err := r.refusedBy("a:1", "0-1-5"); !errors.Is(err, binlog.ErrPurged) {
		t.Errorf("expired sticky refusal at the same position: %v, want it held", err)
	}
	if err := r.refusedBy("b:1", "0-1-5"); err != nil {
		t.Errorf("expired behind refusal: %v, want none", err)
	}
	if err := r.refusedBy("a:1", "0-1-9"); err != nil {
		t.Errorf("expired sticky refusal after the position moved on: %v, want none", err)
	}
	r.refused["a:1"] = hostRefusal{from: "0-1-5", err: binlog.ErrPurged, until: time.Now().Add(time.Minute), sticky: true}
	if err := r.refusedBy("a:1", "0-1-9"); !errors.Is(err, binlog.ErrPurged) {
		t.Errorf("fresh refusal after the position moved on: %v, want it held", err)
	}
}
