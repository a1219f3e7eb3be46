package preflight

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/source"
)

// proofLimit bounds how long check waits for a host to show the
// checkpoint's last transaction.
var proofLimit = 10 * time.Second

// checkProof asks a host whose GTIDs hold the checkpoint to prove that it
// holds the checkpoint's last transaction with outbox rows (source.Prove),
// as the relay does before it reads a host: PASS when read again with the
// same rows (or, no longer in its binlog, from the server the checkpoint
// was read from, or when the checkpoint has no fingerprint to prove), FAIL
// when it holds another history or cannot show it, WARN when it did not
// answer in time. Hosts behind or refused already are not asked.
func checkProof(ctx context.Context, src binlog.Config, srv *binlog.Server, cp *checkpoint.Checkpoint, res hostResult, c collector) {
	if res.relation != source.Contains || source.CheckNotPurged(srv, cp.From()) != nil {
		return
	}
	p, err := source.Prove(ctx, src, srv, cp, proofLimit)
	switch {
	case errors.Is(err, source.ErrForeignHistory):
		c.add("proof", Fail, err.Error(), "point source.hosts at servers of the checkpoint's history (the server it was read from, "+
			"its replicas with log_slave_updates / log_replica_updates)")
	case errors.Is(err, source.ErrUnproven):
		c.add("proof", Fail, err.Error(), fmt.Sprintf("use a host that still has the transaction in its binlog; if this one is of the "+
			"checkpoint's history, `outbox-relay checkpoint set --gtid '%s' --schema keep`", cp.GTIDSet))
	case errors.Is(err, source.ErrUnreachable):
		c.add("proof", Warn, err.Error(), "")
	case err != nil:
		c.add("proof", Fail, err.Error(), "")
	case p.Kind == source.ProofSameServer:
		c.add("proof", Warn, p.Detail, "")
	default:
		c.add("proof", Pass, p.Detail, "")
	}
}
