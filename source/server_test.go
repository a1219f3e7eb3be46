package source

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/binlog"
)

func TestCheckSettings(t *testing.T) {
	good := func() map[string]string {
		return map[string]string{"log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL",
			"binlog_row_metadata": "FULL", "gtid_mode": "ON", "enforce_gtid_consistency": "ON"}
	}
	tests := []struct {
		flavor, name, value, want string
	}{
		{"mysql", "gtid_mode", "OFF", "gtid_mode=ON"},
		{"mysql", "gtid_mode", "ON_PERMISSIVE", "gtid_mode=ON"},
		{"mysql", "enforce_gtid_consistency", "WARN", "enforce_gtid_consistency=ON"},
		{"mysql", "log_bin", "OFF", "log_bin"},
		{"mysql", "binlog_format", "MIXED", "binlog_format=ROW"},
		{"mysql", "binlog_row_image", "NOBLOB", "binlog_row_image=FULL"},
		{"mariadb", "binlog_row_image", "MINIMAL", "binlog_row_image=FULL"},
		// MariaDB 11.4's FULL_NODUP logs whole INSERT images (only an
		// UPDATE's after image lacks the unchanged columns).
		{"mariadb", "binlog_row_image", "FULL_NODUP", ""},
		{"mysql", "binlog_row_image", "FULL_NODUP", "binlog_row_image=FULL"},
		{"mariadb", "binlog_row_metadata", "NO_LOG", ""}, // advisory: the schema tracker covers it
		{"mariadb", "gtid_mode", "OFF", ""},              // MariaDB has no gtid_mode: always GTIDs
	}
	for _, tt := range tests {
		vars := good()
		vars[tt.name] = tt.value
		err := checkSettings(vars, tt.flavor)
		if tt.want == "" {
			if err != nil {
				t.Errorf("%s %s=%s: unexpected %v", tt.flavor, tt.name, tt.value, err)
			}
			continue
		}
		if !errors.Is(err, ErrServerConfig) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s %s=%s: error %v, want ErrServerConfig naming %q", tt.flavor, tt.name, tt.value, err, tt.want)
		}
	}
	if err := checkSettings(good(), "mysql"); err != nil {
		t.Fatalf("good settings: %v", err)
	}
}

func TestCheckNotPurged(t *testing.T) {
	tests := []struct {
		flavor, earliest, pos string
		purged                bool
	}{
		{"mariadb", "", "", false},
		{"mariadb", "0-1-10", "0-1-10", false},
		{"mariadb", "0-1-10", "0-1-9", true},
		{"mariadb", "0-1-10,1-2-5", "0-1-20", true},
		{"mysql", "", "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5", false},
		{"mysql", "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5", "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-7", false},
		{"mysql", "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5", "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-3", true},
	}
	for _, tt := range tests {
		s := &binlog.Server{Flavor: tt.flavor, Earliest: tt.earliest, Addr: "db:3306"}
		err := CheckNotPurged(s, tt.pos)
		if tt.purged != errors.Is(err, binlog.ErrPurged) || (!tt.purged && err != nil) {
			t.Errorf("%s earliest %q pos %q: %v", tt.flavor, tt.earliest, tt.pos, err)
		}
	}
	if _, err := binlog.ParseSet("mariadb", "not-a-gtid"); !errors.Is(err, binlog.ErrBadPosition) {
		t.Fatalf("want binlog.ErrBadPosition, got %v", err)
	}
}

func TestRowMetadataIsAdvisory(t *testing.T) {
	list := Settings(map[string]string{"binlog_row_metadata": "MINIMAL"}, "mariadb")
	i := slices.IndexFunc(list, func(st Setting) bool { return st.Name == "binlog_row_metadata" })
	if i < 0 {
		t.Fatalf("binlog_row_metadata is not among the settings checked: %+v", list)
	}
	if st := list[i]; st.OK || !st.Advisory || !st.Present {
		t.Fatalf("binlog_row_metadata MINIMAL: %+v, want present, not OK and advisory", st)
	}
}

func TestQuote(t *testing.T) {
	for in, want := range map[string]string{
		"outbox": "'outbox'", "it's": "'it''s'", `a\b`: `'a\\b'`, `x\'; DROP`: `'x\\''; DROP'`,
	} {
		if got := quote(in); got != want {
			t.Errorf("quote(%q) = %s, want %s", in, got, want)
		}
	}
}
