package source

import (
	"errors"
	"testing"
	"time"
)

func TestRetentionOf(t *testing.T) {
	for _, c := range []struct {
		name string
		vars map[string]string
		want time.Duration
		bad  bool
	}{
		{"mariadb 10.5 days", map[string]string{"expire_logs_days": "7"}, 7 * 24 * time.Hour, false},
		{"mariadb 10.11 both", map[string]string{"expire_logs_days": "7.000000", "binlog_expire_logs_seconds": "604800"}, 7 * 24 * time.Hour, false},
		{"mariadb fraction", map[string]string{"expire_logs_days": "0.500000", "binlog_expire_logs_seconds": "0"}, 12 * time.Hour, false},
		{"mysql 8 default", map[string]string{"binlog_expire_logs_seconds": "2592000", "binlog_expire_logs_auto_purge": "ON"}, 30 * 24 * time.Hour, false},
		{"mysql auto purge off", map[string]string{"binlog_expire_logs_seconds": "2592000", "binlog_expire_logs_auto_purge": "OFF"}, NoExpiry, false},
		{"never", map[string]string{"expire_logs_days": "0", "binlog_expire_logs_seconds": "0"}, NoExpiry, false},
		{"nothing known", map[string]string{}, NoExpiry, false},
		{"garbage seconds", map[string]string{"binlog_expire_logs_seconds": "soon"}, 0, true},
		{"garbage days", map[string]string{"expire_logs_days": "NaN"}, 0, true},
	} {
		got, err := RetentionOf(c.vars)
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("%s: %v, %v; want %v (error %v)", c.name, got, err, c.want, c.bad)
		}
	}
}

func TestBehindBytes(t *testing.T) {
	rows := [][]string{{"binlog.000001", "1000"}, {"binlog.000002", "500", "No"}, {"binlog.000003", "300"}}
	for _, c := range []struct {
		file string
		pos  uint32
		want int64
	}{
		{"binlog.000003", 300, 0},
		{"binlog.000003", 100, 200},
		{"binlog.000002", 400, 400},
		{"binlog.000001", 4, 996 + 500 + 300},
	} {
		got, err := behindBytes(rows, c.file, c.pos)
		if err != nil || got != c.want {
			t.Errorf("%s:%d: %d, %v; want %d", c.file, c.pos, got, err, c.want)
		}
	}
	if _, err := behindBytes(rows, "binlog.000009", 4); !errors.Is(err, ErrNotInBinlogs) {
		t.Errorf("unknown file: %v", err)
	}
	if _, err := behindBytes([][]string{{"binlog.000001", "x"}}, "binlog.000001", 4); err == nil {
		t.Error("a size that is not a number passed")
	}
}
