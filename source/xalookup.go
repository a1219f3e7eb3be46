package source

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/outbox-relay/outbox-relay/binlog"
)

// XAPrepare is an XA transaction's prepare found in the server's binlogs.
type XAPrepare struct {
	GTID   string   // of its prepare group
	Tables []string // db.table of every table it wrote (its table maps)
}

// xaLookupPage is how many events one SHOW BINLOG EVENTS query reads.
const xaLookupPage = 10000

// FindXAPrepare looks for the XA PREPARE of xid (canonical form, see
// binlog.ParseXID) that commitGTID (an XA COMMIT) commits: the last prepare of
// xid before commitGTID, searching the server's binlogs newest first with
// SHOW BINLOG EVENTS. It returns nil when no binlog still holds it. The
// relay asks this only for an XA COMMIT whose prepare lies before the
// position it first started from, which is rare: the scan may read whole
// binlog files.
func FindXAPrepare(ctx context.Context, cfg binlog.Config, srv *binlog.Server, xid, commitGTID string) (*XAPrepare, error) {
	conn, err := binlog.Connect(ctx, cfg, srv.Addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	logs, err := binlog.Query(conn, "SHOW BINARY LOGS")
	if err != nil {
		return nil, fmt.Errorf("find xa prepare: list binary logs: %w", err)
	}
	for i := len(logs) - 1; i >= 0; i-- {
		var found *XAPrepare
		var cur XAPrepare
		reachedCommit := false
		for off := 0; !reachedCommit; off += xaLookupPage {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("find xa prepare: %w", err)
			}
			rows, err := binlog.Query(conn, "SHOW BINLOG EVENTS IN "+quote(logs[i][0])+" LIMIT "+strconv.Itoa(off)+", "+strconv.Itoa(xaLookupPage))
			if err != nil {
				return nil, fmt.Errorf("find xa prepare: read binary log %s: %w", logs[i][0], err)
			}
			for _, r := range rows {
				if len(r) < 6 {
					continue
				}
				typ, info := r[2], r[5]
				switch {
				case typ == "Anonymous_Gtid":
					cur = XAPrepare{} // a group without a GTID: not the one looked for
				case typ == "Gtid" || strings.HasPrefix(typ, "Gtid_tagged"):
					// MySQL 8.3+ prints a tagged GTID's event as
					// Gtid_tagged_log_event.
					if g := gtidInInfo(info); g != "" {
						if g == commitGTID {
							reachedCommit = true
						}
						cur = XAPrepare{GTID: g}
					}
				case typ == "Table_map":
					if open, close := strings.LastIndexByte(info, '('), strings.LastIndexByte(info, ')'); open >= 0 && close > open {
						cur.Tables = append(cur.Tables, info[open+1:close])
					}
				case typ == "XA_prepare":
					if got, ok := binlog.ParseXAPrepare(info); ok && got == xid {
						p := cur
						found = &p
					}
				}
				if reachedCommit {
					break
				}
			}
			if len(rows) < xaLookupPage {
				break
			}
		}
		if found != nil {
			return found, nil
		}
	}
	return nil, nil
}

// gtidInInfo reads the GTID of a Gtid event's SHOW BINLOG EVENTS Info:
// MariaDB "BEGIN GTID 0-1-5", "XA START X'..',X”,1 GTID 0-1-5", "GTID 0-1-5";
// MySQL "SET @@SESSION.GTID_NEXT= 'uuid:5'".
func gtidInInfo(info string) string {
	if i := strings.LastIndex(info, "GTID "); i >= 0 && !strings.Contains(info, "GTID_NEXT") {
		if f := strings.Fields(info[i+len("GTID "):]); len(f) > 0 {
			return f[0] // MariaDB may add " cid=N"
		}
		return ""
	}
	if i := strings.IndexByte(info, '\''); i >= 0 {
		if j := strings.IndexByte(info[i+1:], '\''); j >= 0 {
			return info[i+1 : i+1+j]
		}
	}
	return ""
}
