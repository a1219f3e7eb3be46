package preflight

import (
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
)

// Attack 14: `check` (the systemd unit's ExecStartPre) judges retention
// with its own reading of the settings, which disagrees with
// binlog.Retention (the purge-margin metric's): MySQL 8.0.29+
// binlog_expire_logs_auto_purge=OFF means never purged by age (docs/mysql.md,
// binlog.NoExpiry), yet check FAILs the host once the checkpoint is older
// than binlog_expire_logs_seconds. (binlog.Variables does not even read
// binlog_expire_logs_auto_purge.) Under the unit, a relay that was down 31
// days on such a server never starts again: exit 1, restarted every 10s.
func TestAttack14CheckRetentionIgnoresAutoPurgeOff(t *testing.T) {
	vars := map[string]string{"binlog_expire_logs_seconds": "2592000", "binlog_expire_logs_auto_purge": "OFF"}
	var r Report
	cp := &checkpoint.Checkpoint{Time: time.Now().Add(-31 * 24 * time.Hour)}
	checkRetention(vars, cp, collector{target: "source h:3306", items: &r})
	t.Logf("%+v", r)
	if len(r) == 1 && r[0].Status == Fail {
		t.Fatalf("check FAILs retention on a server that never purges by age (binlog.Retention says NoExpiry=%v): %s", binlog.NoExpiry, r[0].Detail)
	}
}
