package mysqlsource

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// A connection's session as MySQL keeps it: the user variables SET
// assigns (SET @v = ..., read back with SELECT @v; a dump reads the ones a
// replica declares: @source_binlog_checksum, @source_heartbeat_period,
// @replica_uuid and their old names), and the system variables SET assigns
// (accepted, not kept: the double's answers do not depend on them).

// splitTop splits s at the commas outside quotes and parentheses.
func splitTop(s string) []string {
	var parts []string
	depth, start := 0, 0
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == '\\' && quote != '`' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"' || c == '`':
			quote = c
		case c == '(':
			depth++
		case c == ')':
			depth--
		case c == ',' && depth == 0:
			parts = append(parts, strings.TrimSpace(s[start:i]))
			start = i + 1
		}
	}
	return append(parts, strings.TrimSpace(s[start:]))
}

// set runs a SET statement's assignments (flat is the statement after
// SET): user variables are kept for the connection, system variables and
// NAMES, CHARACTER SET, TRANSACTION ... are accepted.
func (p *Primary) set(h *handler, flat string) error {
	up := strings.ToUpper(flat)
	if strings.HasPrefix(up, "NAMES ") || strings.HasPrefix(up, "CHARACTER SET ") || strings.HasPrefix(up, "CHARSET ") ||
		strings.HasPrefix(up, "TRANSACTION ") || strings.HasPrefix(up, "SESSION TRANSACTION ") || strings.HasPrefix(up, "GLOBAL TRANSACTION ") {
		return nil
	}
	for _, a := range splitTop(flat) {
		name, expr, ok := strings.Cut(a, "=")
		if !ok {
			return syntaxError(a)
		}
		name = strings.TrimSuffix(strings.TrimSpace(name), ":")
		if !strings.HasPrefix(name, "@") || strings.HasPrefix(name, "@@") {
			continue // a system variable of the session (net_write_timeout, autocommit, ...)
		}
		v, err := p.eval(h, strings.TrimSpace(expr))
		if err != nil {
			return err
		}
		if h.vars == nil {
			h.vars = map[string]*string{}
		}
		h.vars[strings.ToLower(strings.Trim(name[1:], "`'\""))] = v
	}
	h.heartbeat = 0
	if v := h.userVar("source_heartbeat_period", "master_heartbeat_period"); v != nil {
		ns, _ := strconv.ParseInt(*v, 10, 64)
		h.heartbeat = time.Duration(ns)
	}
	h.replicaUUID = ""
	if v := h.userVar("replica_uuid", "slave_uuid"); v != nil {
		h.replicaUUID = *v
	}
	return nil
}

// userVar is the first of names (user variables) the session set: MySQL
// 8.0.26 and later read a replica's declarations under the new name
// first, then the old one.
func (h *handler) userVar(names ...string) *string {
	for _, n := range names {
		if v, ok := h.vars[n]; ok {
			return v
		}
	}
	return nil
}

// eval is the value of a SET or SELECT expression the double models: a
// quoted string, a number, NULL, a system variable (@@[global.]name), a
// user variable (@name), VERSION(), GTID_SUBTRACT(a, b), GTID_SUBSET(a, b).
// nil is NULL.
func (p *Primary) eval(h *handler, expr string) (*string, error) {
	str := func(s string) (*string, error) { return &s, nil }
	up := strings.ToUpper(expr)
	switch {
	case up == "NULL":
		return nil, nil
	case len(expr) >= 2 && (expr[0] == '\'' || expr[0] == '"') && expr[len(expr)-1] == expr[0]:
		return str(unquote(expr[1 : len(expr)-1]))
	case strings.HasPrefix(expr, "@@"):
		m := reSysVar.FindStringSubmatch(expr)
		if m == nil || m[0] != expr {
			return nil, p.unmodelled(expr)
		}
		name := strings.ToLower(m[2])
		v, ok := p.variables()[name]
		if !ok {
			return nil, mysql.NewError(mysql.ER_UNKNOWN_SYSTEM_VARIABLE, fmt.Sprintf("Unknown system variable '%s'", m[2]))
		}
		if booleans[name] {
			v = map[bool]string{true: "1", false: "0"}[v == "ON"]
		}
		return str(v)
	case strings.HasPrefix(expr, "@"):
		return h.vars[strings.ToLower(strings.Trim(expr[1:], "`'\""))], nil
	case up == "VERSION()":
		return str(p.opts.Version)
	case strings.HasPrefix(up, "GTID_SUBTRACT(") || strings.HasPrefix(up, "GTID_SUBSET("):
		open, end := strings.IndexByte(expr, '('), strings.LastIndexByte(expr, ')')
		args := splitTop(expr[open+1 : max(end, open+1)])
		if end < 0 || len(args) != 2 {
			return nil, syntaxError(expr)
		}
		var sets [2]*Set
		for i, a := range args {
			v, err := p.eval(h, a)
			if err != nil || v == nil {
				return nil, err
			}
			if sets[i], err = ParseSet(*v); err != nil {
				return nil, mysql.NewError(1772, fmt.Sprintf("Malformed GTID set specification '%s'.", *v)) // ER_MALFORMED_GTID_SET_SPECIFICATION
			}
		}
		if strings.HasPrefix(up, "GTID_SUBSET(") {
			return str(map[bool]string{true: "1", false: "0"}[sets[0].Minus(sets[1]).Empty()])
		}
		return str(sets[0].Minus(sets[1]).String())
	}
	if _, err := strconv.ParseFloat(expr, 64); err == nil {
		return str(expr)
	}
	return nil, p.unmodelled(expr)
}

// unmodelled records an expression the double does not model and returns
// the error it answers with.
func (p *Primary) unmodelled(what string) error {
	p.unknown = append(p.unknown, what)
	return mysql.NewError(mysql.ER_UNKNOWN_ERROR, "mysqlsource: not modelled by the MySQL double: "+what)
}

// selectList answers SELECT item[, item...] (flat is the statement after
// SELECT), each item an expression eval models, with an optional AS
// alias; a column is named by its alias, else by the item as written.
func (p *Primary) selectList(h *handler, flat string) (*mysql.Result, error) {
	var names []string
	var row []any
	for _, item := range splitTop(flat) {
		expr, name := item, item
		if i := strings.LastIndex(strings.ToUpper(item), " AS "); i > 0 {
			expr, name = strings.TrimSpace(item[:i]), strings.Trim(strings.TrimSpace(item[i+4:]), "`'\"")
		}
		v, err := p.eval(h, expr)
		if err != nil {
			return nil, err
		}
		names = append(names, name)
		if v == nil {
			row = append(row, nil)
		} else {
			row = append(row, *v)
		}
	}
	return resultset(names, [][]any{row})
}
