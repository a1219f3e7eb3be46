package relay

import (
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/source"
)

// A captured table that does not exist on the source (a typo in
// source.tables, a migration not run yet) publishes nothing, and nothing
// else says so: `run` does not stop on it, since the everyday setup "start
// now, the migration creates the outbox table later" must keep working,
// but it warns, naming the table and the host, and sets
// outbox_relay_captured_table_missing{table} to 1 until the table exists.

// tableWatch is what the source sampler of one attempt knows of the
// captured tables (its goroutine only).
type tableWatch struct {
	missing map[string]bool // by table; nil before the first check
	checked time.Time
}

// tablesEvery is how often the captured tables are checked while all exist
// (while one is missing: at every sample).
const tablesEvery = time.Minute

// watchTables checks, on the sampler's connection to host, which captured
// tables exist: at the attempt's start, then at every sample while one is
// missing and every tablesEvery otherwise. A table found missing is logged
// at warn level (once until it exists), one that appears at info level.
// It returns the error of a check that failed (logged at debug level).
func (r *Relay) watchTables(w *tableWatch, conn *binlog.Conn, host string) error {
	if w.missing != nil && time.Since(w.checked) < tablesEvery {
		gone := false
		for _, m := range w.missing {
			gone = gone || m
		}
		if !gone {
			return nil
		}
	}
	now := make(map[string]bool, len(r.cfg.Source.Tables))
	for _, t := range r.cfg.Source.Tables {
		db, tbl, _ := strings.Cut(t, ".")
		cols, err := source.TableColumns(conn, db, tbl)
		if err != nil {
			r.log.Debug().Err(err).Str("table", t).Msg("sample the source: captured table not checked")
			return err
		}
		now[t] = len(cols) == 0
	}
	for _, t := range r.cfg.Source.Tables {
		was, seen := w.missing[t]
		switch {
		case now[t] && (!seen || !was):
			r.log.Warn().Str("table", t).Str("source", host).
				Msg("captured table does not exist on the source (or the relay's user may not see it): nothing of it is published until it is created; check source.tables for a typo")
		case !now[t] && was:
			r.log.Info().Str("table", t).Str("source", host).Msg("captured table exists now")
		}
		r.metrics.TableMissing(t, now[t])
	}
	w.missing, w.checked = now, time.Now()
	return nil
}
