package relay

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/errclass"
	"github.com/outbox-relay/outbox-relay/source"
)

// A replica the relay streams from can stop receiving transactions while
// its connection stays healthy (see source.WatchStale). With several hosts
// the attempt watches the host in use; on a stale verdict it ends, and the
// next attempt holds the verdict against the host (staleHold) and chooses
// another.

// errHostStale: the source host in use stopped receiving transactions that
// another host has.
var errHostStale = errclass.New(errclass.Transient, "source_position", "source host in use stopped receiving transactions")

var staleHold = time.Minute

// watchStale runs beside an attempt streaming from srv until ctx ends; on
// a stale verdict it stores the reason in stale and calls stop.
func (r *Relay) watchStale(ctx context.Context, srv *binlog.Server, stale *atomic.Pointer[error], stop func()) {
	v := source.WatchStale(ctx, r.source, srv.Addr)
	if v == nil {
		return
	}
	err := fmt.Errorf("%w: %s has stayed at %s for %s while %s has those transactions and more "+
		"(its replication stopped?): choosing another host", errHostStale, v.Addr, v.Head, v.For, v.Ahead)
	stale.Store(&err)
	stop()
}

// judgeStale records a stale verdict (see watchStale) against srv: the
// next choice passes over it for staleHold.
func (r *Relay) judgeStale(srv *binlog.Server, from string, err error) error {
	r.hold(srv.Addr, hostRefusal{from: from, err: fmt.Errorf("%w: %w", binlog.ErrPositionAhead, err), until: time.Now().Add(staleHold)})
	r.setHostState(srv.Addr, string(source.HostBehind))
	r.log.Warn().Err(err).Str("host", srv.Addr).Msg("source host in use is stale; choosing again among source.hosts")
	return fmt.Errorf("%w: %w", errHostRefused, err)
}
