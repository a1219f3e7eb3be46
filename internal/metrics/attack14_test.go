package metrics

import (
	"testing"
	"time"
)

// A relay catching up: it reads (and checkpoints every 10s) transactions
// committed 6 days ago, on a source that keeps binlogs 7 days. The binlogs
// after its checkpoint are 6 days old: the source may purge them in about a
// day (at the next rotation once the relay's dump thread lets go of them:
// any restart, failover or deploy), and the relay then stops with exit 66.
// This is the state loop.go produces: SourceRead(ev.Time) per transaction,
// CheckpointTime = cp.Time = time.Now() (sink.go) per checkpoint.
// outbox_relay_checkpoint_purge_margin_seconds must say about 1 day;
// it says 7 days, so OutboxRelayPurgeMarginLow (< 1 day) never fires.
func TestAttack14PurgeMarginIgnoresHowOldTheCheckpointedBinlogIs(t *testing.T) {
	m := New("test")
	m.SetState(StateStarting)
	m.Ready.Store(true)
	m.SetRetention(7 * 24 * time.Hour)
	behind := 6 * 24 * time.Hour
	m.SourceRead(time.Now().Add(-behind))                      // the transaction just read
	m.CheckpointTime.Set(float64(time.Now().UnixNano()) / 1e9) // cp.Time: when written
	lag := gauge(t, m, "outbox_relay_source_lag_seconds")
	margin := gauge(t, m, "outbox_relay_checkpoint_purge_margin_seconds")
	t.Logf("lag %.0fs (%.1f days), purge margin %.0fs (%.1f days)", lag, lag/86400, margin, margin/86400)
	if want := (7*24*time.Hour - behind).Seconds(); margin > want+60 {
		t.Fatalf("purge margin %.1f days while the checkpoint's binlogs are %.1f days old under a 7-day retention: want <= %.1f days",
			margin/86400, lag/86400, want/86400)
	}
}
