package source

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outbox-relay/outbox-relay/binlog"
)

// Privileges is what the server allows the relay user, decided from the
// server itself: the grants of the user and of its active roles (MySQL 8
// lists a role's privileges only with SHOW GRANTS ... USING), then, for a
// privilege those do not show (granted through SUPER, a proxy user, a role
// that cannot be read), a try of the operation the relay needs.
type Privileges struct {
	// Missing lists what the server refused: REPLICATION SLAVE (a
	// replication connection) and REPLICATION CLIENT (SHOW BINARY LOGS;
	// MariaDB 10.5+: BINLOG MONITOR).
	Missing []string
	// ActiveRoles are the roles in effect on a new connection (default
	// roles); InactiveRoles are granted but not in effect: their
	// privileges do not count until SET DEFAULT ROLE.
	ActiveRoles, InactiveRoles []string
	// Tried names the privileges decided by trying the operation, since
	// the grants did not show them.
	Tried []string
	// Grants are the grant statements read (roles expanded on MySQL).
	Grants []string
}

// Fix is the statement that grants what is missing to user.
func (p Privileges) Fix(user string) string {
	if len(p.Missing) == 0 {
		return ""
	}
	fix := fmt.Sprintf("GRANT %s ON *.* TO '%s'", strings.Join(p.Missing, ", "), user)
	if len(p.InactiveRoles) > 0 {
		fix += fmt.Sprintf(", or make a granted role that has them active at login: SET DEFAULT ROLE %s FOR '%s'",
			p.InactiveRoles[0], user)
	}
	return fix
}

// roleGrant matches "GRANT `r`@`%`, `s` TO `u`@`%`": roles granted (no ON).
var roleGrant = regexp.MustCompile("^GRANT ((?:`[^`]+`(?:@`[^`]*`)?(?:, )?)+) TO ")

// CheckPrivileges decides which replication privileges the server grants
// the user of conn; cfg and addr open the replication connection it tries
// when the grants do not show REPLICATION SLAVE.
func CheckPrivileges(conn *binlog.Conn, cfg binlog.Config, addr, flavor string) (Privileges, error) {
	var p Privileges
	grants, err := Grants(conn)
	if err != nil {
		return p, err
	}
	if rows, err := binlog.Query(conn, "SELECT CURRENT_ROLE()"); err == nil && len(rows) == 1 && len(rows[0]) == 1 {
		if r := rows[0][0]; r != "" && r != "NONE" && r != "NULL" {
			p.ActiveRoles = strings.Split(r, ",")
			if flavor == mysql.MySQLFlavor { // MariaDB's SHOW GRANTS already lists the active role's
				if more, err := binlog.Query(conn, "SHOW GRANTS FOR CURRENT_USER() USING "+r); err == nil {
					grants = grants[:0]
					for _, m := range more {
						grants = append(grants, m[0])
					}
				}
			}
		}
	}
	p.Grants = grants
	// a role granted to an active role is active too
	type edge struct{ role, to string }
	var edges []edge
	for _, g := range grants {
		if m := roleGrant.FindStringSubmatch(g); m != nil && !strings.Contains(g, " ON ") {
			to := strings.TrimSpace(g[len(m[0]):])
			for _, r := range strings.Split(m[1], ", ") {
				edges = append(edges, edge{r, to})
			}
		}
	}
	active := slices.Clone(p.ActiveRoles)
	for changed := true; changed; {
		changed = false
		for _, e := range edges {
			if roleActive(e.to, active) && !roleActive(e.role, active) {
				active, changed = append(active, e.role), true
			}
		}
	}
	for _, e := range edges {
		if !roleActive(e.role, active) && !slices.Contains(p.InactiveRoles, e.role) {
			p.InactiveRoles = append(p.InactiveRoles, e.role)
		}
	}
	for _, miss := range MissingGrants(grants) {
		var ok bool
		var err error
		switch miss {
		case "REPLICATION CLIENT":
			ok, err = tryShowBinaryLogs(conn)
		case "REPLICATION SLAVE":
			// Ends with conn's caller (a stop), as the queries on conn do.
			ok, err = tryReplicationConnection(binlog.ConnContext(conn), cfg, addr, flavor)
		}
		if err != nil {
			return p, fmt.Errorf("try %s: %w", miss, err)
		}
		if ok {
			p.Tried = append(p.Tried, miss)
		} else {
			p.Missing = append(p.Missing, miss)
		}
	}
	return p, nil
}

// roleActive compares `r`@`h` or `r` with the CURRENT_ROLE() names.
func roleActive(r string, active []string) bool {
	name := func(s string) string { n, _, _ := strings.Cut(strings.TrimSpace(s), "@"); return strings.Trim(n, "`") }
	for _, a := range active {
		if name(a) == name(r) {
			return true
		}
	}
	return false
}

// isDenied reports a server error that refuses a privilege.
func isDenied(err error) bool {
	var me *mysql.MyError
	if !errors.As(err, &me) {
		return false
	}
	switch me.Code {
	case mysql.ER_SPECIFIC_ACCESS_DENIED_ERROR, mysql.ER_DBACCESS_DENIED_ERROR, mysql.ER_TABLEACCESS_DENIED_ERROR, mysql.ER_ACCESS_DENIED_ERROR:
		return true
	}
	return false
}

// tryShowBinaryLogs runs what REPLICATION CLIENT (BINLOG MONITOR) allows.
// A server without a binary log cannot tell: that is reported by the
// settings checks, so it counts as allowed here.
func tryShowBinaryLogs(conn *binlog.Conn) (bool, error) {
	_, err := binlog.Query(conn, "SHOW BINARY LOGS")
	var me *mysql.MyError
	switch {
	case err == nil:
		return true, nil
	case isDenied(err):
		return false, nil
	case errors.As(err, &me) && me.Code == mysql.ER_NO_BINARY_LOGGING:
		return true, nil
	}
	return false, err
}

// TryReplicationConnection registers as a replica and asks for the binlog
// (from an empty GTID set, reading no event), which needs REPLICATION
// SLAVE: (false, nil) when the server refuses the privilege.
func TryReplicationConnection(cfg binlog.Config, addr, flavor string) (bool, error) {
	return tryReplicationConnection(context.Background(), cfg, addr, flavor)
}

// tryReplicationConnection is TryReplicationConnection until ctx ends.
func tryReplicationConnection(ctx context.Context, cfg binlog.Config, addr, flavor string) (bool, error) {
	dump, err := binlog.NewDump(ctx, cfg, addr, flavor, ProbeServerID(), 0)
	if err != nil {
		return false, err
	}
	defer dump.Close()
	set, err := mysql.ParseGTIDSet(flavor, "")
	if err != nil {
		return false, err
	}
	if _, err := dump.Start(set); err != nil {
		if isDenied(err) {
			return false, nil
		}
		return false, dump.Failed(err)
	}
	return true, nil
}

// missingGrants lists what the relay needs and grants lacks: REPLICATION
// SLAVE (MySQL 8.0.22+ also shows REPLICATION REPLICA) and REPLICATION
// CLIENT (MariaDB 10.5+: BINLOG MONITOR) on *.*, or ALL PRIVILEGES. Each
// privilege is compared whole: MariaDB's REPLICATION SLAVE ADMIN (START
// SLAVE, CHANGE MASTER) does not allow reading the binlog.
func missingGrants(grants []string) []string {
	has := map[string]bool{}
	for _, g := range grants {
		for _, p := range globalPrivileges(g) {
			has[p] = true
		}
	}
	if has["ALL PRIVILEGES"] || has["ALL"] {
		return nil
	}
	var missing []string
	if !has["REPLICATION SLAVE"] && !has["REPLICATION REPLICA"] {
		missing = append(missing, "REPLICATION SLAVE")
	}
	if !has["REPLICATION CLIENT"] && !has["BINLOG MONITOR"] {
		missing = append(missing, "REPLICATION CLIENT")
	}
	return missing
}

// globalPrivileges returns the privileges a "GRANT p1, p2 ON *.* TO ..."
// statement lists, upper case, one name each (MySQL 8 lists dynamic
// privileges with "," and no space); nothing for a grant on a database,
// table or proxy, or a grant of roles.
func globalPrivileges(grant string) []string {
	g := strings.ToUpper(strings.TrimSpace(grant))
	if !strings.HasPrefix(g, "GRANT ") {
		return nil
	}
	list, _, ok := strings.Cut(g[len("GRANT "):], " ON *.* ")
	if !ok {
		return nil
	}
	var out []string
	for _, p := range strings.Split(list, ",") {
		if p = strings.Join(strings.Fields(p), " "); p != "" {
			out = append(out, p)
		}
	}
	return out
}
