package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/checkpoint"
)

func TestSkipGTID(t *testing.T) {
	const uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	schema := map[string][]string{"app.outbox": {"event_id", "payload"}}
	maria := &checkpoint.Checkpoint{Name: "p", Flavor: "mariadb", GTIDSet: "0-1-10,1-2-5", Events: 7, Schema: schema,
		Partial: &checkpoint.Partial{GTID: "0-1-11", Rows: 3}}
	my := &checkpoint.Checkpoint{Name: "p", Flavor: "mysql", GTIDSet: uuid + ":1-10", Events: 7, Schema: schema}
	tests := []struct {
		name   string
		cur    *checkpoint.Checkpoint
		gtid   string
		force  bool
		want   string // new set; "" when refused
		refuse string // part of the refusal
	}{
		{"mariadb next", maria, "0-1-11", false, "0-1-11,1-2-5", ""},
		{"mariadb next, other server id", maria, "0-3-11", false, "0-3-11,1-2-5", ""},
		{"mariadb next in another domain", maria, "1-2-6", false, "0-1-10,1-2-6", ""},
		{"mariadb new domain starts at 1", maria, "5-1-1", false, "0-1-10,1-2-5,5-1-1", ""},
		{"mariadb covered", maria, "0-1-9", false, "", "already covers"},
		{"mariadb covered exactly", maria, "0-1-10", true, "", "already covers"},
		{"mariadb gap", maria, "0-1-13", false, "", "not the transaction right after"},
		{"mariadb gap forced", maria, "0-1-13", true, "0-1-13,1-2-5", ""},
		{"mariadb new domain gap", maria, "5-1-4", false, "", "not the transaction right after"},
		{"mariadb two gtids", maria, "0-1-11,1-2-6", false, "", "one GTID"},
		{"mariadb garbage", maria, "0-1", false, "", "--gtid"},
		{"mysql next", my, uuid + ":11", false, uuid + ":1-11", ""},
		{"mysql covered", my, uuid + ":4", false, "", "already covers"},
		{"mysql gap", my, uuid + ":13", false, "", "not the transaction right after"},
		{"mysql gap forced", my, uuid + ":13", true, uuid + ":1-10:13", ""},
		{"mysql range", my, uuid + ":11-12", false, "", "one GTID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := skipGTID(tt.cur, tt.gtid, tt.force)
			if tt.want == "" {
				if err == nil || !strings.Contains(err.Error(), tt.refuse) {
					t.Fatalf("got %+v, %v; want a refusal containing %q", got, err, tt.refuse)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.GTIDSet != tt.want || got.Events != 7 || got.Schema["app.outbox"] == nil || got.Flavor != tt.cur.Flavor {
				t.Fatalf("got %+v, want set %s with the rest kept", got, tt.want)
			}
			if dropped := got.Partial == nil; tt.cur.Partial != nil && dropped != (tt.cur.Partial.GTID == tt.gtid) {
				t.Fatalf("partial %+v after skipping %s (was %+v)", got.Partial, tt.gtid, tt.cur.Partial)
			}
		})
	}
	if maria.GTIDSet != "0-1-10,1-2-5" || maria.Partial == nil {
		t.Fatal("skipGTID changed its input")
	}
	if _, err := skipGTID(maria, "x", false); !errors.Is(err, errUsage) {
		t.Fatalf("garbage: %v, want a usage error", err)
	}
}
