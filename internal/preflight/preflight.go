// Package preflight checks, item by item, that a configuration can run:
// every source host (settings, grants, tables, retention, checkpoint not
// purged) and Kafka (reachable, transactions, checkpoint topic, target
// topics). Each failed item carries its fix. Run never stops at the first
// failure.
package preflight

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/source"
)

// Status of one item.
type Status string

// Statuses. Only FAIL makes the check fail.
const (
	Pass Status = "PASS"
	Warn Status = "WARN"
	Fail Status = "FAIL"
)

// Item is one checked property.
type Item struct {
	Target string `json:"target"` // "source host:port" or "kafka"
	Name   string `json:"name"`
	Status Status `json:"status"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
	// err is what `check` exits with for this item (a lost checkpoint:
	// checkpoint.ErrLost, as `run` refuses); nil for the others.
	err error
}

// Report is the list of items.
type Report []Item

// OK reports whether no item failed, leaving out the items of single
// source hosts: while one host is usable the relay runs (the "usable
// hosts" item fails when none is).
func (r Report) OK() bool {
	for _, it := range r {
		if it.Status == Fail && !strings.HasPrefix(it.Target, hostTarget) {
			return false
		}
	}
	return true
}

// Err is the error of the first item that carries one of its own: the
// lost checkpoint (checkpoint.ErrLost) that `run` refuses to start on;
// nil when none does.
func (r Report) Err() error {
	for _, it := range r {
		if it.err != nil {
			return it.err
		}
	}
	return nil
}

// fail adds a failed item that carries err (see Report.Err).
func (r *Report) fail(name, detail, fix string, err error, target string) {
	*r = append(*r, Item{Target: target, Name: name, Status: Fail, Detail: detail, Fix: fix, err: err})
}

// hostTarget prefixes the Target of a source host's items.
const hostTarget = "source "

// Find returns the first item with name.
func (r Report) Find(name string) (Item, bool) {
	for _, it := range r {
		if it.Name == name {
			return it, true
		}
	}
	return Item{}, false
}

type collector struct {
	target string
	items  *Report
}

func (c collector) add(name string, st Status, detail, fix string) {
	*c.items = append(*c.items, Item{Target: c.target, Name: name, Status: st, Detail: detail, Fix: fix})
}

// Run checks cfg against its source hosts and Kafka.
func Run(ctx context.Context, cfg config.Config) Report { return RunTo(ctx, cfg, nil) }

// RunTo is Run, saying on progress (when not nil) what it checks as it
// starts each part, with the bounds of its waits: a host that does not
// answer shows where the check is.
func RunTo(ctx context.Context, cfg config.Config, progress io.Writer) Report {
	say := func(format string, args ...any) {
		if progress != nil {
			fmt.Fprintf(progress, format+"\n", args...)
		}
	}
	var r Report
	k, err := clients.NewKafka(cfg)
	if err != nil {
		collector{"kafka", &r}.add("tls", Fail, err.Error(), "fix kafka.tls")
		return r
	}
	src, err := clients.Source(cfg)
	if err != nil {
		collector{"source", &r}.add("tls", Fail, err.Error(), "fix source.tls")
		return r
	}
	say("checking kafka %s (each request within %s)", strings.Join(cfg.Kafka.Brokers, ","), cfg.Kafka.RequestTimeout)
	for _, w := range cfg.TransportWarnings() {
		collector{w.Target, &r}.add("transport", Warn, w.Detail, w.Fix)
	}
	kc := checkKafka(ctx, cfg, k, collector{"kafka", &r})
	cp := kc.cp
	hosts := make([]hostResult, len(cfg.Source.Hosts))
	for i, addr := range cfg.Source.Hosts {
		say("checking source host %s (connect and login within %s, each query within %s)", addr,
			cfg.Source.ConnectTimeout, cfg.Source.QueryTimeout)
		hosts[i] = checkSource(ctx, cfg, src, addr, kc, collector{hostTarget + addr, &r})
	}
	if cp != nil {
		markErrant(r, hosts, cp.GTIDSet)
	}
	summarize(&r, hosts)
	return r
}

// hostResult is what checkSource learned about one host.
type hostResult struct {
	addr     string
	srv      *binlog.Server
	relation source.Relation
	position int // index of its "position" item; -1 without one
}

// markErrant fails the position of hosts that are behind but hold errant
// GTIDs that a host with the checkpoint went past (source.MarkErrant).
func markErrant(r Report, hosts []hostResult, published string) {
	var ref *binlog.Server
	var checks []source.HostCheck
	var idx []int
	for _, h := range hosts {
		if h.srv == nil || h.position < 0 {
			continue
		}
		switch h.relation {
		case source.Contains:
			if ref == nil {
				ref = h.srv
			}
		case source.Behind:
			checks = append(checks, source.HostCheck{Addr: h.addr, Status: source.HostBehind, Server: h.srv})
			idx = append(idx, h.position)
		}
	}
	source.MarkErrant(checks, ref, published)
	for i, c := range checks {
		if c.Status == source.HostDiverged {
			r[idx[i]].Status, r[idx[i]].Detail, r[idx[i]].Fix = Fail, c.Err.Error(), divergedFix
		}
	}
}

const divergedFix = "point source.hosts at servers of the checkpoint's history (rebuild a diverged replica), " +
	"or `outbox-relay checkpoint set` to a position of this server knowing which transactions differ"

// summarize adds one "host" item per source host (its worst item) and the
// "usable hosts" item that decides the check for the source side.
func summarize(r *Report, hosts []hostResult) {
	usable, waiting := []string{}, 0
	for _, h := range hosts {
		worst, first := Pass, ""
		for _, it := range *r {
			if it.Target != hostTarget+h.addr {
				continue
			}
			if it.Status == Fail && worst != Fail {
				worst, first = Fail, it.Name
			} else if it.Status == Warn && worst == Pass {
				worst = Warn
			}
		}
		c := collector{hostTarget + h.addr, r}
		switch {
		case worst == Fail:
			c.add("host", Fail, "not usable: see "+first, "fix the items above, or remove the host from source.hosts")
		case h.relation == source.Behind && h.position >= 0:
			waiting++
			usable = append(usable, h.addr)
			c.add("host", Warn, "usable once it has caught up with the checkpoint", "")
		case worst == Warn:
			usable = append(usable, h.addr)
			c.add("host", Warn, "usable, with warnings", "")
		default:
			usable = append(usable, h.addr)
			c.add("host", Pass, "usable", "")
		}
	}
	c := collector{"source", r}
	switch {
	case len(usable) == 0:
		c.add("usable hosts", Fail, fmt.Sprintf("none of the %d source hosts is usable", len(hosts)), "fix at least one host (see its items)")
	case waiting == len(usable):
		c.add("usable hosts", Warn, fmt.Sprintf("%d of %d, all behind the checkpoint: the relay starts and waits for one to catch up",
			len(usable), len(hosts)), "")
	default:
		c.add("usable hosts", Pass, fmt.Sprintf("%d of %d (%s); the relay reads the first one that has the checkpoint",
			len(usable), len(hosts), strings.Join(usable, ", ")), "")
	}
}

func checkSource(ctx context.Context, cfg config.Config, src binlog.Config, addr string, kc checked, c collector) hostResult {
	cp := kc.cp
	res := hostResult{addr: addr, position: -1}
	conn, err := binlog.Connect(ctx, src, addr)
	if err != nil {
		fix := "check that the server runs and source.hosts names it"
		switch {
		case errors.Is(err, binlog.ErrAccessDenied):
			fix = "check source.user and source.password"
		case errors.Is(err, binlog.ErrInsecureLogin):
			fix = "enable source.tls with source.tls.ca_file (the production setting); the error names the opt-in for a trusted network"
		case errors.Is(err, binlog.ErrPacketBound):
			fix = "raise source.max_packet_bytes if the server really sends packets this large; else find who answers on this address"
		case errors.Is(err, binlog.ErrAnswerBound), errors.Is(err, binlog.ErrBrokenAnswer):
			fix = "find who answers on this address: no MySQL or MariaDB server answers the relay's queries so"
		}
		c.add("connect", Fail, err.Error(), fix)
		return res
	}
	defer conn.Close()
	c.add("connect", Pass, "connected as "+cfg.Source.User, "")
	vars, err := source.Variables(conn)
	if err != nil {
		c.add("variables", Fail, err.Error(), "grant the relay user the right to read server variables")
		return res
	}
	srv, posErr := source.Describe(conn, addr, vars)
	if cfg.Source.Flavor != config.FlavorAuto && string(cfg.Source.Flavor) != srv.Flavor {
		c.add("version", Fail, fmt.Sprintf("%s (%s), but source.flavor is %s", srv.Version, srv.Flavor, cfg.Source.Flavor),
			"set source.flavor to auto or "+srv.Flavor)
	} else {
		c.add("version", Pass, fmt.Sprintf("%s (%s)", srv.Version, srv.Flavor), "")
	}
	for _, st := range source.Settings(vars, srv.Flavor) {
		switch {
		case !st.Present:
			c.add(st.Name, Pass, "not a setting of this server", "")
		case st.OK:
			c.add(st.Name, Pass, st.Got, "")
		case st.Advisory:
			c.add(st.Name, Warn, fmt.Sprintf("%s, %s recommended", orUnset(st.Got), st.Want), st.Fix)
		default:
			c.add(st.Name, Fail, fmt.Sprintf("%s, need %s", orUnset(st.Got), st.Want), st.Fix)
		}
	}
	checkCompression(vars, c)
	checkReplica(conn, vars, srv.Flavor, c)
	checkSourceRetention(conn, cp, c)
	checkGrants(conn, cfg, src, addr, srv.Flavor, c)
	checkTables(conn, cfg, c)
	switch {
	case posErr != nil:
		c.add("binlog positions", Fail, posErr.Error(), "enable the binary log and grant REPLICATION CLIENT (MariaDB: BINLOG MONITOR)")
	case cp != nil:
		if cp.Flavor != srv.Flavor {
			c.add("checkpoint", Fail, fmt.Sprintf("checkpoint is for %s, the server runs %s", cp.Flavor, srv.Flavor),
				"use another name or reset the checkpoint")
		} else {
			checkPosition(srv, cp, &res, c)
			checkStream(ctx, src, srv, cp, res, c)
			checkProof(ctx, src, srv, cp, res, c)
		}
	case kc.judged.Verdict == checkpoint.Lost:
		c.add("checkpoint", Warn, "no checkpoint to compare with: it is lost (see kafka's item committed checkpoint)", "")
	case kc.judged.Starts():
		c.add("checkpoint", Pass, "no checkpoint: the relay starts at source.start ("+cfg.Source.Start+")", "")
	default:
		c.add("checkpoint", Warn, "no checkpoint to compare with: kafka's item committed checkpoint says why", "")
	}
	return res
}

// checkPosition compares the host's binlog with the checkpoint: behind
// (the relay waits for it) is a warning, diverged and purged fail.
func checkPosition(srv *binlog.Server, cp *checkpoint.Checkpoint, res *hostResult, c collector) {
	rel, why, err := source.RelateHost(srv, cp.GTIDSet)
	res.srv, res.relation, res.position = srv, rel, len(*c.items)
	switch {
	case err != nil:
		c.add("position", Fail, err.Error(), "")
	case rel == source.Behind:
		c.add("position", Warn, "behind the checkpoint: "+why,
			"nothing to do if it lags or its replication is stopped on purpose: the relay uses another host or waits for this one")
	case rel == source.Diverged:
		c.add("position", Fail, "diverged from the checkpoint: "+why, divergedFix)
	case rel == source.Lacks:
		c.add("position", Fail, "its binlog lacks transactions after the checkpoint: "+why,
			"use another of source.hosts that has them (rebuild this replica from one), or `outbox-relay checkpoint set` knowing the events in between are skipped")
	default:
		c.add("position", Pass, "has every transaction of the checkpoint "+cp.GTIDSet, "")
	}
	if err := source.CheckNotPurged(srv, cp.From()); err != nil {
		c.add("checkpoint", Fail, err.Error(), "`outbox-relay checkpoint set` to a position the server has, knowing the events in between are skipped")
	} else {
		c.add("checkpoint", Pass, "the server still has the binlogs after "+cp.From(), "")
	}
}

// probeLimit bounds how long check waits for a host's binlog stream to
// show that it serves the checkpoint's position.
var probeLimit = 5 * time.Second

// checkStream asks a host that says it has the checkpoint to stream from
// it (source.Probe): its variables cannot show a hole in its binlog (a
// binlog reset or rebuilt after the checkpoint while replication went
// on); the server's own search finds it. Hosts behind or refused already
// are not asked.
func checkStream(ctx context.Context, src binlog.Config, srv *binlog.Server, cp *checkpoint.Checkpoint, res hostResult, c collector) {
	if res.relation != source.Contains || source.CheckNotPurged(srv, cp.From()) != nil {
		return
	}
	ok, err := source.Probe(ctx, src, srv, cp.From(), probeLimit)
	switch {
	case err != nil:
		c.add("stream", Fail, err.Error(), "use another of source.hosts that has the transactions after the checkpoint "+
			"(rebuild this replica from one), or `outbox-relay checkpoint set` knowing the events in between are skipped")
	case !ok:
		c.add("stream", Warn, fmt.Sprintf("the server did not show within %s that it serves %q", probeLimit, cp.From()), "")
	default:
		c.add("stream", Pass, "the server streams from "+cp.From(), "")
	}
}

// checkCompression reports binlog compression: MySQL's
// binlog_transaction_compression (Transaction_payload events, zstd) and
// MariaDB's log_bin_compress (compressed query and rows events) are both
// decoded; the item says which is in force.
func checkCompression(vars map[string]string, c collector) {
	for _, name := range []string{"binlog_transaction_compression", "log_bin_compress"} {
		v, ok := vars[name]
		switch {
		case !ok:
		case strings.EqualFold(v, "ON") || v == "1":
			c.add(name, Pass, "ON: compressed transactions are decompressed and read like the others", "")
		default:
			c.add(name, Pass, orUnset(v), "")
		}
	}
}

func orUnset(s string) string {
	if s == "" {
		return "unset"
	}
	return s
}

// checkReplica: a replica must log what it replicates, or the relay misses
// every transaction that came from its primary.
func checkReplica(conn *binlog.Conn, vars map[string]string, flavor string, c collector) {
	q := "SHOW REPLICA STATUS"
	if flavor == "mariadb" {
		q = "SHOW ALL SLAVES STATUS"
	}
	rows, err := binlog.Query(conn, q)
	if err != nil {
		fix := "GRANT REPLICATION CLIENT ON *.* (SHOW REPLICA STATUS) to let the check see replica status"
		if flavor == "mariadb" {
			fix = "GRANT SLAVE MONITOR ON *.* (MariaDB 10.5.9+; REPLICATION SLAVE ADMIN before; REPLICATION CLIENT does not give it) to let the check see replica status"
		}
		c.add("log_replica_updates", Warn, "cannot tell whether the server is a replica: "+err.Error(), fix)
		return
	}
	if len(rows) == 0 {
		c.add("log_replica_updates", Pass, "the server is not a replica", "")
		return
	}
	v := vars["log_replica_updates"]
	if v == "" {
		v = vars["log_slave_updates"]
	}
	if strings.EqualFold(v, "ON") {
		c.add("log_replica_updates", Pass, "replica logs replicated transactions", "")
		return
	}
	c.add("log_replica_updates", Fail, "the server is a replica with log_replica_updates/log_slave_updates "+orUnset(v),
		"set log_slave_updates=ON (MySQL: log_replica_updates=ON) so replicated transactions reach its binlog")
}

// checkSourceRetention reads the source's binlog retention as the
// purge-margin metric does (source.Retention: expire settings,
// binlog_expire_logs_auto_purge, Amazon RDS's own) and judges it with
// judgeRetention.
func checkSourceRetention(conn *binlog.Conn, cp *checkpoint.Checkpoint, c collector) {
	ret, err := source.Retention(conn)
	judgeRetention(ret, err, cp, c)
}

// checkRetention judges retention read from server variables alone
// (source.RetentionOf).
func checkRetention(vars map[string]string, cp *checkpoint.Checkpoint, c collector) {
	ret, err := source.RetentionOf(vars)
	judgeRetention(ret, err, cp, c)
}

// judgeRetention compares binlog retention with the checkpoint's age. It
// never FAILs: a server purges only at a binlog rotation, and whether the
// binlogs after the checkpoint are still there is what the "binlog
// positions", "position" and "stream" items find out. An old checkpoint is
// a warning to start the relay (a check run before `run` must not keep a
// relay that would resume fine from starting).
func judgeRetention(retention time.Duration, err error, cp *checkpoint.Checkpoint, c collector) {
	switch {
	case err != nil:
		fix := ""
		if errors.Is(err, source.ErrRDSRetentionDenied) {
			fix = "GRANT SELECT ON mysql.rds_configuration TO the relay's user (docs/mysql.md, managed MySQL)"
		}
		c.add("binlog retention", Warn, err.Error(), fix)
		return
	case retention == source.NoExpiry:
		c.add("binlog retention", Pass, "binlogs are never expired automatically", "")
		return
	case cp == nil:
		c.add("binlog retention", Pass, "retention "+retention.String()+"; no checkpoint yet", "")
		return
	}
	age := time.Since(cp.Time)
	switch {
	case age >= retention:
		c.add("binlog retention", Warn, fmt.Sprintf("the checkpoint is %s old, retention is %s: the binlogs after it may be purged (the position and stream items tell)", age.Round(time.Second), retention),
			"start the relay now; raise binlog_expire_logs_seconds (expire_logs_days) above the longest relay outage")
	case age >= retention/2:
		c.add("binlog retention", Warn, fmt.Sprintf("the checkpoint is %s old, over half the retention of %s", age.Round(time.Second), retention),
			"start the relay soon")
	default:
		c.add("binlog retention", Pass, fmt.Sprintf("retention %s, checkpoint %s old", retention, age.Round(time.Second)), "")
	}
}

// checkGrants decides from what the server allows (source.CheckPrivileges:
// the grants of the user and its active roles, else a try of the
// operation), never from the text of SHOW GRANTS alone.
func checkGrants(conn *binlog.Conn, cfg config.Config, src binlog.Config, addr, flavor string, c collector) {
	p, err := source.CheckPrivileges(conn, src, addr, flavor)
	if err != nil {
		c.add("grants", Fail, err.Error(), "")
		return
	}
	via := ""
	if len(p.ActiveRoles) > 0 {
		via = " (with role " + strings.Join(p.ActiveRoles, ", ") + ")"
	}
	if len(p.Tried) > 0 {
		via += "; the server allowed " + strings.Join(p.Tried, " and ") + " when tried, though the grants do not show it"
	}
	if len(p.Missing) > 0 {
		c.add("grants", Fail, "the server refuses "+strings.Join(p.Missing, " and ")+via, p.Fix(cfg.Source.User))
	} else {
		c.add("grants", Pass, "REPLICATION SLAVE and REPLICATION CLIENT"+via, "")
	}
	for _, t := range cfg.Source.Tables {
		db, tbl, _ := strings.Cut(t, ".")
		_, err := binlog.Query(conn, fmt.Sprintf("SELECT 1 FROM `%s`.`%s` LIMIT 0", strings.ReplaceAll(db, "`", "``"), strings.ReplaceAll(tbl, "`", "``")))
		var me *mysql.MyError
		switch {
		case err == nil:
			c.add("grant SELECT "+t, Pass, "", "")
		case errors.As(err, &me) && me.Code == mysql.ER_NO_SUCH_TABLE:
			// checkTables reports a missing table
		case errors.As(err, &me) && (me.Code == mysql.ER_TABLEACCESS_DENIED_ERROR || me.Code == mysql.ER_DBACCESS_DENIED_ERROR):
			c.add("grant SELECT "+t, Warn, "the user cannot read "+t+"'s definition",
				fmt.Sprintf("GRANT SELECT ON %s TO '%s' (lets check verify the columns)", t, cfg.Source.User))
		default:
			c.add("grant SELECT "+t, Warn, err.Error(), "")
		}
	}
}

func checkTables(conn *binlog.Conn, cfg config.Config, c collector) {
	for _, t := range cfg.Source.Tables {
		rc := cfg.Router.For(t) // router.tables.<t> may name other columns
		want := []string{rc.EventIDColumn, rc.AggregateTypeColumn, rc.AggregateIDColumn, rc.PayloadColumn}
		db, tbl, _ := strings.Cut(t, ".")
		cols, err := source.TableColumns(conn, db, tbl)
		if err != nil {
			c.add("table "+t, Fail, err.Error(), "")
			continue
		}
		if len(cols) == 0 {
			c.add("table "+t, Fail, "table not found (or not visible to the user)",
				"create the outbox table, fix source.tables, or grant SELECT on it")
			continue
		}
		var missing []string
		for _, col := range want {
			if !slices.ContainsFunc(cols, func(c string) bool { return strings.EqualFold(c, col) }) { // as the server compares column names
				missing = append(missing, col)
			}
		}
		if len(missing) > 0 {
			c.add("table "+t, Fail, "missing columns "+strings.Join(missing, ", "),
				"add the columns or point router.*_column (router.tables."+t+".*_column for this table) at the existing ones")
			continue
		}
		c.add("table "+t, Pass, fmt.Sprintf("%d columns, the router's present", len(cols)), "")
	}
}
