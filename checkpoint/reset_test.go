package checkpoint

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// A reset marker round-trips as a marker holding no position, in a format
// that builds before markers (reading format 1 only) refuse as newer
// rather than read as an empty GTID set.
func TestResetMarkerIsNoPositionAndRefusedByOlderReaders(t *testing.T) {
	at := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	m := ResetMarker("alarms", Operator{Time: at, User: "ops@host", From: "0-1-100"}, map[string]int32{"outbox.alarm": 3})
	b := m.Encode()
	if !strings.HasPrefix(string(b), `{"format":2,`) {
		t.Fatalf("marker encoded as %s, want format 2", b)
	}
	got, err := Decode(b)
	if err != nil || !got.IsReset() || got.Operator.From != "0-1-100" || !got.Operator.Time.Equal(at) || got.GTIDSet != "" || got.Partitions["outbox.alarm"] != 3 {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	// A format 2 record that is not a marker is still a newer format.
	if _, err := Decode([]byte(`{"format":2,"name":"alarms","gtid_set":"0-1-9","flavor":"mariadb"}`)); !errors.Is(err, ErrNewerFormat) {
		t.Fatalf("format 2 checkpoint: %v, want ErrNewerFormat", err)
	}
	// An ordinary checkpoint, marked by an operator's set, stays format 1.
	cp := &Checkpoint{Name: "alarms", GTIDSet: "0-1-9", Flavor: "mariadb", Operator: &Operator{Command: "set", Time: at}}
	if b := cp.Encode(); !strings.HasPrefix(string(b), `{"format":1,`) {
		t.Fatalf("set checkpoint encoded as %s, want format 1", b)
	}
}
