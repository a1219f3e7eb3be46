package source

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
)

// The proof that a host holds the checkpoint's history, beyond GTIDs.
//
// A GTID set cannot tell a server of the checkpoint's history from an
// unrelated one that wrote as many transactions under the same GTIDs:
// MariaDB servers all start at server_id 1, domain 0, and write 0-1-1,
// 0-1-2, ... (MySQL: a server cloned with its auto.cnf keeps the
// server_uuid). Failing over to such a server, the relay would resume
// "after" the checkpoint in another history and publish rows that never
// existed on the source. So every checkpoint carries the fingerprint of the
// last transaction with rows of captured tables it covers
// (checkpoint.Fingerprint: its GTID, the GTID set before it, and the digest
// of those rows, binlog.TxDigest), and before the relay reads a host Prove
// reads that transaction again from the host's binlog and compares.
//
// The digest covers what a replica re-logs unchanged (log_slave_updates /
// log_replica_updates): the tables' names and the values of the rows
// inserted (never UPDATE or DELETE images, which a replica logs with its
// own binlog_row_image). A replica's events differ in bytes (positions, checksums, table
// ids, how rows are split into events, compression), so a real replica
// proves it holds the transaction; a server whose transaction under that
// GTID has other rows, or none of the captured tables, is another history.
//
// Limits, named in docs/source.md: a transaction without rows of captured
// tables is not fingerprinted (the fingerprint stays at the last one with
// rows), so a server that shares the history up to that transaction and
// differs only in later transactions without outbox rows is not told apart;
// XA transactions are not fingerprinted either.

// Sentinels of Prove's errors.
var (
	// ErrForeignHistory: the host holds another transaction under the GTID
	// of the checkpoint's last transaction with outbox rows (other rows,
	// or none of the captured tables), or its binlog refuses the position
	// just before it as not of its history: another server's history. It
	// never becomes usable. Prove's error also wraps
	// binlog.ErrPositionDiverged.
	ErrForeignHistory = errors.New("source host holds another history under the checkpoint's gtids")
	// ErrUnproven: the host's binlog no longer holds the checkpoint's last
	// transaction with outbox rows (purged, reset, or it was never logged
	// there), and the host is not the server the checkpoint was read
	// from: nothing proves it holds that transaction. Prove's error also
	// wraps binlog.ErrPurged. An operator who knows the host is of the
	// checkpoint's history says so by writing the same position again
	// (`checkpoint set`), which carries no fingerprint.
	ErrUnproven = errors.New("source host cannot prove it holds the checkpoint's last transaction")
)

// ProofKind says how a host was accepted.
type ProofKind int

// Proof kinds.
const (
	// ProofRead: the transaction read again from the host's binlog has the
	// same rows.
	ProofRead ProofKind = iota + 1
	// ProofSameServer: the host's binlog no longer holds the transaction,
	// and the host is the server the checkpoint was read from (the same
	// server_uid / server_uuid and server_id).
	ProofSameServer
	// ProofNone: the checkpoint has no fingerprint to prove (written
	// before fingerprints, set by an operator, or before the pipeline
	// published a transaction with outbox rows), or one of a scheme this
	// build does not compute.
	ProofNone
)

// Proof is how Prove accepted a host.
type Proof struct {
	Kind   ProofKind
	Detail string // what was proved, for logs and check
}

// Prove reads the transaction of cp's fingerprint from srv's binlog (a
// short replication connection started at the fingerprint's Before, each
// read bounded by limit altogether) and compares its rows with the
// fingerprint. nil error: srv may be used (Proof says on what grounds).
// Otherwise an error wrapping ErrForeignHistory (and
// binlog.ErrPositionDiverged), ErrUnproven (and binlog.ErrPurged), or
// ErrUnreachable (no answer within limit, or no connection: not proved
// either way; ask again).
func Prove(ctx context.Context, cfg binlog.Config, srv *binlog.Server, cp *checkpoint.Checkpoint, limit time.Duration) (Proof, error) {
	fp := cp.Fingerprint
	switch {
	case fp == nil:
		return Proof{Kind: ProofNone, Detail: "the checkpoint carries no fingerprint of its last transaction (written before fingerprints, " +
			"set by an operator, or before the first transaction with outbox rows): nothing to prove; the first checkpoint after " +
			"the next transaction with outbox rows carries one"}, nil
	case !strings.HasPrefix(fp.Digest, binlog.DigestScheme+":"):
		return Proof{Kind: ProofNone, Detail: fmt.Sprintf("the checkpoint's fingerprint of %s is of a scheme this build does not compute "+
			"(%.40s): nothing to prove; the next transaction with outbox rows replaces it", fp.GTID, fp.Digest)}, nil
	}
	dg, found, err := readDigest(ctx, cfg, srv, cp, limit)
	if errors.Is(err, binlog.ErrDuplicateServerID) {
		// Another probe drew the same id (see Probe): draw again.
		dg, found, err = readDigest(ctx, cfg, srv, cp, limit)
	}
	what := fmt.Sprintf("the checkpoint's last transaction with outbox rows, %s (%d rows of %s)", fp.GTID, fp.Rows, strings.Join(fp.Tables, ", "))
	switch {
	case errors.Is(err, binlog.ErrPositionDiverged):
		return Proof{}, fmt.Errorf("%w: %w: %s refuses to stream from %q, the position just before %s: it is not of the "+
			"checkpoint's history; %s", ErrForeignHistory, binlog.ErrPositionDiverged, srv.Addr, fp.Before, what, foreignAdvice)
	case errors.Is(err, binlog.ErrPurged), errors.Is(err, binlog.ErrPositionAhead):
		return sameServer(srv, cp, what, fmt.Sprintf("its binlog no longer serves the position just before it (%v)", err))
	case err != nil && ctx.Err() != nil:
		return Proof{}, ctx.Err()
	case err != nil && (errors.Is(err, binlog.ErrBadPosition) || errors.Is(err, binlog.ErrAccessDenied) ||
		errors.Is(err, binlog.ErrInsecureLogin) || errors.Is(err, binlog.ErrPacketBound)):
		return Proof{}, fmt.Errorf("prove %s holds %s: %w", srv.Addr, what, err) // a configuration the relay reports
	case err != nil:
		// No answer within limit, a connection that failed: not proved
		// either way, ask again.
		return Proof{}, fmt.Errorf("%w: %s did not show %s within %s: %v", ErrUnreachable, srv.Addr, what, limit, err)
	case !found:
		return sameServer(srv, cp, what, "its binlog does not hold it after the position just before it, "+fp.Before)
	case dg == nil:
		return Proof{}, fmt.Errorf("%w: %w: %s holds another transaction under %s, without rows of %s: the checkpoint's last "+
			"transaction with outbox rows has %d; %s", ErrForeignHistory, binlog.ErrPositionDiverged, srv.Addr, fp.GTID,
			strings.Join(fp.Tables, ", "), fp.Rows, foreignAdvice)
	case dg.Sum != fp.Digest:
		return Proof{}, fmt.Errorf("%w: %w: %s holds another transaction under %s: %d rows of %s with other values than the "+
			"checkpoint's last transaction with outbox rows (%d rows of %s); %s", ErrForeignHistory, binlog.ErrPositionDiverged,
			srv.Addr, fp.GTID, dg.Rows, strings.Join(dg.Tables, ", "), fp.Rows, strings.Join(fp.Tables, ", "), foreignAdvice)
	}
	return Proof{Kind: ProofRead, Detail: fmt.Sprintf("%s holds %s: read again from its binlog, the same rows", srv.Addr, what)}, nil
}

// foreignAdvice ends ErrForeignHistory's errors.
const foreignAdvice = "the relay does not read it: point source.hosts at servers of the checkpoint's history (the server the " +
	"checkpoint was read from, its replicas with log_slave_updates / log_replica_updates); if this server is to replace that " +
	"history on purpose, set a position of its own with `outbox-relay checkpoint set`"

// sameServer accepts srv, whose binlog cannot show what (why), when it is
// the server cp was read from; otherwise the error wraps ErrUnproven.
func sameServer(srv *binlog.Server, cp *checkpoint.Checkpoint, what, why string) (Proof, error) {
	if srv.UID != "" && srv.UID == cp.SourceUID && srv.ServerID == cp.ServerID {
		return Proof{Kind: ProofSameServer, Detail: fmt.Sprintf("%s cannot show %s (%s), but it is the server the checkpoint was "+
			"read from (server_uid/server_uuid %s, server_id %s)", srv.Addr, what, why, srv.UID, srv.ServerID)}, nil
	}
	return Proof{}, fmt.Errorf("%w: %w: %s cannot show %s: %s; it is not the server the checkpoint was read from (%s, "+
		"server_uid/server_uuid %q, this host %q): nothing proves it holds the same transaction. If it is of the checkpoint's "+
		"history (a replica or the promoted primary whose older binlogs are purged), say so by writing the same position "+
		"again: `outbox-relay checkpoint set --gtid '%s' --schema keep` (a checkpoint set by hand carries no fingerprint); "+
		"else point source.hosts at a server that holds it", ErrUnproven, binlog.ErrPurged, srv.Addr, what, why, cp.Host,
		cp.SourceUID, srv.UID, cp.GTIDSet)
}

// readDigest reads the transaction of cp's fingerprint from srv's binlog.
func readDigest(ctx context.Context, cfg binlog.Config, srv *binlog.Server, cp *checkpoint.Checkpoint, limit time.Duration) (*binlog.TxDigest, bool, error) {
	fp := cp.Fingerprint
	set, err := proofStart(srv, fp)
	if err != nil {
		return nil, false, err
	}
	pctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	dump, err := binlog.NewRowsDump(pctx, cfg, srv.Addr, srv.Flavor, ProbeServerID(), min(limit/4, 250*time.Millisecond), fp.Tables)
	if err != nil {
		return nil, false, err
	}
	defer dump.Close()
	what := fmt.Sprintf("read %s's transaction %s from %q", srv.Addr, fp.GTID, set.String())
	stream, err := dump.Start(set)
	if err != nil {
		return nil, false, dump.Refused(what, err)
	}
	dg, found, err := dump.Digest(pctx, stream, fp.GTID)
	if err != nil {
		if pctx.Err() != nil {
			return nil, false, fmt.Errorf("%s: %w", what, pctx.Err())
		}
		return nil, false, dump.Refused(what, err)
	}
	return dg, found, nil
}

// proofStart is the set a read of fp's transaction from srv starts after
// (binlog.Dump.Digest): MariaDB, the set just before it (fp.Before): the
// server sends each domain's transactions after it in binlog order, so the
// transaction comes next in its domain. MySQL, every transaction srv has
// executed (gtid_executed, srv.State) but that one: the server sends the
// transactions a start set lacks in binlog order, and a replica that
// applies in parallel without replica_preserve_commit_order may have logged
// any number of others before it (later ones too, or another channel's on
// a multi-source replica); with this set it skips them itself and sends
// that transaction first. A set with the transaction purged from srv's
// binlog is refused as purged (gtid_purged is not within it), as a start
// at fp.Before would be.
func proofStart(srv *binlog.Server, fp *checkpoint.Fingerprint) (mysql.GTIDSet, error) {
	if srv.Flavor == mysql.MariaDBFlavor {
		return binlog.ParseSet(srv.Flavor, fp.Before)
	}
	have, err := binlog.ParseSet(srv.Flavor, strings.ReplaceAll(srv.State, "\n", ""))
	if err != nil {
		return nil, err
	}
	one, err := binlog.ParseSet(srv.Flavor, fp.GTID)
	if err != nil {
		return nil, err
	}
	return setMinus(have, one), nil
}
