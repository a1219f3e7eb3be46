package metrics

import (
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
	b.WriteString("# HELP outbox_relay_up 1 for the instance's current state (standby, starting, streaming, retrying, stopped), 0 for the others.\n# TYPE outbox_relay_up gauge\n")
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
		{StateStarting, false, StateStarting, RoleActive, 503},
		{StateStarting, true, StateStreaming, RoleActive, 200},
		{StateRetrying, false, StateRetrying, RoleActive, 503},
		{StateStandby, false, StateStandby, RoleStandby, 503},
		{StateStopped, false, StateStopped, "", 503},
	}
	for _, s := range steps {
		if s.set != "" {
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
