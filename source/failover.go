package source

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/google/uuid"

	"github.com/outbox-relay/outbox-relay/binlog"
)

// Source failover: before streaming from a host the relay compares what the
// host's binlog holds with the checkpoint, and only streams from a host that
// has every transaction the relay already published.
//
// What can be proved differs by flavor.
//
// MariaDB. A checkpoint is a position: one GTID domain-server_id-seq per
// domain (the last transaction read in that domain). A host is described by
// @@GLOBAL.gtid_binlog_state: the last sequence number of every (domain,
// server_id) pair in its binlog. Not gtid_current_pos or gtid_slave_pos:
// those say what a replica applied, not what its binlog holds (without
// log_slave_updates, or after a binlog reset, applied transactions are not
// there to be read); and not gtid_binlog_pos alone, which keeps only the
// last GTID of a domain, so a checkpoint GTID of server 1 could not be found
// once server 2 wrote later in the same domain. For each domain D of the
// checkpoint, whose GTID is D-S-N:
//   - the host contains it when its state has (D, S) at a sequence >= N;
//   - it is behind when it has nothing of D, or its highest sequence in D is
//     below N: it has not received D-S-N yet and may still;
//   - it has diverged when its highest sequence in D is >= N but (D, S) is
//     below N: it wrote past the checkpoint's sequence number on another
//     history (errant transactions on it, or on the host the checkpoint was
//     read from). Sequence numbers of a domain only grow along one history
//     (gtid_strict_mode enforces it), so it never receives D-S-N. This is
//     MariaDB's own rule (ER_GTID_POSITION_NOT_FOUND_IN_BINLOG2).
//
// A host that contains the checkpoint in every domain is usable, whatever
// else it has. An errant transaction written on a replica after the
// checkpoint's sequence number (and before the relay read past it) looks
// exactly like the next transaction of a newly promoted primary: a position
// cannot tell them apart, and the relay reads it. With gtid_strict_mode the
// replica's replication then stops at the primary's next transaction, and as
// soon as the checkpoint passes that sequence number the host is diverged.
//
// MySQL. A checkpoint is an executed GTID set (UUID:intervals), the source's
// @@GLOBAL.gtid_executed (read with SELECT: SHOW VARIABLES truncates long
// values) plus what the relay read. A host contains it when its
// gtid_executed is a superset. It has diverged when the checkpoint holds
// GTIDs of the host's own server_uuid that the host does not have: it lost
// transactions it wrote itself (restored from an older backup, binlog lost
// in a crash) and would write different ones under the same GTIDs; MySQL
// refuses such a replica the same way ("has more GTIDs than the source has,
// using the source's SERVER_UUID"). Otherwise a host without the whole
// checkpoint is behind. GTIDs the host has and the checkpoint lacks are the
// source's future or errant transactions; the checkpoint cannot tell which.

// Relation is how a host's binlog relates to a position.
type Relation int

// Relations.
const (
	// Contains: the host has every transaction of the position.
	Contains Relation = iota
	// Behind: the host lacks transactions of the position it may still
	// receive.
	Behind
	// Lacks: the host applied the transactions after the position, but its
	// binlog does not hold them (MariaDB: a domain missing from its binlog
	// although its gtid_slave_pos is past the position: its binlog was
	// reset, or it replicated without log_slave_updates). For this host the
	// position is purged.
	Lacks
	// Diverged: the host's history does not contain the position and never
	// will.
	Diverged
)

func (r Relation) String() string {
	switch r {
	case Contains:
		return "contains"
	case Behind:
		return "behind"
	case Lacks:
		return "lacks"
	}
	return "diverged"
}

// Relate compares pos (a GTID set in flavor's notation) with the host's
// binlog: state is MariaDB's gtid_binlog_state or MySQL's gtid_executed,
// ownID the host's server_id (MariaDB) or server_uuid (MySQL). The string
// says why when the relation is not Contains.
func Relate(flavor, pos, state, ownID string) (Relation, string, error) {
	if flavor == mysql.MariaDBFlavor {
		return relateMariaDB(pos, state, "", ownID, true)
	}
	return relateMySQL(pos, state, ownID)
}

// RelateHost compares pos with what s's binlog holds, as Relate
// does, and also with what a MariaDB server applied as a replica
// (gtid_slave_pos) for the domains its binlog holds nothing of: a replica
// re-provisioned from a backup, or whose binlog was reset, has no GTID of
// a domain that was idle since, yet it applied the checkpoint's
// transaction of that domain and logs the ones after it; the server itself
// accepts such a position (its own slave position). The rule needs a host
// that logs what it replicates (log_slave_updates): without it, its binlog
// never holds the domain's next transactions either.
func RelateHost(s *binlog.Server, pos string) (Relation, string, error) {
	if s.Flavor == mysql.MariaDBFlavor {
		return relateMariaDB(pos, s.State, s.SlavePos, s.ServerID, s.LogsReplicated)
	}
	return relateMySQL(pos, s.State, s.ServerID)
}

// mariadbState is a gtid_binlog_state: domain -> server_id -> last seq.
type mariadbState map[uint32]map[uint32]uint64

func parseMariaDBState(s string) (mariadbState, error) {
	st := mariadbState{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		g, err := mysql.ParseMariadbGTID(part)
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %v", binlog.ErrBadPosition, s, err)
		}
		if st[g.DomainID] == nil {
			st[g.DomainID] = map[uint32]uint64{}
		}
		st[g.DomainID][g.ServerID] = max(st[g.DomainID][g.ServerID], g.SequenceNumber)
	}
	return st, nil
}

// last is the highest sequence number of domain d and its GTID.
func (st mariadbState) last(d uint32) (uint64, string) {
	var seq uint64
	var srv uint32
	for s, n := range st[d] {
		if n > seq || n == seq && s < srv {
			seq, srv = n, s
		}
	}
	return seq, fmt.Sprintf("%d-%d-%d", d, srv, seq)
}

func relateMariaDB(pos, state, slavePos, ownID string, logsReplicated bool) (Relation, string, error) {
	set, err := binlog.ParseSet(mysql.MariaDBFlavor, pos)
	if err != nil {
		return 0, "", err
	}
	st, err := parseMariaDBState(state)
	if err != nil {
		return 0, "", err
	}
	applied, err := parseMariaDBState(slavePos)
	if err != nil {
		return 0, "", err
	}
	rel := Contains
	var why []string
	own, ownErr := strconv.ParseUint(strings.TrimSpace(ownID), 10, 32)
	for _, g := range set.(*mysql.MariadbGTIDSet).Sets {
		if g.SequenceNumber == 0 || st[g.DomainID][g.ServerID] >= g.SequenceNumber {
			continue
		}
		top, topGTID := st.last(g.DomainID)
		switch {
		case ownErr == nil && uint64(g.ServerID) == own:
			// The checkpoint holds a transaction the host wrote itself
			// that its binlog no longer has (RESET MASTER, a restore from
			// an older backup, a crash that lost the binlog's end with
			// sync_binlog=0). A server never receives its own
			// transactions back (replicate_same_server_id is off), and it
			// writes new ones under the same GTIDs: never "behind".
			rel = max(rel, Diverged)
			why = append(why, fmt.Sprintf("the checkpoint holds %s, a transaction of the host's own server_id %d, and its binlog has it only up to %d "+
				"(it lost transactions it wrote: binlog reset, restored from an older backup, or the end of its binlog lost in a crash)",
				g, own, st[g.DomainID][g.ServerID]))
		case !logsReplicated && len(applied[g.DomainID]) > 0:
			// A replica that does not log what it applies
			// (log_slave_updates OFF, MariaDB's default): its binlog never
			// holds the domain's transactions it replicates, now or later.
			rel = max(rel, Lacks)
			why = append(why, fmt.Sprintf("it replicates domain %d (applied up to %s) without log_slave_updates: its binlog does not hold "+
				"the transactions it applies (the checkpoint is at %s); set log_slave_updates=ON on it, or leave it out of source.hosts",
				g.DomainID, func() string { _, x := applied.last(g.DomainID); return x }(), g))
		case len(st[g.DomainID]) == 0 && len(applied[g.DomainID]) > 0:
			// Nothing of the domain in its binlog, but it applied the
			// domain's transactions as a replica: exactly the checkpoint's
			// (its binlog was reset or it was restored after it, and the
			// domain was idle since: it logs what comes next), or ones
			// after it that its binlog does not hold.
			top, topGTID := applied.last(g.DomainID)
			switch {
			case top == g.SequenceNumber && applied[g.DomainID][g.ServerID] == top:
			case top < g.SequenceNumber:
				rel = max(rel, Behind)
				why = append(why, fmt.Sprintf("it has no transaction of domain %d in its binlog and applied up to %s, the checkpoint is at %s",
					g.DomainID, topGTID, g))
			default:
				rel = max(rel, Lacks)
				why = append(why, fmt.Sprintf("it applied domain %d up to %s, past the checkpoint's %s, but its binlog holds none of them "+
					"(its binlog was reset, or it replicates without log_slave_updates)", g.DomainID, topGTID, g))
			}
		case len(st[g.DomainID]) == 0:
			rel = max(rel, Behind)
			why = append(why, fmt.Sprintf("it has no transaction of domain %d, the checkpoint is at %s", g.DomainID, g))
		case top < g.SequenceNumber:
			rel = max(rel, Behind)
			why = append(why, fmt.Sprintf("it is at %s, the checkpoint at %s", topGTID, g))
		default:
			rel = max(rel, Diverged)
			why = append(why, fmt.Sprintf("it wrote up to %s without the checkpoint's %s (sequence numbers of domain %d went past it on another history)",
				topGTID, g, g.DomainID))
		}
	}
	return rel, strings.Join(why, "; "), nil
}

func relateMySQL(pos, executed, ownUUID string) (Relation, string, error) {
	cp, err := binlog.ParseSet(mysql.MySQLFlavor, pos)
	if err != nil {
		return 0, "", err
	}
	host, err := binlog.ParseSet(mysql.MySQLFlavor, strings.ReplaceAll(executed, "\n", ""))
	if err != nil {
		return 0, "", err
	}
	if host.Contain(cp) {
		return Contains, "", nil
	}
	hostSet := *host.(*mysql.MysqlGTIDSet)
	var lacks []string
	for sid, tags := range *cp.(*mysql.MysqlGTIDSet) {
		one := mysql.MysqlGTIDSet{sid: tags}
		if host.Contain(&one) {
			continue
		}
		have := mysql.MysqlGTIDSet{}
		if h, ok := hostSet[sid]; ok {
			have[sid] = h
		}
		if own, err := uuid.Parse(strings.TrimSpace(ownUUID)); err == nil && own == sid {
			return Diverged, fmt.Sprintf("the checkpoint holds %s, transactions of the host's own server_uuid, and the host has only %q "+
				"(it lost transactions it wrote: restored from an older backup, or the end of its binlog was lost)", one.String(), have.String()), nil
		}
		lacks = append(lacks, fmt.Sprintf("the checkpoint has %s, the host %q", one.String(), have.String()))
	}
	sort.Strings(lacks)
	return Behind, strings.Join(lacks, "; "), nil
}

// Resumable reports whether the relay can stream from this host after it
// published published (the checkpoint's GTID set) and resumes reading at
// from (published, or earlier to read prepared XA transactions again): nil,
// or an error wrapping binlog.ErrPositionAhead (behind: the host may catch up),
// binlog.ErrPositionDiverged (never) or binlog.ErrPurged (the binlogs after from are gone).
func Resumable(s *binlog.Server, published, from string) error {
	rel, why, err := RelateHost(s, published)
	if err != nil {
		return err
	}
	switch rel {
	case Lacks:
		return fmt.Errorf("%w: %s does not hold in its binlog transactions after the checkpoint %q: %s; "+
			"the relay uses another of source.hosts that has them; with none, set a new position with `outbox-relay checkpoint set` "+
			"knowing the events in between are skipped", binlog.ErrPurged, s.Addr, published, why)
	case Behind:
		return fmt.Errorf("%w: %s does not have every transaction the relay already published: %s; "+
			"the relay waits for it to catch up (or uses another of source.hosts)", binlog.ErrPositionAhead, s.Addr, why)
	case Diverged:
		return fmt.Errorf("%w: %s has diverged from the checkpoint %q: %s; the relay does not read it: "+
			"point source.hosts at servers of the checkpoint's history, or, knowing which transactions differ, "+
			"set a position of this server with `outbox-relay checkpoint set`", binlog.ErrPositionDiverged, s.Addr, published, why)
	}
	return CheckNotPurged(s, from)
}

// HostStatus is the verdict on one source host.
type HostStatus string

// Host verdicts.
const (
	HostUsable      HostStatus = "usable"
	HostBehind      HostStatus = "behind"      // lacks published transactions; may catch up
	HostDiverged    HostStatus = "diverged"    // another history
	HostPurged      HostStatus = "purged"      // binlogs needed are gone
	HostUnreachable HostStatus = "unreachable" // no connection
	HostRefused     HostStatus = "refused"     // settings, grants, credentials, flavor
)

// HostCheck is what Choose found on one host.
type HostCheck struct {
	Addr   string
	Status HostStatus
	Server *binlog.Server // nil when the host could not be inspected
	Err    error          // nil when usable
}

// StatusOf classifies the error a host was refused with.
func StatusOf(err error) HostStatus {
	switch {
	case err == nil:
		return HostUsable
	case errors.Is(err, binlog.ErrPositionAhead):
		return HostBehind
	case errors.Is(err, binlog.ErrPositionDiverged):
		return HostDiverged
	case errors.Is(err, binlog.ErrPurged):
		return HostPurged
	case errors.Is(err, ErrUnreachable):
		return HostUnreachable
	}
	return HostRefused
}

// Choose inspects cfg.Hosts in order (the order is the preference) and
// returns the first one that passes Inspect's checks and accept (nil:
// usable), with the verdict on every host it tried; nil when none is
// usable (see NoneUsable).
func Choose(ctx context.Context, cfg binlog.Config, accept func(*binlog.Server) error) (*binlog.Server, []HostCheck) {
	return choose(ctx, cfg.Hosts, func(addr string) (*binlog.Server, error) { return inspectHost(ctx, cfg, addr) }, accept)
}

func choose(ctx context.Context, hosts []string, inspect func(string) (*binlog.Server, error), accept func(*binlog.Server) error) (*binlog.Server, []HostCheck) {
	var checks []HostCheck
	for _, addr := range hosts {
		if ctx.Err() != nil {
			break
		}
		srv, err := inspect(addr)
		if err == nil {
			err = accept(srv)
		}
		checks = append(checks, HostCheck{Addr: addr, Status: StatusOf(err), Server: srv, Err: err})
		if err == nil {
			return srv, checks
		}
	}
	return nil, checks
}

func inspectHost(ctx context.Context, cfg binlog.Config, addr string) (*binlog.Server, error) {
	conn, err := binlog.Connect(ctx, cfg, addr)
	if err != nil {
		if refused(err) {
			return nil, err // refused: retrying cannot help
		}
		return nil, fmt.Errorf("%w: %v", ErrUnreachable, err)
	}
	defer conn.Close()
	srv, err := inspect(conn, cfg, addr)
	if err != nil && binlog.NoAnswer(conn) != nil {
		// Logged in but does not answer its queries: as unreachable as a
		// host that refuses connections (the relay tries the next one).
		return nil, fmt.Errorf("%w: %v", ErrUnreachable, err)
	}
	return srv, err
}

// NoneUsable decides what to do when Choose found no usable host: wait
// (true) while a host is behind, since it will catch up; otherwise the
// error to return: one wrapping ErrUnreachable when a host could not be
// reached (the relay retries: it may come back; the other hosts' verdicts
// are in the text only), else every host's error joined (diverged, purged,
// refused: an operator must act).
func NoneUsable(checks []HostCheck) (bool, error) {
	var unreachable, all []string
	var errs []error
	behind := false
	for _, c := range checks {
		line := c.Addr + ": " + c.Err.Error()
		all = append(all, line)
		errs = append(errs, c.Err)
		switch c.Status {
		case HostBehind:
			behind = true
		case HostUnreachable:
			unreachable = append(unreachable, c.Addr)
		}
	}
	summary := strings.Join(all, "; ")
	switch {
	case len(checks) == 0:
		return false, fmt.Errorf("%w: no source host configured", ErrUnreachable)
	case behind:
		return true, fmt.Errorf("%w: no source host has every published transaction yet: %s", binlog.ErrPositionAhead, summary)
	case len(unreachable) > 0:
		return false, fmt.Errorf("%w: tried %s: %s", ErrUnreachable, strings.Join(unreachable, ", "), summary)
	case len(errs) == 1:
		return false, errs[0]
	}
	return false, fmt.Errorf("no usable source host: %w", errors.Join(errs...))
}

// MarkErrant re-judges the hosts found behind before Choose found ref, a
// host that contains published: a MariaDB host whose binlog holds a GTID
// D-S'-M with M at or below the checkpoint's sequence number in domain D
// that ref's binlog does not hold (ref's last sequence of server S' in D is
// below M) has a transaction the checkpoint's history never had: ref's
// binlog up to the checkpoint's GTID is that history, and it went past M
// without it. Such a host is diverged (errant GTIDs), not behind: it can
// never catch up. A host with errant transactions after the checkpoint's
// sequence number is not judged (ref and the host have forked after the
// checkpoint; either may be the one the source follows). MySQL hosts are
// left as they are.
func MarkErrant(checks []HostCheck, ref *binlog.Server, published string) {
	if ref == nil || ref.Flavor != mysql.MariaDBFlavor {
		return
	}
	for i, c := range checks {
		if c.Status != HostBehind || c.Server == nil || c.Server.Flavor != ref.Flavor {
			continue
		}
		errant, err := errantMariaDB(published, c.Server.State, ref.State)
		if err != nil || len(errant) == 0 {
			continue
		}
		checks[i].Status = HostDiverged
		checks[i].Err = fmt.Errorf("%w: %s has transactions the checkpoint's history never had (errant GTIDs %s: %s holds the checkpoint %q "+
			"and went past them without them); the relay does not read it: remove the errant transactions from its history "+
			"(rebuild the replica from a server of the checkpoint's history)", binlog.ErrPositionDiverged, c.Addr, strings.Join(errant, ","), ref.Addr, published)
	}
}

func errantMariaDB(pos, state, refState string) ([]string, error) {
	set, err := binlog.ParseSet(mysql.MariaDBFlavor, pos)
	if err != nil {
		return nil, err
	}
	host, err := parseMariaDBState(state)
	if err != nil {
		return nil, err
	}
	ref, err := parseMariaDBState(refState)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, g := range set.(*mysql.MariadbGTIDSet).Sets {
		for srv, m := range host[g.DomainID] {
			if m <= g.SequenceNumber && ref[g.DomainID][srv] < m {
				out = append(out, fmt.Sprintf("%d-%d-%d", g.DomainID, srv, m))
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// Position reads the binlog position of the server at addr (flavor, Head,
// State), judging nothing: a cheap look at a host while another streams.
func Position(ctx context.Context, cfg binlog.Config, addr string) (*binlog.Server, error) {
	conn, err := binlog.Connect(ctx, cfg, addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	vars, err := Variables(conn)
	if err != nil {
		return nil, err
	}
	return Describe(conn, addr, vars)
}
