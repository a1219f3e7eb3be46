package mysqlsource

import (
	"fmt"
	"sort"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// effectiveGrants are the user's grants plus those of its active roles:
// what MySQL checks privileges against.
func (p *Primary) effectiveGrants() []string {
	out := append([]string(nil), p.opts.Grants...)
	if !p.opts.RolesInactive {
		names := make([]string, 0, len(p.opts.Roles))
		for r := range p.opts.Roles {
			names = append(names, r)
		}
		sort.Strings(names)
		for _, r := range names {
			out = append(out, p.opts.Roles[r]...)
		}
	}
	return out
}

// allowed reports whether a grant on *.* (or, with db, on db.* or
// db.table) gives priv.
func (p *Primary) allowed(priv, db, table string) bool {
	for _, g := range p.effectiveGrants() {
		g = strings.ToUpper(strings.ReplaceAll(g, "`", ""))
		on := strings.Contains(g, " ON *.* ")
		if db != "" {
			on = on || strings.Contains(g, " ON "+strings.ToUpper(db)+".* ") ||
				strings.Contains(g, " ON "+strings.ToUpper(db+"."+table)+" ")
		}
		if on && (strings.Contains(g, "ALL PRIVILEGES") || strings.Contains(g, priv)) {
			return true
		}
	}
	return false
}

// deniedGlobal is MySQL's error 1227 for a missing global privilege.
func deniedGlobal(privs string) error {
	return mysql.NewError(mysql.ER_SPECIFIC_ACCESS_DENIED_ERROR,
		fmt.Sprintf("Access denied; you need (at least one of) the %s privilege(s) for this operation", privs))
}

// deniedTable is MySQL's error 1142.
func (p *Primary) deniedTable(cmd, table string) error {
	return mysql.NewError(mysql.ER_TABLEACCESS_DENIED_ERROR,
		fmt.Sprintf("%s command denied to user '%s'@'127.0.0.1' for table '%s'", cmd, p.opts.User, table))
}
