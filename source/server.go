package source

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/schema"
)

// Sentinel errors; each names what to fix in its message.
var (
	// ErrUnreachable: no source host accepted a connection.
	ErrUnreachable = errors.New("source unreachable")
	// ErrServerConfig: a server setting the relay needs is wrong.
	ErrServerConfig = errors.New("source server misconfigured")
	// ErrGrants: the user lacks a privilege the relay needs.
	ErrGrants = errors.New("source grants missing")
)

// Inspect connects to the first reachable host, detects the flavor and
// verifies binlog settings and grants. Every host is tried in order.
func Inspect(ctx context.Context, cfg binlog.Config) (*binlog.Server, error) {
	var dialErrs []string
	for _, addr := range cfg.Hosts {
		conn, err := binlog.Connect(ctx, cfg, addr)
		if err != nil {
			if refused(err) {
				return nil, err
			}
			dialErrs = append(dialErrs, err.Error())
			continue
		}
		srv, err := inspect(conn, cfg, addr)
		conn.Close()
		if err != nil && binlog.NoAnswer(conn) != nil {
			dialErrs = append(dialErrs, err.Error()) // logged in, then no answer: the next host
			continue
		}
		return srv, err
	}
	return nil, fmt.Errorf("%w: tried %s: %s", ErrUnreachable, strings.Join(cfg.Hosts, ", "), strings.Join(dialErrs, "; "))
}

// refused reports whether err, from Connect, is the host's refusal or the
// relay's refusal of what the host sent (the user or password, an insecure
// login, a packet or answer over the bound, an answer go-mysql cannot
// read): another try or another host of the same configuration cannot help.
func refused(err error) bool {
	for _, s := range []error{binlog.ErrAccessDenied, binlog.ErrInsecureLogin, binlog.ErrPacketBound, binlog.ErrAnswerBound,
		binlog.ErrBrokenAnswer, binlog.ErrMalformedEvent} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// Variables reads the global variables the relay and its preflight use.
func Variables(conn *binlog.Conn) (map[string]string, error) {
	rows, err := binlog.Query(conn, `SHOW GLOBAL VARIABLES WHERE Variable_name IN (
		'version','version_comment','log_bin','binlog_format','binlog_row_image','binlog_row_metadata',
		'gtid_mode','enforce_gtid_consistency','server_id','server_uuid','server_uid',
		'gtid_binlog_pos','gtid_executed','gtid_purged','log_slave_updates','log_replica_updates',
		'expire_logs_days','binlog_expire_logs_seconds','binlog_transaction_compression','log_bin_compress',
		'lower_case_table_names')`)
	if err != nil {
		return nil, fmt.Errorf("read server variables: %w", err)
	}
	vars := make(map[string]string, len(rows))
	for _, r := range rows {
		vars[strings.ToLower(r[0])] = r[1]
	}
	return vars, nil
}

// DetectFlavor tells MariaDB from MySQL by the version variables.
func DetectFlavor(vars map[string]string) string {
	if strings.Contains(strings.ToLower(vars["version"]+vars["version_comment"]), "mariadb") {
		return mysql.MariaDBFlavor
	}
	return mysql.MySQLFlavor
}

func inspect(conn *binlog.Conn, cfg binlog.Config, addr string) (*binlog.Server, error) {
	vars, err := Variables(conn)
	if err != nil {
		return nil, err
	}
	srv := &binlog.Server{Addr: addr, Version: vars["version"], ColumnNames: strings.EqualFold(vars["binlog_row_metadata"], "FULL"),
		Names: schema.ParseNameCase(vars["lower_case_table_names"])}
	detected := DetectFlavor(vars)
	srv.Flavor = detected
	if cfg.Flavor != "" && cfg.Flavor != "auto" {
		if cfg.Flavor != detected {
			return nil, fmt.Errorf("%w: source.flavor is %s but %s runs %s (%s)", ErrServerConfig, cfg.Flavor, addr, detected, srv.Version)
		}
	}
	if err := checkSettings(vars, srv.Flavor); err != nil {
		return nil, err
	}
	if err := checkGrants(conn, cfg, addr, srv.Flavor); err != nil {
		return nil, err
	}
	if err := positions(srv, conn, vars); err != nil {
		return nil, err
	}
	return srv, nil
}

// positions fills ServerID, Head, State and Earliest. GTID variables are
// read with SELECT: SHOW VARIABLES truncates long values (MySQL: 1024
// characters, a gtid_executed of a few dozen server_uuids).
func positions(srv *binlog.Server, conn *binlog.Conn, vars map[string]string) error {
	q := "SELECT @@GLOBAL.gtid_executed, @@GLOBAL.gtid_executed, @@GLOBAL.gtid_purged"
	if srv.Flavor == mysql.MariaDBFlavor {
		q = "SELECT @@GLOBAL.gtid_binlog_pos, @@GLOBAL.gtid_binlog_state, @@GLOBAL.gtid_slave_pos"
	}
	rows, err := binlog.Query(conn, q)
	if err != nil {
		return fmt.Errorf("read gtid positions: %w", err)
	}
	if len(rows) != 1 || len(rows[0]) < 2 {
		return fmt.Errorf("read gtid positions: %d rows", len(rows))
	}
	clean := func(s string) string { return strings.TrimSpace(strings.ReplaceAll(s, "\n", "")) }
	srv.Head, srv.State = clean(rows[0][0]), clean(rows[0][1])
	if srv.Flavor == mysql.MariaDBFlavor {
		if len(rows[0]) > 2 {
			srv.SlavePos = clean(rows[0][2])
		}
		srv.LogsReplicated = strings.EqualFold(vars["log_slave_updates"], "ON") || vars["log_slave_updates"] == "1"
		srv.ServerID, srv.UID = vars["server_id"], vars["server_uid"]
		earliest, err := mariadbEarliest(conn)
		if err != nil {
			return err
		}
		srv.Earliest, err = lastPerDomain(earliest)
		return err
	}
	srv.ServerID, srv.UID = vars["server_uuid"], vars["server_uuid"]
	srv.Earliest = clean(rows[0][2])
	return nil
}

// lastPerDomain reduces a MariaDB GTID list (a Gtid_list event, a
// gtid_binlog_state) to its highest sequence number per domain: the
// position it stands for. go-mysql keeps the last GTID listed per domain,
// which is not the highest when the list names several server_ids.
func lastPerDomain(list string) (string, error) {
	st, err := parseMariaDBState(list)
	if err != nil {
		return "", err
	}
	var out []string
	for d := range st {
		_, g := st.last(d)
		out = append(out, g)
	}
	sort.Strings(out)
	return strings.Join(out, ","), nil
}

// Describe reads what Inspect learns without judging settings or grants:
// flavor, version, whether table maps carry column names, and positions of
// the server conn is connected to. The server is returned even when reading
// positions fails (binary log off, missing grants); the error says why.
func Describe(conn *binlog.Conn, addr string, vars map[string]string) (*binlog.Server, error) {
	srv := &binlog.Server{Addr: addr, Version: vars["version"], Flavor: DetectFlavor(vars),
		ColumnNames: strings.EqualFold(vars["binlog_row_metadata"], "FULL")}
	return srv, positions(srv, conn, vars)
}

// Setting is one server setting the relay depends on, as found.
type Setting struct {
	Name, Got, Want, Fix string
	OK                   bool
	Present              bool // false: the server has no such variable
	// Advisory settings are recommended, not required.
	Advisory bool
}

// Settings evaluates the binlog settings the relay depends on, for flavor,
// from the server's global variables.
func Settings(vars map[string]string, flavor string) []Setting {
	want := func(name, value, fix string) Setting {
		got, ok := vars[name]
		return Setting{Name: name, Got: got, Want: value, Fix: fix, Present: ok, OK: !ok || strings.EqualFold(got, value)}
	}
	list := []Setting{
		want("log_bin", "ON", "start the server with log_bin (the binary log) enabled"),
		want("binlog_format", "ROW", "set binlog_format=ROW"),
		want("binlog_row_image", "FULL", "set binlog_row_image=FULL"),
		want("binlog_row_metadata", "FULL", "set binlog_row_metadata=FULL so the binlog carries column names; "+
			"without it the relay tracks the outbox tables' columns (and, with NO_LOG, which integers are UNSIGNED) from DDL"),
	}
	list[3].Advisory = true
	if flavor == mysql.MariaDBFlavor && strings.EqualFold(list[2].Got, "FULL_NODUP") {
		// MariaDB 11.4+: every column of an INSERT, only an UPDATE's after
		// image without the unchanged ones (the relay publishes INSERTs;
		// each is checked as read all the same: rowimage.go in binlog).
		list[2].OK = true
	}
	if flavor == mysql.MySQLFlavor {
		list = append(list,
			want("gtid_mode", "ON", "set gtid_mode=ON and enforce_gtid_consistency=ON"),
			want("enforce_gtid_consistency", "ON", "set enforce_gtid_consistency=ON"))
	}
	return list
}

// checkSettings verifies the binlog settings the relay depends on.
func checkSettings(vars map[string]string, flavor string) error {
	var errs []error
	for _, st := range Settings(vars, flavor) {
		if !st.OK && !st.Advisory {
			errs = append(errs, fmt.Errorf("%w: %s is %s, need %s: %s", ErrServerConfig, st.Name, orNone(st.Got), st.Want, st.Fix))
		}
	}
	return errors.Join(errs...)
}

func orNone(s string) string {
	if s == "" {
		return "unset"
	}
	return s
}

// Grants returns the user's grants, one statement a line.
func Grants(conn *binlog.Conn) ([]string, error) {
	rows, err := binlog.Query(conn, "SHOW GRANTS")
	if err != nil {
		return nil, fmt.Errorf("read grants: %w", err)
	}
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r[0]
	}
	return out, nil
}

// MissingGrants lists what the relay needs and grants lacks: REPLICATION
// SLAVE and REPLICATION CLIENT (MariaDB 10.5+: BINLOG MONITOR) on *.*.
func MissingGrants(grants []string) []string {
	return missingGrants(grants) // privileges.go
}

// checkGrants refuses only what the server refuses (CheckPrivileges):
// privileges that come from a role, SUPER or a proxy user pass.
func checkGrants(conn *binlog.Conn, cfg binlog.Config, addr, flavor string) error {
	p, err := CheckPrivileges(conn, cfg, addr, flavor)
	if err != nil {
		return fmt.Errorf("check grants: %w", err)
	}
	if len(p.Missing) > 0 {
		fix := fmt.Sprintf("GRANT %s ON *.* TO the relay user", strings.Join(p.Missing, ", "))
		if len(p.InactiveRoles) > 0 {
			fix += fmt.Sprintf(" (or SET DEFAULT ROLE %s FOR it: a granted role counts only when active)", p.InactiveRoles[0])
		}
		return fmt.Errorf("%w: the user lacks %s: %s", ErrGrants, strings.Join(p.Missing, " and "), fix)
	}
	return nil
}

// mariadbEarliest returns the Gtid_list of the oldest binlog still present:
// the GTID state before its first transaction.
func mariadbEarliest(conn *binlog.Conn) (string, error) {
	logs, err := binlog.Query(conn, "SHOW BINARY LOGS")
	if err != nil {
		return "", fmt.Errorf("list binary logs: %w", err)
	}
	if len(logs) == 0 {
		return "", fmt.Errorf("%w: the server has no binary logs", ErrServerConfig)
	}
	return fileStartList(conn, logs[0][0])
}

// CheckNotPurged returns binlog.ErrPurged if the server no longer has every binlog
// needed to resume after pos.
func CheckNotPurged(s *binlog.Server, pos string) error {
	have, err := binlog.ParseSet(s.Flavor, pos)
	if err != nil {
		return err
	}
	earliest, err := binlog.ParseSet(s.Flavor, s.Earliest)
	if err != nil {
		return err
	}
	if !have.Contain(earliest) {
		return fmt.Errorf("%w: resuming after %q needs binlogs the server %s has purged (its oldest binlog starts after %q); "+
			"events in between can no longer be read: set a new position with `outbox-relay checkpoint set` knowing they are skipped",
			binlog.ErrPurged, pos, s.Addr, s.Earliest)
	}
	return nil
}

// CurrentColumns reads the captured tables' columns, in order, from
// information_schema (the user needs a privilege on each table to see it).
// Tables it cannot see are left out.
func CurrentColumns(ctx context.Context, cfg binlog.Config, addr string) (schema.Tables, schema.Signs, error) {
	conn, err := binlog.Connect(ctx, cfg, addr)
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close()
	out, signs := schema.Tables{}, schema.Signs{}
	for _, t := range cfg.Tables {
		db, tbl, _ := strings.Cut(t, ".")
		cols, unsigned, err := TableLayout(conn, db, tbl)
		if err != nil {
			return nil, nil, err
		}
		if len(cols) > 0 {
			out[t], signs[t] = cols, unsigned
		}
	}
	return out, signs, nil
}

// TableColumns returns db.tbl's column names in table order, from
// information_schema; none when the table is missing or not visible to the
// user.
func TableColumns(conn *binlog.Conn, db, tbl string) ([]string, error) {
	cols, _, err := TableLayout(conn, db, tbl)
	return cols, err
}

// TableLayout is TableColumns and those of the columns that are UNSIGNED
// (information_schema's COLUMN_TYPE says so, also for ZEROFILL).
func TableLayout(conn *binlog.Conn, db, tbl string) (cols, unsigned []string, err error) {
	rows, err := binlog.Query(conn, "SELECT COLUMN_NAME, LOWER(DATA_TYPE) IN ('tinyint','smallint','mediumint','int','bigint','decimal','float','double') "+
		"AND LOWER(COLUMN_TYPE) LIKE '% unsigned%' FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = "+quote(db)+
		" AND TABLE_NAME = "+quote(tbl)+" ORDER BY ORDINAL_POSITION")
	if err != nil {
		return nil, nil, fmt.Errorf("read columns of %s.%s: %w", db, tbl, err)
	}
	cols = make([]string, len(rows))
	for i, r := range rows {
		cols[i] = r[0]
		if r[1] == "1" {
			unsigned = append(unsigned, r[0])
		}
	}
	return cols, unsigned, nil
}

// quote renders s as an SQL string literal: quotes doubled, backslashes
// escaped (the server's default sql_mode treats backslash as an escape).
func quote(s string) string {
	return "'" + strings.NewReplacer("'", "''", `\`, `\\`).Replace(s) + "'"
}
