package preflight

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/source"
)

// The retention item never FAILs (a check run before `run` must not keep a
// relay that would resume from starting): an old checkpoint WARNs, an
// unreadable RDS retention WARNs with the grant that fixes it, and it reads
// the settings as source.Retention does.
func TestRetentionItemWarnsNeverFails(t *testing.T) {
	old := &checkpoint.Checkpoint{Time: time.Now().Add(-31 * 24 * time.Hour)}
	for _, c := range []struct {
		name   string
		vars   map[string]string
		cp     *checkpoint.Checkpoint
		status Status
		detail string
	}{
		{"older than retention", map[string]string{"binlog_expire_logs_seconds": "2592000"}, old, Warn, "retention is 720h0m0s"},
		{"MariaDB 10.5 days", map[string]string{"expire_logs_days": "7"}, old, Warn, "retention is 168h0m0s"},
		{"auto purge off", map[string]string{"binlog_expire_logs_seconds": "2592000", "binlog_expire_logs_auto_purge": "OFF"}, old, Pass, "never expired"},
		{"no expiry", map[string]string{"binlog_expire_logs_seconds": "0", "expire_logs_days": "0"}, old, Pass, "never expired"},
		{"young checkpoint", map[string]string{"binlog_expire_logs_seconds": "2592000"}, &checkpoint.Checkpoint{Time: time.Now()}, Pass, "retention 720h0m0s"},
		{"unparsable", map[string]string{"expire_logs_days": "soon"}, old, Warn, "not a number of days"},
	} {
		var r Report
		checkRetention(c.vars, c.cp, collector{target: "source h:3306", items: &r})
		if len(r) != 1 || r[0].Status != c.status || !strings.Contains(r[0].Detail, c.detail) {
			t.Errorf("%s: %+v; want %s containing %q", c.name, r, c.status, c.detail)
		}
	}
	var r Report
	judgeRetention(0, fmt.Errorf("read: %w", source.ErrRDSRetentionDenied), old, collector{target: "source h:3306", items: &r})
	if len(r) != 1 || r[0].Status != Warn || !strings.Contains(r[0].Fix, "GRANT SELECT ON mysql.rds_configuration") {
		t.Errorf("RDS retention denied: %+v; want a WARN naming the grant", r)
	}
}

// check's retention item honours binlog_expire_logs_auto_purge=OFF as
// source.Retention does. The failure guarded against: `check` (run before
// `run` by an operator or a script) judges retention with its own reading of the
// settings, which disagrees with source.Retention (the purge-margin
// metric's): MySQL 8.0.29+ binlog_expire_logs_auto_purge=OFF means never
// purged by age (docs/mysql.md, source.NoExpiry), yet check FAILs the host
// once the checkpoint is older than binlog_expire_logs_seconds.
// (source.Variables does not even read binlog_expire_logs_auto_purge.)
// Under the unit, a relay that was down 31 days on such a server never
// starts again: exit 1, restarted every 10s.
func TestCheckRetentionHonoursAutoPurgeOff(t *testing.T) {
	vars := map[string]string{"binlog_expire_logs_seconds": "2592000", "binlog_expire_logs_auto_purge": "OFF"}
	var r Report
	cp := &checkpoint.Checkpoint{Time: time.Now().Add(-31 * 24 * time.Hour)}
	checkRetention(vars, cp, collector{target: "source h:3306", items: &r})
	t.Logf("%+v", r)
	if len(r) == 1 && r[0].Status == Fail {
		t.Fatalf("check FAILs retention on a server that never purges by age (source.Retention says NoExpiry=%v): %s", source.NoExpiry, r[0].Detail)
	}
}
