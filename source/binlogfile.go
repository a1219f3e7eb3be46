package source

import (
	"errors"
	"fmt"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outbox-relay/outbox-relay/binlog"
)

// ErrNoBinlogFile: the server has no binlog file of the name asked about
// (purged, or a file of another server).
var ErrNoBinlogFile = errors.New("no such binlog file")

// FileStart is the GTID set executed before the binlog file file of the
// server conn is connected to, in the server's notation: its Previous_gtids
// event (MySQL) or its Gtid_list event reduced to the last GTID per domain
// (MariaDB), read with SHOW BINLOG EVENTS; previous is the server's binlog
// file before it ("" when file is its oldest). checkpoint set
// --from-debezium starts its walk there: certainly at or before a position
// in that file.
func FileStart(conn *binlog.Conn, flavor, file string) (set, previous string, err error) {
	logs, err := binlog.Query(conn, "SHOW BINARY LOGS")
	if err != nil {
		return "", "", fmt.Errorf("list binary logs: %w", err)
	}
	var names []string
	for _, l := range logs {
		if len(l) == 0 {
			continue
		}
		if l[0] == file {
			list, err := fileStartList(conn, file)
			if err != nil {
				return "", "", err
			}
			if len(names) > 0 {
				previous = names[len(names)-1]
			}
			if flavor == mysql.MariaDBFlavor {
				list, err = lastPerDomain(list)
			}
			return list, previous, err
		}
		names = append(names, l[0])
	}
	have := "none"
	if len(names) > 0 {
		have = names[0] + " to " + names[len(names)-1]
	}
	return "", "", fmt.Errorf("%w: the server has no binlog file %s (it has %s): purged, or a file of another server", ErrNoBinlogFile, file, have)
}

// fileStartList is the GTID list a binlog file starts with, as SHOW BINLOG
// EVENTS prints it (MariaDB's Gtid_list without its brackets, MySQL's
// Previous_gtids without line breaks); "" when the file has none.
func fileStartList(conn *binlog.Conn, file string) (string, error) {
	evs, err := binlog.Query(conn, "SHOW BINLOG EVENTS IN "+quote(file)+" LIMIT 4")
	if err != nil {
		return "", fmt.Errorf("read binary log %s: %w", file, err)
	}
	for _, e := range evs {
		if len(e) > 5 && (e[2] == "Gtid_list" || e[2] == "Previous_gtids") {
			return strings.Trim(strings.NewReplacer("\n", "", "\r", "").Replace(e[5]), "[] "), nil
		}
	}
	return "", nil
}
