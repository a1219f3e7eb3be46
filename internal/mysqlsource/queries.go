package mysqlsource

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// variables are the global variables as MySQL 8.0 / 8.4 show them.
func (p *Primary) variables() map[string]string {
	onOff := func(b bool) string {
		if b {
			return "ON"
		}
		return "OFF"
	}
	v := map[string]string{
		"version":                        p.opts.Version,
		"version_comment":                "MySQL Community Server - GPL",
		"log_bin":                        "ON",
		"binlog_format":                  "ROW",
		"binlog_row_image":               "FULL",
		"binlog_row_metadata":            strings.ToUpper(p.opts.RowMetadata),
		"binlog_checksum":                p.opts.BinlogChecksum,
		"gtid_mode":                      "ON",
		"enforce_gtid_consistency":       "ON",
		"server_id":                      strconv.FormatUint(uint64(p.opts.ServerID), 10),
		"server_uuid":                    p.sid.String(),
		"gtid_executed":                  p.executed.String(),
		"gtid_purged":                    p.purged.String(),
		"log_replica_updates":            "ON",
		"log_slave_updates":              "ON",
		"binlog_expire_logs_seconds":     "2592000",
		"binlog_expire_logs_auto_purge":  "ON",
		"binlog_transaction_compression": onOff(p.opts.Compression),
		"max_allowed_packet":             "67108864",
		"lower_case_table_names":         "0", // Linux's default; fixed at initialisation in MySQL 8
		"binlog_row_value_options":       "",
		"character_set_server":           "utf8mb4",
		"collation_server":               "utf8mb4_0900_ai_ci",
		"character_set_client":           "utf8mb4",
		"character_set_connection":       "utf8mb4",
		"character_set_results":          "utf8mb4",
		"collation_connection":           "utf8mb4_0900_ai_ci",
		"sql_mode":                       "ONLY_FULL_GROUP_BY,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION",
		"time_zone":                      "SYSTEM",
		"system_time_zone":               "UTC",
		"transaction_isolation":          "REPEATABLE-READ",
		"transaction_read_only":          "OFF",
		"auto_increment_increment":       "1",
		"autocommit":                     "ON",
		"net_write_timeout":              "60",
		"net_read_timeout":               "30",
		"wait_timeout":                   "28800",
		"interactive_timeout":            "28800",
		"init_connect":                   "",
		"license":                        "GPL",
		"performance_schema":             "ON",
	}
	if !tagged(p.opts.Version) {
		v["expire_logs_days"] = "0" // removed in 8.4
	}
	for k, val := range p.opts.Variables {
		if val == "" {
			delete(v, k)
			continue
		}
		v[k] = val
	}
	return v
}

// booleans are the variables of variables() that are booleans: SHOW
// VARIABLES shows ON or OFF, SELECT @@name 1 or 0.
var booleans = map[string]bool{"log_bin": true, "autocommit": true, "transaction_read_only": true, "performance_schema": true,
	"log_replica_updates": true, "log_slave_updates": true, "binlog_transaction_compression": true,
	"binlog_expire_logs_auto_purge": true}

// Unmodelled lists the statements the double received and does not model
// (answered with an error): a test asserts it stays empty.
func (p *Primary) Unmodelled() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.unknown...)
}

var (
	reQuoted  = regexp.MustCompile(`'((?:[^'\\]|''|\\.)*)'`)
	reSysVar  = regexp.MustCompile(`(?i)@@(global\.|session\.)?([a-z_0-9]+)`)
	reLimit   = regexp.MustCompile(`(?i)\sLIMIT\s+(\d+)(?:\s*,\s*(\d+))?`)
	reUsing   = regexp.MustCompile("(?i)USING\\s+(.+)$")
	reSpaces  = regexp.MustCompile(`\s+`)
	reXAQuery = regexp.MustCompile(`(?i)^XA\s`)
	// reSelectLimit0 is check's SELECT privilege test.
	reSelectLimit0 = regexp.MustCompile("(?i)^SELECT 1 FROM `([^`]+)`\\.`([^`]+)` LIMIT 0$")
)

func unquote(s string) string {
	return strings.NewReplacer("''", "'", `\\`, `\`, `\'`, "'").Replace(s)
}

func syntaxError(near string) error {
	return mysql.NewError(mysql.ER_PARSE_ERROR, fmt.Sprintf("You have an error in your SQL syntax; check the manual that "+
		"corresponds to your MySQL server version for the right syntax to use near '%s' at line 1", near))
}

func resultset(names []string, rows [][]any) (*mysql.Result, error) {
	if rows == nil {
		rows = [][]any{}
	}
	// go-mysql encodes "" as NULL (its bytes are nil); MySQL sends an empty
	// string (SHOW MASTER STATUS's Binlog_Do_DB, an empty gtid_purged).
	for _, r := range rows {
		for i, v := range r {
			if v == "" {
				r[i] = []byte{}
			}
		}
	}
	// go-mysql v1.16 builds the result set on a pooled Resultset whose
	// Reset keeps the Field pointers of its last use: one a client in this
	// process closed (the relay's own queries, in tests) can carry another
	// column type, and BuildSimpleTextResultset then refuses consistent rows
	// ("row types aren't consistent"). A failed build drops that Resultset;
	// the next comes from the pool or is new.
	var err error
	for range 16 {
		var rs *mysql.Resultset
		if rs, err = mysql.BuildSimpleTextResultset(names, rows); err == nil {
			return mysql.NewResult(rs), nil
		}
		if !strings.Contains(err.Error(), "row types aren't consistent") {
			break
		}
	}
	return nil, err
}

// query answers one COM_QUERY as MySQL 8.0 / 8.4 would.
func (p *Primary) query(h *handler, q string) (*mysql.Result, error) {
	q = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(q), ";"))
	// A leading comment (Connector/J names itself in one) is no part of
	// the statement; an executable one (/*! ... */) would be.
	for strings.HasPrefix(q, "/*") && !strings.HasPrefix(q, "/*!") {
		end := strings.Index(q, "*/")
		if end < 0 {
			break
		}
		q = strings.TrimSpace(q[end+2:])
	}
	flat := reSpaces.ReplaceAllString(q, " ")
	upper := strings.ToUpper(flat)
	p.mu.Lock()
	defer p.mu.Unlock()
	eightFour := tagged(p.opts.Version)
	switch {
	case strings.HasPrefix(upper, "SET "):
		return nil, p.set(h, flat[len("SET "):])
	case strings.HasPrefix(upper, "KILL "):
		return nil, nil
	case strings.HasPrefix(upper, "SHOW GLOBAL VARIABLES") || strings.HasPrefix(upper, "SHOW VARIABLES") ||
		strings.HasPrefix(upper, "SHOW SESSION VARIABLES"):
		return p.showVariables(flat, upper)
	case strings.HasPrefix(upper, "SHOW GLOBAL STATUS") || strings.HasPrefix(upper, "SHOW STATUS") ||
		strings.HasPrefix(upper, "SHOW SESSION STATUS"):
		return showNamed(flat, upper, map[string]string{"Ssl_version": "", "Ssl_cipher": "", // no TLS
			"Uptime": strconv.FormatInt(int64(time.Since(p.started).Seconds()), 10)})
	case upper == "SELECT CURRENT_ROLE()":
		return resultset([]string{"CURRENT_ROLE()"}, [][]any{{p.activeRoles()}})
	case strings.HasPrefix(upper, "SELECT ") && !strings.Contains(upper, " FROM "):
		return p.selectList(h, flat[len("SELECT "):])
	case upper == "SHOW DATABASES":
		dbs := map[string]bool{"information_schema": true, "mysql": true, "performance_schema": true, "sys": true}
		for _, t := range p.tables {
			dbs[t.DB] = true
		}
		var rows [][]any
		for _, db := range slices.Sorted(maps.Keys(dbs)) {
			rows = append(rows, []any{db})
		}
		return resultset([]string{"Database"}, rows)
	case upper == "SHOW WARNINGS":
		return resultset([]string{"Level", "Code", "Message"}, nil)
	case strings.HasPrefix(upper, "SHOW GRANTS"):
		return p.showGrants(flat)
	case (upper == "SHOW BINARY LOGS" || upper == "SHOW MASTER LOGS") && !p.allowed("REPLICATION CLIENT", "", "") &&
		!p.allowed("SUPER", "", ""):
		return nil, deniedGlobal("SUPER, REPLICATION CLIENT")
	case upper == "SHOW BINARY LOGS" || upper == "SHOW MASTER LOGS":
		var rows [][]any
		for _, f := range p.files {
			rows = append(rows, []any{f.name, int64(f.size), "No"})
		}
		return resultset([]string{"Log_name", "File_size", "Encrypted"}, rows)
	case upper == "SHOW MASTER STATUS" && !eightFour, upper == "SHOW BINARY LOG STATUS" && eightFour:
		f := p.files[len(p.files)-1]
		return resultset([]string{"File", "Position", "Binlog_Do_DB", "Binlog_Ignore_DB", "Executed_Gtid_Set"},
			[][]any{{f.name, int64(f.size), "", "", p.executed.String()}})
	case upper == "SHOW MASTER STATUS":
		return nil, syntaxError("MASTER STATUS")
	case upper == "SHOW BINARY LOG STATUS":
		return nil, syntaxError("BINARY LOG STATUS")
	case upper == "SHOW REPLICA STATUS", upper == "SHOW SLAVE STATUS" && !eightFour:
		return p.replicaStatus(upper == "SHOW SLAVE STATUS")
	case upper == "SHOW SLAVE STATUS":
		return nil, syntaxError("SLAVE STATUS")
	case strings.HasPrefix(upper, "SHOW ALL SLAVES STATUS"):
		return nil, syntaxError("ALL SLAVES STATUS")
	case strings.HasPrefix(upper, "SHOW BINLOG EVENTS"):
		return p.showBinlogEvents(flat)
	case strings.HasPrefix(upper, "SELECT COLUMN_NAME FROM INFORMATION_SCHEMA.COLUMNS"):
		return p.columns(flat, false)
	case strings.HasPrefix(upper, "SELECT COLUMN_NAME, LOWER(DATA_TYPE) IN (") && strings.Contains(upper, " FROM INFORMATION_SCHEMA.COLUMNS WHERE "):
		return p.columns(flat, true) // with the unsigned flag (binlog.TableLayout)
	case reSelectLimit0.MatchString(flat):
		m := reSelectLimit0.FindStringSubmatch(flat)
		if p.tables[m[1]+"."+m[2]] == nil {
			return nil, mysql.NewError(mysql.ER_NO_SUCH_TABLE, fmt.Sprintf("Table '%s.%s' doesn't exist", m[1], m[2]))
		}
		if !p.allowed("SELECT", m[1], m[2]) {
			return nil, p.deniedTable("SELECT", m[2])
		}
		return resultset([]string{"1"}, nil)
	case strings.Contains(upper, "MYSQL.RDS_CONFIGURATION"):
		return nil, mysql.NewError(mysql.ER_NO_SUCH_TABLE, "Table 'mysql.rds_configuration' doesn't exist")
	case reXAQuery.MatchString(upper) && strings.HasPrefix(upper, "XA RECOVER"):
		return resultset([]string{"formatID", "gtrid_length", "bqual_length", "data"}, nil)
	}
	p.unknown = append(p.unknown, flat)
	return nil, mysql.NewError(mysql.ER_UNKNOWN_ERROR, "mysqlsource: statement not modelled by the MySQL double: "+flat)
}

// showVariables answers SHOW [GLOBAL|SESSION] VARIABLES [LIKE 'pattern' |
// WHERE Variable_name = 'name' | WHERE Variable_name IN (...)].
func (p *Primary) showVariables(flat, upper string) (*mysql.Result, error) {
	vars := p.variables()
	if !strings.HasPrefix(upper, "SHOW GLOBAL") {
		for n := range vars {
			if strings.HasPrefix(n, "rpl_semi_sync") {
				delete(vars, n)
			}
		}
	}
	for n, v := range vars {
		// performance_schema.global_variables: VARIABLE_VALUE is
		// varchar(1024); longer values are cut.
		if len(v) > 1024 {
			vars[n] = v[:1024]
		}
	}
	return showNamed(flat, upper, vars)
}

// showNamed answers a SHOW of name/value pairs (variables, status) with
// its filter, LIKE 'pattern' (% and _ wildcards) or WHERE ... = / IN
// (...), names compared without regard to case, in name order.
func showNamed(flat, upper string, vals map[string]string) (*mysql.Result, error) {
	var quoted []string
	for _, m := range reQuoted.FindAllStringSubmatch(flat, -1) {
		quoted = append(quoted, unquote(m[1]))
	}
	match := func(string) bool { return true }
	switch {
	case strings.Contains(upper, " LIKE ") && len(quoted) == 1:
		re := regexp.MustCompile("(?is)^" + strings.NewReplacer("%", ".*", "_", ".").Replace(regexp.QuoteMeta(quoted[0])) + "$")
		match = re.MatchString
	case strings.Contains(upper, " WHERE "):
		match = func(n string) bool {
			return slices.ContainsFunc(quoted, func(q string) bool { return strings.EqualFold(q, n) })
		}
	}
	var rows [][]any
	for _, n := range slices.Sorted(maps.Keys(vals)) {
		if match(n) {
			rows = append(rows, []any{n, vals[n]})
		}
	}
	return resultset([]string{"Variable_name", "Value"}, rows)
}

// showGrants: SHOW GRANTS lists the account's own grants and the roles
// granted to it, not the roles' privileges; SHOW GRANTS FOR
// CURRENT_USER() USING role adds those of the named roles.
func (p *Primary) showGrants(flat string) (*mysql.Result, error) {
	user := fmt.Sprintf("`%s`@`%%`", p.opts.User)
	rows := [][]any{}
	for _, g := range p.opts.Grants {
		rows = append(rows, []any{g})
	}
	if m := reUsing.FindStringSubmatch(flat); m != nil {
		for _, r := range strings.Split(m[1], ",") {
			r = strings.TrimSpace(r)
			grants, ok := p.opts.Roles[r]
			if !ok {
				return nil, mysql.NewError(3530, fmt.Sprintf("%s is not granted to %s", r, user))
			}
			for _, g := range grants {
				rows = append(rows, []any{g})
			}
		}
	}
	return resultset([]string{"Grants for " + p.opts.User + "@%"}, rows)
}

func (p *Primary) replicaStatus(legacy bool) (*mysql.Result, error) {
	names := []string{"Replica_IO_State", "Source_Host", "Source_User", "Source_Port", "Replica_IO_Running",
		"Replica_SQL_Running", "Retrieved_Gtid_Set", "Executed_Gtid_Set", "Auto_Position"}
	if legacy {
		names = []string{"Slave_IO_State", "Master_Host", "Master_User", "Master_Port", "Slave_IO_Running",
			"Slave_SQL_Running", "Retrieved_Gtid_Set", "Executed_Gtid_Set", "Auto_Position"}
	}
	if p.opts.ReplicaOf == "" {
		return resultset(names, nil)
	}
	host, port, _ := strings.Cut(p.opts.ReplicaOf, ":")
	return resultset(names, [][]any{{"Waiting for source to send event", host, "repl", port, "Yes", "Yes",
		p.executed.String(), p.executed.String(), int64(1)}})
}

func (p *Primary) showBinlogEvents(flat string) (*mysql.Result, error) {
	m := reQuoted.FindStringSubmatch(flat)
	var f *binlogFile
	if m == nil {
		f = p.files[0]
	} else {
		for _, x := range p.files {
			if x.name == unquote(m[1]) {
				f = x
			}
		}
	}
	if f == nil {
		return nil, mysql.NewError(mysql.ER_ERROR_WHEN_EXECUTING_COMMAND, "Error when executing command SHOW BINLOG EVENTS: Could not find target log")
	}
	off, n := 0, len(f.events)
	if l := reLimit.FindStringSubmatch(flat); l != nil {
		a, _ := strconv.Atoi(l[1])
		if l[2] == "" {
			n = a
		} else {
			b, _ := strconv.Atoi(l[2])
			off, n = a, b
		}
	}
	var rows [][]any
	for i := off; i < len(f.events) && len(rows) < n; i++ {
		e := f.events[i]
		rows = append(rows, []any{f.name, int64(e.pos), e.typ, int64(p.opts.ServerID), int64(e.pos) + int64(len(e.data)), e.info})
	}
	return resultset([]string{"Log_name", "Pos", "Event_type", "Server_id", "End_log_pos", "Info"}, rows)
}

func (p *Primary) columns(flat string, signs bool) (*mysql.Result, error) {
	where := strings.Index(strings.ToUpper(flat), " WHERE ")
	if where < 0 {
		where = 0
	}
	m := reQuoted.FindAllStringSubmatch(flat[where:], -1)
	if len(m) < 2 {
		p.unknown = append(p.unknown, flat)
		return nil, mysql.NewError(mysql.ER_UNKNOWN_ERROR, "mysqlsource: columns query not modelled: "+flat)
	}
	var rows [][]any
	// information_schema shows only the columns the user has a privilege on.
	if t := p.tables[unquote(m[0][1])+"."+unquote(m[1][1])]; t != nil && p.allowed("SELECT", t.DB, t.Name) {
		for _, c := range t.Columns {
			if signs {
				rows = append(rows, []any{c.Name, int64(0)}) // the double's column types are all signed
			} else {
				rows = append(rows, []any{c.Name})
			}
		}
	}
	if signs {
		return resultset([]string{"COLUMN_NAME", "unsigned"}, rows)
	}
	return resultset([]string{"COLUMN_NAME"}, rows)
}

// activeRoles is CURRENT_ROLE(): the roles of Options.Roles (sorted,
// comma separated) unless Options.RolesInactive, else NONE.
func (p *Primary) activeRoles() string {
	if len(p.opts.Roles) == 0 || p.opts.RolesInactive {
		return "NONE"
	}
	var names []string
	for r := range p.opts.Roles {
		names = append(names, r)
	}
	sort.Strings(names)
	return strings.Join(names, ",")
}
