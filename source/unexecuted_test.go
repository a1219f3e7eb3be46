package source

import (
	"testing"

	"github.com/outbox-relay/outbox-relay/binlog"
)

func TestUnexecutedNamesWhatTheServerHasNotLogged(t *testing.T) {
	const u = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	const v = "4e11fa47-71ca-11e1-9e33-c80aa9429562"
	tests := []struct {
		flavor, state, pos, want string
	}{
		{"mariadb", "0-1-100,1-2-5", "0-1-100,1-2-5", ""},
		{"mariadb", "0-1-100,1-2-5", "0-1-90", ""},
		{"mariadb", "0-1-100,1-2-5", "0-1-1000", "0-1-1000"},
		{"mariadb", "0-1-100,0-3-120", "0-3-121,1-2-5", "0-3-121,1-2-5"},
		{"mariadb", "0-1-100", "0-1-100,7-9-5", "7-9-5"},
		{"mysql", u + ":1-100", u + ":1-100", ""},
		{"mysql", u + ":1-100", u + ":1-1000", u + ":101-1000"},
		{"mysql", u + ":1-10:20-30", u + ":1-40", u + ":11-19:31-40"},
		{"mysql", u + ":1-100", u + ":1-5," + v + ":1-3", v + ":1-3"},
	}
	for _, tt := range tests {
		srv := &binlog.Server{Flavor: tt.flavor, State: tt.state}
		got, err := Unexecuted(srv, tt.pos)
		if err != nil || got != tt.want {
			t.Errorf("%s %q against %q: got %q, %v; want %q", tt.flavor, tt.pos, tt.state, got, err, tt.want)
		}
	}
}
