package audit

import (
	"context"
	"errors"
	"fmt"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/schema"
	"github.com/outbox-relay/outbox-relay/source"
)

// readPast reads the binlog of db's server after the checkpoint cp (from
// cp.From(), as the relay would resume, with the layout cp recorded there)
// until the end of the transaction that completes head, the executed set
// read after the window's rows, and returns what past collected: the keys
// of the rows of captured tables past cp that want keeps (pks: each table's
// primary key columns; want: the window's rows, so that a relay far behind
// costs no memory for the rows outside the window). It registers as a replica with a server_id of its own (never
// source.server_id: the server would drop the relay's connection). The
// binlog must still hold the transactions after cp: else (purged, binary
// log off, a stream the relay itself would stop at) it is an error, and
// nothing is called pending or missing on a guess.
func readPast(ctx context.Context, cfg config.Config, db Source, cp *checkpoint.Checkpoint, head string, pks map[string][]string, want func(key string) bool) (*past, error) {
	vars, err := source.Variables(db.Conn)
	if err != nil {
		return nil, err
	}
	srv, err := source.Describe(db.Conn, db.Addr, vars)
	if err != nil {
		return nil, err
	}
	if srv.Flavor != cp.Flavor {
		return nil, fmt.Errorf("the checkpoint is of a %s server, %s is %s", cp.Flavor, db.Addr, srv.Flavor)
	}
	headSet, err := binlog.ParseSet(srv.Flavor, head)
	if err != nil {
		return nil, err
	}
	p, err := newPast(cp, headSet, pks, want)
	if err != nil {
		return nil, err
	}
	from := cp.From()
	if err := source.CheckNotPurged(srv, from); err != nil {
		return nil, err
	}
	layout, signs, provisional := cp.Layout()
	tracker := schema.New(cfg.Source.Tables, layout, signs)
	tracker.SetProvisional(provisional)
	bcfg := db.Config
	bcfg.ServerID = source.ProbeServerID()
	r := binlog.NewReader(bcfg, srv, tracker, nil)
	if cp.Replays() {
		// Read again from before a prepared XA transaction, as the relay
		// does: where it stopped before in what it published is no stop.
		r.Published(p.covered)
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := make(chan []binlog.Event, 2)
	ended := make(chan error, 1)
	go func() { ended <- r.Run(rctx, from, events) }()
	take := func(batch []binlog.Event) error {
		for i := range batch {
			if err := p.add(&batch[i]); err != nil {
				return err
			}
		}
		return nil
	}
	var runErr error
	running := true
	for running && !p.done {
		select {
		case batch := <-events:
			if err := take(batch); err != nil {
				cancel()
				<-ended
				return nil, err
			}
		case runErr = <-ended:
			running = false
		}
	}
drain:
	for !running && !p.done {
		// The reader ended by itself: what it sent before its end counts.
		select {
		case batch := <-events:
			if err := take(batch); err != nil {
				return nil, err
			}
		default:
			break drain
		}
	}
	cancel()
	if running {
		<-ended // done: the reader ends with the context
	}
	if p.done {
		return p, nil
	}
	if runErr == nil {
		runErr = errors.New("the stream ended")
	}
	return nil, fmt.Errorf("read the binlog of %s from %s: %w", db.Addr, from, runErr)
}
