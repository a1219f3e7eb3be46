package source

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/binlog"
)

func TestRelateMariaDB(t *testing.T) {
	tests := []struct {
		pos, state string
		want       Relation
		why        string
	}{
		{"", "0-1-5", Contains, ""},
		{"0-1-10", "0-1-10", Contains, ""},
		{"0-1-10", "0-1-12", Contains, ""},
		// The checkpoint's server is found although another wrote later in
		// the domain (a switchover): gtid_binlog_state keeps both.
		{"0-1-10", "0-1-10,0-2-15", Contains, ""},
		{"0-1-10,1-5-3", "1-5-4,0-1-11", Contains, ""},
		// Behind: the host has not reached the sequence number yet.
		{"0-1-10", "0-1-7", Behind, "it is at 0-1-7, the checkpoint at 0-1-10"},
		{"0-1-10", "", Behind, "no transaction of domain 0"},
		{"0-1-10,1-5-3", "0-1-10", Behind, "no transaction of domain 1"},
		// A stopped replica with an errant transaction of its own, still
		// below the checkpoint's sequence number: behind, not provable yet.
		{"0-1-10", "0-1-7,0-3-8", Behind, "it is at 0-3-8"},
		// Diverged: sequence numbers of the domain went past the checkpoint
		// on another history (the errant 0-3-8 took seq 8).
		{"0-1-8", "0-1-7,0-3-8", Diverged, "without the checkpoint's 0-1-8"},
		{"0-1-10", "0-1-7,0-3-12", Diverged, "0-3-12"},
		// The checkpoint was read through a promoted server the host never
		// heard of, and the host went on with its own primary.
		{"0-2-10", "0-1-15", Diverged, "wrote up to 0-1-15"},
		// One domain behind, another diverged: diverged wins.
		{"0-1-10,1-5-3", "0-1-5,1-6-9", Diverged, "domain 1"},
	}
	for _, tt := range tests {
		got, why, err := Relate("mariadb", tt.pos, tt.state, "3")
		if err != nil {
			t.Fatalf("%q vs %q: %v", tt.pos, tt.state, err)
		}
		if got != tt.want || !strings.Contains(why, tt.why) {
			t.Errorf("%q vs state %q: %v (%s), want %v (%s)", tt.pos, tt.state, got, why, tt.want, tt.why)
		}
	}
	if _, _, err := Relate("mariadb", "0-1-10", "0-x-1", ""); !errors.Is(err, binlog.ErrBadPosition) {
		t.Errorf("bad state: %v, want ErrBadPosition", err)
	}
}

// A MariaDB host whose binlog holds nothing of a domain is judged by what
// it applied as a replica (gtid_slave_pos) in that domain.
func TestRelateMariaDBAppliedDomain(t *testing.T) {
	tests := []struct {
		pos, state, slavePos string
		want                 Relation
		why                  string
	}{
		// Re-provisioned replica, domain 1 idle since: it applied exactly
		// the checkpoint's 1-1-1 and logs what comes next.
		{"0-1-40,1-1-1", "0-1-45", "0-1-45,1-1-1", Contains, ""},
		// It applied less of the domain: it may still receive the rest.
		{"0-1-40,1-1-3", "0-1-45", "0-1-45,1-1-1", Behind, "applied up to 1-1-1"},
		// It applied past the checkpoint, but its binlog holds none of
		// those transactions: gone for this host.
		{"0-1-40,1-1-1", "0-1-45", "0-1-45,1-1-4", Lacks, "past the checkpoint's 1-1-1"},
		// Applied the same sequence number from another server: not the
		// checkpoint's transaction.
		{"0-1-40,1-1-1", "0-1-45", "1-2-1", Lacks, "1-2-1"},
		// Nothing of the domain applied either: behind.
		{"0-1-40,1-1-1", "0-1-45", "0-1-45", Behind, "no transaction of domain 1"},
		// A domain the binlog holds is judged by the binlog alone.
		{"0-1-40", "0-1-30", "0-1-50", Behind, "it is at 0-1-30"},
		// Diverged in one domain and lacking in another: diverged.
		{"0-1-40,1-1-1", "0-2-45", "0-2-45,1-1-4", Diverged, "domain 0"},
	}
	for _, tt := range tests {
		srv := &binlog.Server{Flavor: "mariadb", State: tt.state, SlavePos: tt.slavePos, LogsReplicated: true}
		got, why, err := RelateHost(srv, tt.pos)
		if err != nil {
			t.Fatalf("%q vs %q/%q: %v", tt.pos, tt.state, tt.slavePos, err)
		}
		if got != tt.want || !strings.Contains(why, tt.why) {
			t.Errorf("%q vs state %q, slave pos %q: %v (%s), want %v (%s)", tt.pos, tt.state, tt.slavePos, got, why, tt.want, tt.why)
		}
	}
	srv := &binlog.Server{Addr: "b:3306", Flavor: "mariadb", State: "0-1-45", SlavePos: "0-1-45,1-1-4", LogsReplicated: true}
	if err := Resumable(srv, "0-1-40,1-1-1", "0-1-40,1-1-1"); !errors.Is(err, binlog.ErrPurged) {
		t.Errorf("Resumable on a host that lacks applied transactions: %v, want ErrPurged", err)
	}
	// A replica without log_slave_updates (MariaDB's default) applied the
	// checkpoint's transaction but will never log the domain's next ones:
	// it is not usable for that domain (it did stream, and stalled).
	srv = &binlog.Server{Addr: "b:3306", Flavor: "mariadb", State: "0-1-45", SlavePos: "0-1-45,1-1-1"}
	if rel, why, _ := RelateHost(srv, "0-1-40,1-1-1"); rel != Lacks || !strings.Contains(why, "log_slave_updates") {
		t.Errorf("replica without log_slave_updates: %v (%s), want lacks, naming log_slave_updates", rel, why)
	}
	// Its own writes (a former replica, now a primary) are judged by its
	// binlog as before.
	srv = &binlog.Server{Addr: "b:3306", Flavor: "mariadb", ServerID: "2", State: "0-2-45", SlavePos: "1-1-1"}
	if rel, why, _ := RelateHost(srv, "0-2-40"); rel != Contains {
		t.Errorf("former replica, its own domain-0 writes: %v (%s), want contains", rel, why)
	}
}

// The checkpoint holds transactions of the host's own server_id that its
// binlog lacks (RESET MASTER on a primary, an older backup restored, the
// binlog's end lost in a crash): it never receives them back and writes
// new ones under the same GTIDs, so it is diverged, not behind (it was
// "behind", and the relay resumed after a GTID naming another
// transaction).
func TestRelateMariaDBOwnServerID(t *testing.T) {
	for _, tt := range []struct {
		state string
		want  Relation
	}{
		{"0-1-62", Diverged}, // reset, written again up to 62
		{"", Diverged},       // reset, nothing written yet
		{"0-1-71", Contains},
		{"0-1-80", Contains},
	} {
		srv := &binlog.Server{Addr: "primary:3306", Flavor: "mariadb", ServerID: "1", State: tt.state}
		rel, why, err := RelateHost(srv, "0-1-71")
		if err != nil {
			t.Fatal(err)
		}
		if rel != tt.want || tt.want == Diverged && !strings.Contains(why, "own server_id") {
			t.Errorf("checkpoint 0-1-71 on server_id 1 with state %q: %v (%s), want %v", tt.state, rel, why, tt.want)
		}
	}
	// Another server's transaction missing: behind, as before.
	srv := &binlog.Server{Flavor: "mariadb", ServerID: "2", State: "0-1-62"}
	if rel, _, _ := RelateHost(srv, "0-1-71"); rel != Behind {
		t.Errorf("replica (server 2) at 0-1-62, checkpoint 0-1-71: %v, want behind", rel)
	}
}

func TestRelateMySQL(t *testing.T) {
	const (
		a   = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
		own = "4f22ab58-82db-22f2-af44-d91bb0530673"
	)
	tests := []struct {
		pos, executed string
		want          Relation
		why           string
	}{
		{a + ":1-10", a + ":1-10", Contains, ""},
		{a + ":1-10", a + ":1-20," + own + ":1-3", Contains, ""}, // the future, or errant: not provable
		{a + ":1-10", a + ":1-7", Behind, a + ":1-10"},
		{a + ":1-10", "", Behind, "the host \"\""},
		{a + ":1-10," + own + ":1-5", a + ":1-10," + own + ":1-5", Contains, ""},
		// The checkpoint has transactions of the host's own server_uuid it
		// no longer has: it lost them and will write others under those ids.
		{a + ":1-10," + own + ":1-5", a + ":1-10," + own + ":1-3", Diverged, "own server_uuid"},
		{a + ":1-10," + own + ":1-5", a + ":1-20", Diverged, "own server_uuid"},
		// The same gap in another server's transactions is only behind.
		{a + ":1-10", a + ":1-4:6-10", Behind, a},
	}
	for _, tt := range tests {
		got, why, err := Relate("mysql", tt.pos, tt.executed, strings.ToUpper(own))
		if err != nil {
			t.Fatalf("%q vs %q: %v", tt.pos, tt.executed, err)
		}
		if got != tt.want || !strings.Contains(why, tt.why) {
			t.Errorf("%q vs executed %q: %v (%s), want %v (%s)", tt.pos, tt.executed, got, why, tt.want, tt.why)
		}
	}
}

func TestResumable(t *testing.T) {
	srv := &binlog.Server{Addr: "db:3306", Flavor: "mariadb", State: "0-1-20", Earliest: "0-1-10"}
	for _, tt := range []struct {
		published, from string
		want            error
	}{
		{"0-1-15", "0-1-15", nil},
		{"0-1-15", "0-1-12", nil},
		{"0-1-25", "0-1-25", binlog.ErrPositionAhead},    // behind, never "purged"
		{"0-1-15", "0-1-5", binlog.ErrPurged},            // the XA replay start is gone
		{"0-2-15", "0-2-15", binlog.ErrPositionDiverged}, // another history
	} {
		err := Resumable(srv, tt.published, tt.from)
		if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
			t.Errorf("published %s from %s: %v, want %v", tt.published, tt.from, err, tt.want)
		}
	}
	err := Resumable(srv, "0-1-25", "0-1-25")
	if errors.Is(err, binlog.ErrPurged) || !strings.Contains(err.Error(), "waits for it to catch up") {
		t.Errorf("behind: %v", err)
	}
}

func TestLastPerDomain(t *testing.T) {
	got, err := lastPerDomain("0-3-50,0-1-100,1-2-7")
	if err != nil || got != "0-1-100,1-2-7" {
		t.Fatalf("got %q %v", got, err)
	}
	if got, err := lastPerDomain(""); err != nil || got != "" {
		t.Fatalf("empty: %q %v", got, err)
	}
}

func TestNoneUsable(t *testing.T) {
	check := func(addr string, err error) HostCheck {
		return HostCheck{Addr: addr, Status: StatusOf(err), Err: err}
	}
	behind := fmt.Errorf("%w: lags", binlog.ErrPositionAhead)
	diverged := fmt.Errorf("%w: errant", binlog.ErrPositionDiverged)
	purged := fmt.Errorf("%w: gone", binlog.ErrPurged)
	down := fmt.Errorf("%w: refused", ErrUnreachable)
	denied := fmt.Errorf("%w: bad password", binlog.ErrAccessDenied)

	if c := check("a", denied); c.Status != HostRefused {
		t.Fatalf("access denied: %v", c.Status)
	}
	tests := []struct {
		name   string
		checks []HostCheck
		wait   bool
		is     []error
	}{
		{"one behind waits", []HostCheck{check("a", diverged), check("b", behind)}, true, []error{binlog.ErrPositionAhead}},
		{"behind and down waits", []HostCheck{check("a", down), check("b", behind)}, true, []error{binlog.ErrPositionAhead}},
		{"down is retried, not fatal", []HostCheck{check("a", diverged), check("b", down)}, false, []error{ErrUnreachable}},
		{"all diverged", []HostCheck{check("a", diverged), check("b", diverged)}, false, []error{binlog.ErrPositionDiverged}},
		{"diverged and purged", []HostCheck{check("a", diverged), check("b", purged)}, false, []error{binlog.ErrPositionDiverged, binlog.ErrPurged}},
		{"one refused", []HostCheck{check("a", denied)}, false, []error{binlog.ErrAccessDenied}},
	}
	for _, tt := range tests {
		wait, err := NoneUsable(tt.checks)
		if wait != tt.wait {
			t.Errorf("%s: wait %v", tt.name, wait)
		}
		for _, want := range tt.is {
			if !errors.Is(err, want) {
				t.Errorf("%s: %v is not %v", tt.name, err, want)
			}
		}
		if tt.name == "down is retried, not fatal" && errors.Is(err, binlog.ErrPositionDiverged) {
			t.Errorf("%s: %v carries the diverged sentinel", tt.name, err)
		}
		for _, c := range tt.checks {
			if !strings.Contains(err.Error(), c.Err.Error()) {
				t.Errorf("%s: %v does not say %v", tt.name, err, c.Err)
			}
		}
	}
}

func TestChooseOrder(t *testing.T) {
	// a: down; b: behind; c: contains; d: never asked.
	states := map[string]string{"b": "0-1-5", "c": "0-1-12", "d": "0-1-99"}
	var asked []string
	inspect := func(addr string) (*binlog.Server, error) {
		asked = append(asked, addr)
		st, ok := states[addr]
		if !ok {
			return nil, fmt.Errorf("%w: %s", ErrUnreachable, addr)
		}
		return &binlog.Server{Addr: addr, Flavor: "mariadb", State: st}, nil
	}
	accept := func(s *binlog.Server) error { return Resumable(s, "0-1-10", "0-1-10") }
	srv, checks := choose(t.Context(), []string{"a", "b", "c", "d"}, inspect, accept)
	if srv == nil || srv.Addr != "c" {
		t.Fatalf("chose %+v, want c", srv)
	}
	if strings.Join(asked, ",") != "a,b,c" {
		t.Fatalf("asked %v, want a,b,c (the first usable one ends the search)", asked)
	}
	want := []HostStatus{HostUnreachable, HostBehind, HostUsable}
	for i, c := range checks {
		if c.Status != want[i] {
			t.Errorf("%s: %s, want %s", c.Addr, c.Status, want[i])
		}
	}
	srv, checks = choose(t.Context(), []string{"a", "b"}, inspect, accept)
	if srv != nil || len(checks) != 2 {
		t.Fatalf("a and b: chose %v", srv)
	}
	if wait, err := NoneUsable(checks); !wait || !errors.Is(err, binlog.ErrPositionAhead) {
		t.Fatalf("a down and b behind: wait %v, %v", wait, err)
	}
}

func TestMarkErrant(t *testing.T) {
	ref := &binlog.Server{Addr: "a", Flavor: "mariadb", State: "0-1-20"}
	mk := func(addr, state string) HostCheck {
		srv := &binlog.Server{Addr: addr, Flavor: "mariadb", State: state}
		err := Resumable(srv, "0-1-20", "0-1-20")
		return HostCheck{Addr: addr, Status: StatusOf(err), Server: srv, Err: err}
	}
	checks := []HostCheck{
		mk("errant", "0-1-10,0-3-11"), // its own 0-3-11: ref passed seq 11 without it
		mk("lagging", "0-1-15"),
		mk("old-primary", "0-1-10,0-2-5"), // ref has 0-2-5 below: not errant
		mk("after", "0-1-19,0-3-25"),      // R1: wrote past 20 without 0-1-20
	}
	ref.State = "0-2-5,0-1-20"
	MarkErrant(checks, ref, "0-1-20")
	want := []HostStatus{HostDiverged, HostBehind, HostBehind, HostDiverged}
	for i, c := range checks {
		if c.Status != want[i] {
			t.Errorf("%s: %s (%v), want %s", c.Addr, c.Status, c.Err, want[i])
		}
	}
	if err := checks[0].Err; !errors.Is(err, binlog.ErrPositionDiverged) || !strings.Contains(err.Error(), "errant GTIDs 0-3-11") {
		t.Errorf("errant: %v", err)
	}
}
