package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/google/uuid"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/source"
)

// Before prune deletes anything it proves that the host it deletes on is
// of the source the checkpoint was read from: a checkpoint's GTID set
// proves nothing about another server's rows. MariaDB GTIDs repeat across
// independent servers (every fresh server writes 0-1-1, 0-1-2, ... with
// the default server_id and domain), so a host's executed set can look
// covered by a checkpoint it has nothing to do with.

// errNotSource: prune refused a host it cannot prove to be of the source.
var errNotSource = errors.New("the host is not proven to be of the checkpoint's source")

// hostIdentity is what prune learned about the server it deletes on.
type hostIdentity struct {
	addr string
	srv  *binlog.Server
}

func (h hostIdentity) String() string {
	s := fmt.Sprintf("%s (%s server_id %s", h.addr, h.srv.Flavor, h.srv.ServerID)
	if h.srv.UID != "" && h.srv.UID != h.srv.ServerID {
		s += ", server_uid " + h.srv.UID
	}
	return s + ")"
}

// describeHost reads the identity and binlog state of the server conn is
// connected to.
func describeHost(conn *binlog.Conn, addr string) (hostIdentity, error) {
	vars, err := source.Variables(conn)
	if err != nil {
		return hostIdentity{}, err
	}
	srv, err := source.Describe(conn, addr, vars)
	if err != nil {
		return hostIdentity{}, fmt.Errorf("read the identity of %s: %w", addr, err)
	}
	return hostIdentity{addr: addr, srv: srv}, nil
}

// ofSource says why host h belongs to the source of checkpoint cp (nil:
// no checkpoint, prune then deletes nothing), or refuses it with an error
// wrapping errNotSource. A host is of the source when
//   - it is the server the relay read the checkpoint from (its server_uid,
//     MySQL's server_uuid, is the checkpoint's source_uid);
//   - (MySQL) the checkpoint holds transactions of its server_uuid: it
//     wrote them, so it shares the source's history (UUIDs do not repeat);
//   - it is one of source.hosts as written in the configuration: the relay
//     itself would read from it.
//
// and never when its binlog has diverged from the checkpoint (Relate).
// force accepts any other host, with a warning.
func ofSource(cfg config.Config, cp *checkpoint.Checkpoint, h hostIdentity, force bool) (string, error) {
	if cp == nil {
		return "no checkpoint yet", nil
	}
	if cp.Flavor != h.srv.Flavor {
		return "", fmt.Errorf("%w: the checkpoint of %s is of a %s server, %s is %s", errNotSource, cfg.Name, cp.Flavor, h, h.srv.Flavor)
	}
	if rel, why, err := source.Relate(h.srv.Flavor, cp.GTIDSet, h.srv.State, h.srv.ServerID); err == nil && rel == source.Diverged {
		return "", fmt.Errorf("%w: %s has diverged from the checkpoint of %s (%s): it is not the source's history", errNotSource, h, cfg.Name, why)
	}
	var why string
	switch {
	case cp.SourceUID != "" && h.srv.UID == cp.SourceUID:
		why = "it is the server the relay reads (server_uid " + cp.SourceUID + ")"
	case h.srv.Flavor == mysql.MySQLFlavor && wroteInto(cp.GTIDSet, h.srv.UID):
		why = "the checkpoint holds transactions of its server_uuid " + h.srv.UID
	case containsString(cfg.Source.Hosts, h.addr):
		why = "it is in source.hosts"
	case force:
		fmt.Fprintf(os.Stderr, "warning: --force-host: %s is not proven to be of the source of %s (the relay reads %s, server_uid %q): "+
			"deleting on the operator's word\n", h, cfg.Name, cp.Host, cp.SourceUID)
		return "--force-host", nil
	default:
		recorded := "the checkpoint does not record its source's server_uid (written by an older outbox-relay: it is recorded from the next checkpoint the relay writes)"
		if cp.SourceUID != "" {
			recorded = fmt.Sprintf("the relay reads %s (server_uid %s)", cp.Host, cp.SourceUID)
		}
		return "", fmt.Errorf("%w: %s is neither in source.hosts nor the server the checkpoint of %s was read from: %s. "+
			"Its GTIDs may only look covered (MariaDB GTIDs such as 0-1-N repeat across independent servers), so its rows "+
			"may never have been published; run prune against a host of source.hosts, or pass --force-host once you know "+
			"%s is the source's primary", errNotSource, h, cfg.Name, recorded, h.addr)
	}
	return why, nil
}

// wroteInto reports whether MySQL GTID set set holds transactions of
// server uuid id.
func wroteInto(set, id string) bool {
	u, err := uuid.Parse(strings.TrimSpace(id))
	if err != nil {
		return false
	}
	s, err := binlog.ParseSet(mysql.MySQLFlavor, set)
	if err != nil {
		return false
	}
	_, ok := (*s.(*mysql.MysqlGTIDSet))[u]
	return ok
}

// checkDeleteGrants proves the user can DELETE from every table, without
// deleting: EXPLAIN DELETE is refused as DELETE would be.
func checkDeleteGrants(conn *binlog.Conn, tables []string) error {
	var missing []string
	for _, t := range tables {
		qt, err := source.QuoteTable(t)
		if err != nil {
			return err
		}
		if _, err := conn.Execute("EXPLAIN DELETE FROM " + qt + " WHERE 1 = 0"); err != nil {
			var me *mysql.MyError
			if errors.As(err, &me) && (me.Code == mysql.ER_TABLEACCESS_DENIED_ERROR || me.Code == mysql.ER_DBACCESS_DENIED_ERROR ||
				me.Code == mysql.ER_ACCESS_DENIED_ERROR) {
				missing = append(missing, t)
				continue
			}
			return fmt.Errorf("check the DELETE grant on %s: %w", t, err)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the user may not DELETE from %s: GRANT SELECT, DELETE ON <table> TO the user given with --user "+
			"(and --password-env)", strings.Join(missing, ", "))
	}
	return nil
}

// older is the condition that column col (quoted) is before the cut-off,
// and its arguments: an age against the server's clock at each statement
// (the clock that filled the column's DEFAULT CURRENT_TIMESTAMP), an RFC
// 3339 time as that instant in the session's time zone, as NOW() is.
func (p *pruner) older(col string) (string, []any) {
	if p.cutoff.Age > 0 {
		return fmt.Sprintf("%s < NOW(6) - INTERVAL %d MICROSECOND", col, p.cutoff.Age.Microseconds()), nil
	}
	at := p.cutoff.At
	return col + " < FROM_UNIXTIME(CAST(? AS DECIMAL(20,6)))", []any{fmt.Sprintf("%d.%06d", at.Unix(), at.Nanosecond()/1000)}
}

// candidates counts the rows of table t older than the cut-off (the upper
// bound of what prune deletes: only rows the checkpoint covers go).
func (p *pruner) candidates(t string) (int64, error) {
	qt, err := source.QuoteTable(t)
	if err != nil {
		return 0, err
	}
	rc := p.cfg.Router.For(t)
	older, args := p.older(source.QuoteIdent(p.timeColumn(t)))
	q := fmt.Sprintf("SELECT COUNT(*) FROM %s WHERE %s AND %s IS NOT NULL", qt, older, source.QuoteIdent(rc.EventIDColumn))
	res, err := p.conn.Execute(q, args...)
	if err != nil {
		return 0, fmt.Errorf("prune %s: count rows: %w", t, err)
	}
	n, err := res.GetInt(0, 0)
	if err != nil {
		return 0, fmt.Errorf("prune %s: count rows: %w", t, err)
	}
	return n, nil
}

// timeColumn is the column holding table t's row time.
func (p *pruner) timeColumn(t string) string {
	switch {
	case p.o.timeColumn != "":
		return p.o.timeColumn
	case p.cfg.Router.For(t).TimestampColumn != "":
		return p.cfg.Router.For(t).TimestampColumn
	}
	return "created_at"
}

// preflight proves the host is of the source and the user may delete,
// counts the rows older than the age, and says so: on stderr, and as the
// question prune asks before it deletes.
func (p *pruner) preflight(ctx context.Context, addr string) error {
	h, err := describeHost(p.conn, addr)
	if err != nil {
		return err
	}
	lctx, cancel := context.WithTimeout(ctx, p.cfg.Kafka.RequestTimeout+checkpoint.DefaultStableWait)
	cp, err := p.store.Load(lctx, p.cfg.Name)
	cancel()
	if err != nil {
		return fmt.Errorf("load checkpoint: %w", err)
	}
	why, err := ofSource(p.cfg, cp, h, p.o.forceHost)
	if err != nil {
		return err
	}
	if err := checkDeleteGrants(p.conn, p.cfg.Source.Tables); err != nil {
		return fmt.Errorf("prune on %s: %w", h, err)
	}
	var total int64
	counts := make([]string, 0, len(p.cfg.Source.Tables))
	for _, t := range p.cfg.Source.Tables {
		n, err := p.candidates(t)
		if err != nil {
			return err
		}
		total += n
		counts = append(counts, fmt.Sprintf("%s: %d", t, n))
	}
	cutoff := p.cutoff.At.Format(time.RFC3339)
	plan := fmt.Sprintf("delete published rows older than %s (before %s) on %s [%s] from %s: %d rows are that old (%s); only those the checkpoint of %s covers go",
		p.o.olderThan, cutoff, h, why, strings.Join(p.cfg.Source.Tables, ", "), total, strings.Join(counts, ", "), p.cfg.Name)
	if p.o.dryRun {
		fmt.Fprintf(os.Stderr, "prune (dry run, grants checked): would %s\n", plan)
		return nil
	}
	fmt.Fprintf(os.Stderr, "prune: %s\n", plan)
	return confirm(p.o.yes, plan)
}
