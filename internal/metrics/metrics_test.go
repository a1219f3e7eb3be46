package metrics

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func oneHot(state State, role Role) string {
	var b strings.Builder
	b.WriteString("# HELP outbox_relay_role 1 for the instance's role: active (holds the lease) or standby; both 0 once stopped.\n# TYPE outbox_relay_role gauge\n")
	for _, r := range []Role{RoleActive, RoleStandby} {
		v := "0"
		if r == role {
			v = "1"
		}
		b.WriteString(`outbox_relay_role{role="` + string(r) + `"} ` + v + "\n")
	}
	b.WriteString("# HELP outbox_relay_up 1 for the instance's current state (standby, connecting, streaming, fenced, stopped, kafka_unreachable), 0 for the others.\n# TYPE outbox_relay_up gauge\n")
	for _, s := range States {
		v := "0"
		if s == state {
			v = "1"
		}
		b.WriteString(`outbox_relay_up{state="` + string(s) + `"} ` + v + "\n")
	}
	return b.String()
}

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

// The role and state metrics are one-hot through every transition, and
// /readyz answers 200 only while active and streaming.
func TestStateRoleAndReadiness(t *testing.T) {
	m := New("test")
	h := m.Handler()
	steps := []struct {
		set   State
		ready bool
		state State
		role  Role
		code  int
	}{
		{"", false, StateStopped, "", 503},
		{StateStandby, false, StateStandby, RoleStandby, 503},
		{StateStarting, false, StateConnecting, RoleActive, 503},
		{StateStarting, true, StateStreaming, RoleActive, 200},
		{StateRetrying, false, StateConnecting, RoleActive, 503},
		{StateStandby, false, StateStandby, RoleStandby, 503},
		{"fence", false, StateFenced, RoleStandby, 503},
		{StateStarting, false, StateConnecting, RoleActive, 503},
		{StateStandby, false, StateStandby, RoleStandby, 503},
		{StateStopped, false, StateStopped, "", 503},
	}
	for _, s := range steps {
		switch s.set {
		case "":
		case "fence": // what election.go does on ErrFenced, before it waits as a standby again
			m.Fenced.Set(1)
		default:
			if s.set == StateStarting {
				m.Fenced.Set(0) // the lease is held again
			}
			m.SetState(s.set)
		}
		m.Ready.Store(s.ready)
		if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(oneHot(s.state, s.role)), "outbox_relay_up", "outbox_relay_role"); err != nil {
			t.Fatalf("after %q (ready %v): %v", s.set, s.ready, err)
		}
		code, body := get(t, h, "/readyz")
		if code != s.code {
			t.Fatalf("after %q (ready %v): /readyz %d %q, want %d", s.set, s.ready, code, body, s.code)
		}
		if code != 200 && !strings.Contains(body, string(s.state)) {
			t.Fatalf("/readyz body %q does not name the state %s", body, s.state)
		}
	}
	if got := testutil.ToFloat64(m.Fenced); got != 0 {
		t.Fatalf("fenced %v", got)
	}
	m.Exiting(65)
	if got := testutil.ToFloat64(m.ExitCode); got != 65 || m.State() != StateStopped {
		t.Fatalf("after Exiting(65): exit code %v, state %s", got, m.State())
	}
}

// /readyz fails within the Kafka max age once the lock group's requests go
// unanswered, while the loop itself still looks streaming.
func TestReadyzFollowsKafka(t *testing.T) {
	m := New("test")
	m.KafkaMaxAge(100 * time.Millisecond)
	m.SetState(StateStarting)
	m.Ready.Store(true)
	m.KafkaSeen(time.Now())
	if code, body := get(t, m.Handler(), "/readyz"); code != 200 {
		t.Fatalf("/readyz %d %q", code, body)
	}
	time.Sleep(150 * time.Millisecond)
	if code, body := get(t, m.Handler(), "/readyz"); code != 503 || !strings.Contains(body, "kafka") {
		t.Fatalf("/readyz %d %q, want 503 naming kafka", code, body)
	}
}

// /healthz fails when the streaming loop makes no progress for the stall
// timeout; a standby, or an instance still starting, never stalls.
func TestHealthzStall(t *testing.T) {
	m := New("test")
	m.SetStallTimeout(100 * time.Millisecond)
	m.SetState(StateStarting)
	m.Ready.Store(true)
	if code, _ := get(t, m.Handler(), "/healthz"); code != 200 {
		t.Fatalf("/healthz %d right after progress", code)
	}
	time.Sleep(150 * time.Millisecond)
	if code, body := get(t, m.Handler(), "/healthz"); code != 503 || !strings.Contains(body, "stalled") {
		t.Fatalf("/healthz %d %q, want 503 stalled", code, body)
	}
	m.Progress()
	if code, _ := get(t, m.Handler(), "/healthz"); code != 200 {
		t.Fatalf("/healthz %d after progress", code)
	}
	m.SetState(StateStandby)
	time.Sleep(150 * time.Millisecond)
	if code, _ := get(t, m.Handler(), "/healthz"); code != 200 {
		t.Fatalf("/healthz %d on a standby", code)
	}
	m.SetState(StateStarting)
	m.Ready.Store(false)
	time.Sleep(150 * time.Millisecond)
	if code, _ := get(t, m.Handler(), "/healthz"); code != 200 {
		t.Fatalf("/healthz %d while starting", code)
	}
}

func gauge(t *testing.T, m *Metrics, name string) float64 {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("%s: no single series", name)
	return 0
}

// An idle source is not lag: once a heartbeat says the relay has read all
// the server has, the lag is 0 however old the last commit; while behind it
// is the age of the last commit handled.
func TestLagIsZeroAtTheHead(t *testing.T) {
	m := New("test")
	m.SetState(StateStandby)
	if got := gauge(t, m, "outbox_relay_source_lag_seconds"); !math.IsNaN(got) {
		t.Fatalf("lag of a standby %v, want NaN", got)
	}
	m.SetState(StateStarting)
	if got := gauge(t, m, "outbox_relay_source_lag_seconds"); got != 0 {
		t.Fatalf("lag before any transaction %v", got)
	}
	m.SourceRead(time.Now().Add(-90 * time.Second))
	if got := gauge(t, m, "outbox_relay_source_lag_seconds"); got < 90 || got > 100 {
		t.Fatalf("lag while behind %v, want about 90", got)
	}
	m.SourceAtHead()
	if got := gauge(t, m, "outbox_relay_source_lag_seconds"); got != 0 {
		t.Fatalf("lag at the head %v, want 0 (an idle source is not behind)", got)
	}
	m.SourceRead(time.Now().Add(-time.Hour)) // an old transaction read in catch-up
	if got := gauge(t, m, "outbox_relay_source_lag_seconds"); got < 3600 {
		t.Fatalf("lag in catch-up %v", got)
	}
	if got := gauge(t, m, "outbox_relay_ready"); got != 0 {
		t.Fatalf("ready %v while connecting", got)
	}
	m.Ready.Store(true)
	if got := gauge(t, m, "outbox_relay_ready"); got != 1 {
		t.Fatalf("ready %v while streaming", got)
	}
	m.SetState(StateStandby)
	m.SetState(StateStarting) // a new term forgets the last one's reading
	if got := gauge(t, m, "outbox_relay_source_lag_seconds"); got != 0 {
		t.Fatalf("lag at the start of a new term %v, want 0", got)
	}
}

// The purge margin is the retention minus the checkpoint's age; unknown
// until both are known; +Inf when the source never purges by age.
func TestPurgeMargin(t *testing.T) {
	m := New("test")
	m.SetState(StateStarting)
	if got := gauge(t, m, "outbox_relay_checkpoint_purge_margin_seconds"); !math.IsNaN(got) {
		t.Fatalf("margin before anything known %v, want NaN", got)
	}
	hourAgo := time.Now().Add(-time.Hour)
	m.CheckpointKnown(hourAgo, hourAgo)
	m.SetRetention(24 * time.Hour)
	if got := gauge(t, m, "outbox_relay_checkpoint_purge_margin_seconds"); got < 22*3600-10 || got > 23*3600 {
		t.Fatalf("margin %v, want about 23h", got)
	}
	if got := gauge(t, m, "outbox_relay_checkpoint_age_seconds"); got < 3599 || got > 3700 {
		t.Fatalf("checkpoint age %v, want about 1h", got)
	}
	m.SetRetention(-1)
	if got := gauge(t, m, "outbox_relay_checkpoint_purge_margin_seconds"); !math.IsInf(got, 1) {
		t.Fatalf("margin without expiry %v, want +Inf", got)
	}
	m.SetRetention(0) // could not be read
	if got := gauge(t, m, "outbox_relay_checkpoint_purge_margin_seconds"); !math.IsNaN(got) {
		t.Fatalf("margin with retention unknown %v, want NaN", got)
	}
	m.SetRetention(24 * time.Hour)
	m.SetState(StateStandby) // e.g. a Kafka outage: the checkpoint ages, the source purges
	if got := gauge(t, m, "outbox_relay_checkpoint_purge_margin_seconds"); got < 22*3600-10 || got > 23*3600 {
		t.Fatalf("margin of a standby that knows the checkpoint %v, want about 23h", got)
	}
	if got := gauge(t, m, "outbox_relay_checkpoint_age_seconds"); got < 3599 || got > 3700 {
		t.Fatalf("checkpoint age of a standby that knows the checkpoint %v, want about 1h", got)
	}
}

// At the head, with everything read checkpointed, nothing after the
// checkpoint is on the server: the margin is the whole retention however
// old the last commit (a quiet source). Behind, it counts from the
// checkpoint's last commit; the first event after a heartbeat ends "at
// the head" for the lag too.
func TestPurgeMarginAtHeadAndBehind(t *testing.T) {
	m := New("test")
	m.SetState(StateStarting)
	m.Ready.Store(true)
	m.SetRetention(7 * 24 * time.Hour)
	old := time.Now().Add(-30 * 24 * time.Hour) // a quiet source: last commit a month ago
	m.SourceRead(old)
	m.CheckpointKnown(time.Now(), old)
	m.SourceAtHead()
	if got := gauge(t, m, "outbox_relay_checkpoint_purge_margin_seconds"); got < 7*86400-60 {
		t.Fatalf("margin at the head %v, want about 7 days", got)
	}
	m.SourceEvent(time.Now().Add(-2 * time.Minute)) // a big transaction starts arriving
	if got := gauge(t, m, "outbox_relay_source_lag_seconds"); got < 119 {
		t.Fatalf("lag while reading a transaction after a heartbeat %v, want about 120s", got)
	}
	m2 := New("test")
	m2.SetState(StateStarting)
	m2.SetRetention(7 * 24 * time.Hour)
	m2.CheckpointKnown(time.Now(), time.Now().Add(-6*24*time.Hour)) // loaded at start: 6 days behind
	if got := gauge(t, m2, "outbox_relay_checkpoint_purge_margin_seconds"); got > 86400+60 || got < 86400-60 {
		t.Fatalf("margin 6 days behind on 7 days retention %v, want about 1 day", got)
	}
	m2.SourceAtHead() // nothing read yet: the checkpoint is the head
	if got := gauge(t, m2, "outbox_relay_checkpoint_purge_margin_seconds"); got < 7*86400-60 {
		t.Fatalf("margin at the head after a restart %v, want about 7 days", got)
	}
}

// The GTID set is never a label: one series per GTID source, replaced, not
// added to, at every checkpoint.
func TestPositionSequences(t *testing.T) {
	for _, c := range []struct {
		set  string
		want map[string]uint64
	}{
		{"0-1-100", map[string]uint64{"0": 100}},
		{"0-1-100,1-2-7", map[string]uint64{"0": 100, "1": 7}},
		{"3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5:11-18,\n6b3b4b2e-71ca-11e1-9e33-c80aa9429562:1-3", map[string]uint64{
			"3e11fa47-71ca-11e1-9e33-c80aa9429562": 18, "6b3b4b2e-71ca-11e1-9e33-c80aa9429562": 3}},
		{"3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:blue:1-9", map[string]uint64{
			"3e11fa47-71ca-11e1-9e33-c80aa9429562": 5, "3e11fa47-71ca-11e1-9e33-c80aa9429562:blue": 9}},
		{"", map[string]uint64{}},
		{"not a gtid, 1-2", map[string]uint64{}},
	} {
		got := Sequences(c.set)
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("Sequences(%q) = %v, want %v", c.set, got, c.want)
		}
	}
	m := New("test")
	for i := 1; i <= 50; i++ {
		m.SetPosition(fmt.Sprintf("0-1-%d,1-1-%d", i, 2*i))
	}
	m.SetPosition("0-1-51")
	if n := testutil.CollectAndCount(m.Position); n != 1 {
		t.Fatalf("%d position series after 51 checkpoints, want 1 (domain 1 left the set)", n)
	}
	if got := testutil.ToFloat64(m.Position.WithLabelValues("0")); got != 51 {
		t.Fatalf("domain 0 sequence %v", got)
	}
}

// /healthz fails once the active instance has been connecting without
// streaming past the stall timeout, naming the last attempt's error;
// retries (state changes) are not progress, a new wait starts it again.
func TestHealthzFailsWhileConnectingTooLong(t *testing.T) {
	m := New("test")
	m.SetStallTimeout(100 * time.Millisecond)
	m.SetState(StateStarting)
	m.Connecting()
	m.ConnectFailed(errors.New("login to 10.0.0.1:3306: no answer within 5s"))
	if code, _ := get(t, m.Handler(), "/healthz"); code != 200 {
		t.Fatalf("/healthz %d right after connecting began", code)
	}
	time.Sleep(150 * time.Millisecond)
	m.SetState(StateRetrying) // a retry is no progress
	if code, body := get(t, m.Handler(), "/healthz"); code != 503 || !strings.Contains(body, "connecting for") || !strings.Contains(body, "no answer within 5s") {
		t.Fatalf("/healthz %d %q, want 503 naming the last error", code, body)
	}
	m.Connecting()
	if code, _ := get(t, m.Handler(), "/healthz"); code != 200 {
		t.Fatalf("/healthz %d after a new wait began", code)
	}
	m.SetState(StateStandby)
	time.Sleep(150 * time.Millisecond)
	m.SetState(StateStarting)
	if code, _ := get(t, m.Handler(), "/healthz"); code != 200 {
		t.Fatalf("/healthz %d: a standby's time counted as connecting", code)
	}
}

// The purge margin counts from the age of the binlog the checkpoint is in,
// not from the checkpoint's write time. The failure guarded against: a
// relay catching up: it reads (and checkpoints every 10s) transactions
// committed 6 days ago, on a source that keeps binlogs 7 days. The binlogs
// after its checkpoint are 6 days old: the source may purge them in about a
// day (at the next rotation once the relay's dump thread lets go of them:
// any restart, failover or deploy), and the relay then stops with exit 66.
// This is the state loop.go produces: SourceRead(ev.Time) per transaction,
// CheckpointTime = cp.Time = time.Now() (sink.go) per checkpoint.
// outbox_relay_checkpoint_purge_margin_seconds must say about 1 day; it
// says 7 days, so OutboxRelayPurgeMarginLow (< 1 day) never fires.
func TestPurgeMarginCountsAgeOfCheckpointedBinlog(t *testing.T) {
	m := New("test")
	m.SetState(StateStarting)
	m.Ready.Store(true)
	m.SetRetention(7 * 24 * time.Hour)
	behind := 6 * 24 * time.Hour
	m.SourceRead(time.Now().Add(-behind))                      // the transaction just read
	m.CheckpointTime.Set(float64(time.Now().UnixNano()) / 1e9) // cp.Time: when written
	lag := gauge(t, m, "outbox_relay_source_lag_seconds")
	margin := gauge(t, m, "outbox_relay_checkpoint_purge_margin_seconds")
	t.Logf("lag %.0fs (%.1f days), purge margin %.0fs (%.1f days)", lag, lag/86400, margin, margin/86400)
	if want := (7*24*time.Hour - behind).Seconds(); margin > want+60 {
		t.Fatalf("purge margin %.1f days while the checkpoint's binlogs are %.1f days old under a 7-day retention: want <= %.1f days",
			margin/86400, lag/86400, want/86400)
	}
}
