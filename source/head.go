package source

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outbox-relay/outbox-relay/binlog"
)

// NoExpiry is the Retention of a server that never purges binlogs by age.
const NoExpiry time.Duration = -1

// Retention reads how long conn's server keeps its binlogs before it purges
// them by age: MariaDB expire_logs_days (a fraction of days from 10.6) or
// binlog_expire_logs_seconds (10.6+, the same setting in seconds); MySQL
// binlog_expire_logs_seconds, else expire_logs_days, NoExpiry with
// binlog_expire_logs_auto_purge OFF (8.0.29+); Amazon RDS and Aurora MySQL
// the 'binlog retention hours' of mysql.rds_configuration, which replaces
// them (NULL there: purged as soon as the server can, reported as one
// second). NoExpiry when every setting is 0. A value it cannot read is an
// error, and so is an RDS or Aurora server (datadir under /rdsdbdata/,
// basedir under /rdsdbbin/, or aurora_version set) whose
// mysql.rds_configuration the user may not read (ErrRDSRetentionDenied):
// its variables are not what it does.
func Retention(conn *binlog.Conn) (time.Duration, error) {
	rows, err := binlog.Query(conn, `SHOW GLOBAL VARIABLES WHERE Variable_name IN
		('expire_logs_days','binlog_expire_logs_seconds','binlog_expire_logs_auto_purge',
		'basedir','datadir','aurora_version')`)
	if err != nil {
		return 0, fmt.Errorf("read binlog retention: %w", err)
	}
	vars := map[string]string{}
	for _, r := range rows {
		vars[strings.ToLower(r[0])] = r[1]
	}
	if rds, ok, err := rdsRetention(conn, vars); err != nil || ok {
		return rds, err
	}
	return RetentionOf(vars)
}

// ErrRDSRetentionDenied: the server is Amazon RDS or Aurora and the user
// may not read mysql.rds_configuration, which holds its binlog retention.
var ErrRDSRetentionDenied = errors.New("read rds binlog retention hours: SELECT on mysql.rds_configuration denied (grant it to the relay's user)")

// IsRDS tells Amazon RDS and Aurora MySQL apart from other servers by
// variables any user can read (SHOW GLOBAL VARIABLES): RDS installs the
// server under /rdsdbbin/ and its data under /rdsdbdata/; Aurora has
// aurora_version.
func IsRDS(vars map[string]string) bool {
	return strings.Contains(vars["datadir"], "/rdsdbdata/") || strings.HasPrefix(vars["basedir"], "/rdsdbbin/") ||
		vars["aurora_version"] != ""
}

// RetentionOf is Retention from the server variables alone
// (binlog_expire_logs_auto_purge, binlog_expire_logs_seconds,
// expire_logs_days; missing ones count as unset), for callers that have
// read them: `check` judges retention with it as the metrics do.
func RetentionOf(vars map[string]string) (time.Duration, error) {
	if strings.EqualFold(vars["binlog_expire_logs_auto_purge"], "OFF") {
		return NoExpiry, nil
	}
	if s := vars["binlog_expire_logs_seconds"]; s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("read binlog retention: binlog_expire_logs_seconds %q: %w", s, err)
		}
		if n > 0 {
			return time.Duration(n) * time.Second, nil
		}
	}
	if s := vars["expire_logs_days"]; s != "" {
		d, err := strconv.ParseFloat(s, 64)
		if err != nil || d < 0 || math.IsInf(d, 0) || math.IsNaN(d) {
			return 0, fmt.Errorf("read binlog retention: expire_logs_days %q is not a number of days", s)
		}
		if d > 0 {
			return time.Duration(d * float64(24*time.Hour)), nil
		}
	}
	return NoExpiry, nil
}

// rdsRetention reads Amazon RDS's binlog retention; ok is false on a
// server without mysql.rds_configuration (error 1146). A user without
// SELECT on it gets error 1142 whether or not the table exists (MySQL and
// MariaDB check the grant first), so a denial is "not RDS" only on a
// server that does not look like RDS (IsRDS); on one that does it is
// ErrRDSRetentionDenied. Any other error is returned.
func rdsRetention(conn *binlog.Conn, vars map[string]string) (d time.Duration, ok bool, err error) {
	res, err := conn.Execute(`SELECT value FROM mysql.rds_configuration WHERE name = 'binlog retention hours'`)
	if err != nil {
		var me *mysql.MyError
		switch {
		case errors.As(err, &me) && me.Code == mysql.ER_NO_SUCH_TABLE:
			return 0, false, nil // not RDS
		case errors.As(err, &me) && (me.Code == mysql.ER_TABLEACCESS_DENIED_ERROR || me.Code == mysql.ER_DBACCESS_DENIED_ERROR):
			if IsRDS(vars) {
				return 0, true, fmt.Errorf("%w: %w", ErrRDSRetentionDenied, err)
			}
			return 0, false, nil // no such table here, or one the server does not use
		}
		return 0, true, fmt.Errorf("read rds binlog retention hours: %w", err)
	}
	defer res.Close()
	if res.Resultset == nil || res.RowNumber() == 0 {
		return 0, false, nil
	}
	if null, _ := res.IsNull(0, 0); null {
		return time.Second, true, nil
	}
	s, err := res.GetString(0, 0)
	if err != nil {
		return 0, true, fmt.Errorf("read rds binlog retention hours: %w", err)
	}
	h, err := strconv.ParseUint(strings.TrimSpace(s), 10, 32)
	if err != nil {
		return 0, true, fmt.Errorf("read rds binlog retention hours %q: %w", s, err)
	}
	return time.Duration(h) * time.Hour, true, nil
}

// ErrNotInBinlogs: the reader's binlog file is not in SHOW BINARY LOGS
// (purged, or another server's).
var ErrNotInBinlogs = errors.New("binlog file not on the server")

// BehindBytes is how many binlog bytes conn's server holds after file:pos
// (SHOW BINARY LOGS: the rest of file plus every later file).
func BehindBytes(conn *binlog.Conn, file string, pos uint32) (int64, error) {
	rows, err := binlog.Query(conn, "SHOW BINARY LOGS")
	if err != nil {
		return 0, fmt.Errorf("list binlogs: %w", err)
	}
	return behindBytes(rows, file, pos)
}

func behindBytes(rows [][]string, file string, pos uint32) (int64, error) {
	var total int64
	found := false
	for _, r := range rows {
		if len(r) < 2 {
			return 0, fmt.Errorf("list binlogs: %d columns", len(r))
		}
		if r[0] == file {
			found = true
		}
		if !found {
			continue
		}
		size, err := strconv.ParseInt(r[1], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("list binlogs: size %q of %s: %w", r[1], r[0], err)
		}
		if r[0] == file {
			size -= int64(pos)
		}
		total += max(0, size)
	}
	if !found {
		return 0, fmt.Errorf("%w: %q", ErrNotInBinlogs, file)
	}
	return total, nil
}
