package relay

import (
	"context"
	"math"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/source"
)

// sampleEvery is how often a streaming attempt samples the source's binlog
// head (outbox_relay_source_behind_bytes) and retention.
const sampleEvery = 5 * time.Second

// sampleSource keeps outbox_relay_source_behind_bytes (the source's binlog
// bytes after the reader's position; 0 at the head) and the binlog retention behind
// outbox_relay_checkpoint_purge_margin_seconds up to date while an attempt
// streams from srv, on a client connection of its own, until ctx ends. A
// failed sample is logged at debug level and tried again: it never ends the
// attempt. At the end the sample is unknown again (NaN).
func (r *Relay) sampleSource(ctx context.Context, srv *binlog.Server, reader *binlog.Reader) {
	defer r.metrics.SourceBehindBytes.Set(math.NaN())
	var conn *binlog.Conn
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	tick := time.NewTicker(sampleEvery)
	defer tick.Stop()
	var tables tableWatch // captured tables that do not exist (tables.go)
	for n := 0; ; n++ {
		if n > 0 { // the first sample at once: the purge margin needs the retention
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
		if conn == nil {
			c, err := binlog.Connect(ctx, r.source, srv.Addr)
			if err != nil {
				r.log.Debug().Err(err).Msg("sample the source: connect")
				continue
			}
			conn, n = c, 0
		}
		// A connection that failed (killed, reset, a query past its bound)
		// answers nothing more: the next sample connects again.
		if err := r.watchTables(&tables, conn, srv.Addr); binlog.Broken(conn, err) {
			conn.Close()
			conn = nil
			continue
		}
		if n%12 == 0 { // at the start, then every minute: a DBA may change it
			ret, err := source.Retention(conn)
			if err != nil {
				r.log.Warn().Err(err).Msg("sample the source: binlog retention unknown, outbox_relay_checkpoint_purge_margin_seconds is NaN")
				r.metrics.SetRetention(0)
				if binlog.Broken(conn, err) {
					conn.Close()
					conn = nil
					continue
				}
			} else {
				r.metrics.SetRetention(ret)
			}
		}
		if r.metrics.AtHead() {
			// A heartbeat came after the last event handled: the server had
			// nothing more. The reader's position does not move on
			// heartbeats (after a restart it stays at the start of the
			// file the server skipped through), so it would count bytes the
			// relay has.
			r.metrics.SourceBehindBytes.Set(0)
			continue
		}
		file, pos := reader.ReadPosition()
		if file == "" {
			continue
		}
		behind, err := source.BehindBytes(conn, file, pos)
		if err != nil {
			r.log.Debug().Err(err).Msg("sample the source: binlog head")
			r.metrics.SourceBehindBytes.Set(math.NaN())
			conn.Close()
			conn = nil
			continue
		}
		r.metrics.SourceBehindBytes.Set(float64(behind))
	}
}
