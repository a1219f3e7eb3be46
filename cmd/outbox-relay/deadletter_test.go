package main

import (
	"testing"
	"time"
)

var zeroTime = time.Time{}

func TestRowFromDeadLetter(t *testing.T) {
	row, err := rowFromDeadLetter([]byte(`{"event_id":"e1","aggregate_type":"alarm","aggregate_id":"d1","id":12,"payload":"{\"a\":1}"}`), zeroTime)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]any{}
	for i, c := range row.Columns {
		got[c] = row.Values[i]
	}
	if got["id"] != "12" || got["payload"] != `{"a":1}` || got["event_id"] != "e1" {
		t.Fatalf("row = %v", got)
	}
	for _, bad := range []string{`[]`, `{}`, `{"payload":{"a":1}}`, `not json`} {
		if _, err := rowFromDeadLetter([]byte(bad), zeroTime); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}
