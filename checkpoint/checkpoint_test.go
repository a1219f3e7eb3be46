package checkpoint

import (
	"errors"
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
