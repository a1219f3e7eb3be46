package metrics

import (
	"strings"
	"testing"
	"time"
)

// An instance whose lock group has answered nothing for longer than the
// lease is trusted reads as kafka_unreachable (role standby), active or
// not, and /readyz names the brokers; never "standby". An answer brings
// the plain state back.
func TestKafkaUnreachableState(t *testing.T) {
	for _, set := range []State{StateStandby, StateStarting} {
		m := New("test")
		m.KafkaBrokers("k1:9092,k2:9092")
		m.SetState(set)
		m.KafkaSeen(time.Now().Add(-5 * time.Second))
		m.LeaseUntil(time.Now().Add(-time.Second))
		if s, r := m.State(), m.Role(); s != StateKafkaUnreachable || r != RoleStandby {
			t.Fatalf("after %s with the lease lapsed: state %s, role %s; want kafka_unreachable, standby", set, s, r)
		}
		code, body := get(t, m.Handler(), "/readyz")
		if code != 503 || !strings.Contains(body, "kafka unreachable: k1:9092,k2:9092") || strings.Contains(body, "standby") {
			t.Fatalf("/readyz %d %q", code, body)
		}
		m.KafkaSeen(time.Now())
		m.LeaseUntil(time.Now().Add(time.Second))
		if s := m.State(); s != set {
			t.Fatalf("after an answer: state %s, want %s", s, set)
		}
	}
}
