package checkpoint

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestEncodeDecode(t *testing.T) {
	in := &Checkpoint{Name: "alarms", GTIDSet: "0-1-42", Flavor: "mariadb", ServerID: "1", Host: "db:3306",
		Partial: &Partial{GTID: "0-1-43", Rows: 7}, CommitTime: time.Unix(100, 0).UTC(), Time: time.Unix(200, 0).UTC(), Events: 9}
	out, err := Decode(in.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if out.GTIDSet != in.GTIDSet || out.Flavor != in.Flavor || out.Partial == nil || *out.Partial != *in.Partial ||
		!out.Time.Equal(in.Time) || out.Events != 9 {
		t.Fatalf("round trip changed the checkpoint: %+v", out)
	}
	for _, bad := range []string{"", "{", `{"gtid_set":"0-1-1","flavor":"oracle"}`} {
		if _, err := Decode([]byte(bad)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Decode(%q) = %v, want ErrCorrupt", bad, err)
		}
	}
}

func TestFormatVersion(t *testing.T) {
	enc := (&Checkpoint{Name: "a", GTIDSet: "0-1-1", Flavor: "mariadb"}).Encode()
	if !strings.Contains(string(enc), `"format":1`) {
		t.Fatalf("encoded checkpoint has no format 1: %s", enc)
	}
	// A record written before the format field existed still loads.
	old, err := Decode([]byte(`{"name":"a","gtid_set":"0-1-5","flavor":"mariadb","commit_time":"0001-01-01T00:00:00Z","time":"2026-01-01T00:00:00Z","events":3}`))
	if err != nil || old.Format != 1 || old.GTIDSet != "0-1-5" || old.Events != 3 {
		t.Fatalf("old record: %+v %v", old, err)
	}
	// A newer one is refused, clearly, and stops the relay as a corrupt one does.
	_, err = Decode([]byte(`{"format":2,"name":"a","gtid_set":"0-1-5","flavor":"mariadb"}`))
	if !errors.Is(err, ErrNewerFormat) || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("newer format: %v", err)
	}
	if want := "checkpoint format 2 is newer than this outbox-relay reads (1): run the outbox-relay version that wrote it, or newer"; err.Error() != want {
		t.Fatalf("message %q, want %q", err, want)
	}
	if _, err := Decode([]byte(`{"format":-1,"gtid_set":"0-1-5","flavor":"mariadb"}`)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("negative format: %v", err)
	}
}
