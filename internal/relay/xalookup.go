package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
)

// The loop's look-up of an XA prepare the assembler does not know (the
// XA COMMIT of a transaction prepared before the relay first started): the
// one step of assembly that reads the source (source.FindXAPrepare).

// xaLookupTimeout bounds the search of the server's binlogs for the XA
// PREPARE of an unknown XA COMMIT.
const xaLookupTimeout = 5 * time.Minute

// unknownXA handles the XA COMMIT of a transaction prepared before the
// position the relay first started from (another application's XA
// transaction in flight at the first start): the binlog tells whether its
// prepare wrote a captured table. If it did not, it is only logged; if it
// did, or it cannot be found, the relay stops.
func (l *loop) unknownXA(ctx context.Context, ev *binlog.Event) error {
	lctx, cancel := context.WithTimeout(ctx, xaLookupTimeout)
	defer cancel()
	p, err := l.r.findXAPrepare(lctx, l.srv, ev.XID, ev.GTID)
	if err != nil && lctx.Err() != nil && ctx.Err() == nil {
		// Its own bound: looking again at every restart would take as long.
		return fmt.Errorf("%w: XA COMMIT of %s at %s: its XA PREPARE, before the position the relay first started from, "+
			"was not found in %s of reading the server's binlogs (%v); if it wrote outbox rows, publish them by hand, then "+
			"`outbox-relay checkpoint skip --gtid %s`", ErrUnknownXA, ev.XID, ev.GTID, xaLookupTimeout, err, ev.GTID)
	}
	if err != nil {
		return fmt.Errorf("find the prepare of xa transaction %s committed at %s: %w", ev.XID, ev.GTID, err)
	}
	if p != nil {
		var captured []string
		for _, t := range p.Tables {
			for k := range l.r.routes { // the table map's names, compared as the server does
				if l.srv.Names.Same(k.schema+"."+k.name, t) {
					captured = append(captured, t)
					break
				}
			}
		}
		if len(captured) == 0 {
			l.r.log.Info().Str("xid", ev.XID).Str("gtid", ev.GTID).Str("prepared_at", p.GTID).Strs("tables", p.Tables).
				Msg("xa commit of a transaction prepared before the relay's start; it wrote no captured table")
			return nil
		}
		return fmt.Errorf("%w: XA COMMIT of %s at %s: it was prepared at %s, before the position the relay first started "+
			"from, and wrote %v: stop, `outbox-relay checkpoint set` to the position just before %s (its rows and what "+
			"follows are then published again: consumers deduplicate by event id), and start again", ErrUnknownXA,
			ev.XID, ev.GTID, p.GTID, captured, p.GTID)
	}
	return fmt.Errorf("%w: XA COMMIT of %s at %s: its XA PREPARE is before the position the relay first started from and "+
		"no binlog on the server still holds it; if it wrote outbox rows, publish them by hand, then "+
		"`outbox-relay checkpoint skip --gtid %s`", ErrUnknownXA, ev.XID, ev.GTID, ev.GTID)
}
