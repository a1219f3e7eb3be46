package binlog

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// The messages are the servers' own: the MariaDB ones as MariaDB 10.11.19
// sent them to a go-mysql binlog syncer (captured against the test server),
// the MySQL ones from mysql-server's rpl_binlog_sender.cc and
// messages_to_clients.txt (5.7, 8.0 before and after the 8.0.26 wording).
func TestMapStreamErr(t *testing.T) {
	const fatal = mysql.ER_MASTER_FATAL_ERROR_READING_BINLOG
	tests := []struct {
		name string
		code uint16
		msg  string
		want error // nil: returned unchanged
	}{
		{"mariadb 10.11 purged", fatal, "Could not find GTID state requested by slave in any binlog files. Probably the slave state is too old and required binlog files have been purged.", ErrPurged},
		{"first log file missing", fatal, "Could not find first log file name in binary log index file", ErrPurged},
		{"mysql 5.7 purged", fatal, "The slave is connecting using CHANGE MASTER TO MASTER_AUTO_POSITION = 1, but the master has purged binary logs containing GTIDs that the slave requires.", ErrPurged},
		{"mysql 8.0 purged", fatal, "Cannot replicate because the master purged required binary logs. Replicate the missing transactions from elsewhere, or provision a new slave from backup. Consider increasing the master's binary log expiration period. The GTID set sent by the slave is '3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5', and the missing transactions are '3E11FA47-71CA-11E1-9E33-C80AA9429562:1-2'.", ErrPurged},
		{"mysql 8.4 purged", fatal, "Cannot replicate because the source purged required binary logs. Replicate the missing transactions from elsewhere, or provision a new replica from backup. Consider increasing the source's binary log expiration period. The GTID set sent by the replica is '3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5', and the missing transactions are '3E11FA47-71CA-11E1-9E33-C80AA9429562:1-2'", ErrPurged},

		{"mariadb 10.11 same server_id", erSlaveSameID, "A slave with the same server_uuid/server_id is already connected; the first event '.' at 0, the last event read from 'binlog.000001' at 3038, the last byte read from 'binlog.000001' at 3069.", ErrDuplicateServerID},
		{"mariadb same server_id", erSlaveSameID, "A slave with the same server_uuid/server_id as this slave has connected to the master", ErrDuplicateServerID},
		{"mysql 5.7 same server_id", fatal, "A slave with the same server_uuid/server_id as this slave has connected to the master; the first event 'mysql-bin.000001' at 4, the last event read from './mysql-bin.000001' at 1067, the last byte read from './mysql-bin.000001' at 1067.", ErrDuplicateServerID},
		{"mysql 8.4 same server_id", fatal, "A replica with the same server_uuid/server_id as this replica has connected to the source; the first event 'binlog.000002' at 157, the last event read from './binlog.000002' at 1234, the last byte read from './binlog.000002' at 1234.", ErrDuplicateServerID},

		{"mariadb packet too large", fatal, "log event entry exceeded max_allowed_packet; Increase max_allowed_packet on master; the first event 'binlog.000001' at 4, the last event read from 'binlog.000001' at 3038, the last byte read from 'binlog.000001' at 3069.", ErrPacketTooLarge},
		{"mysql 8.4 packet too large", fatal, "log event entry exceeded max_allowed_packet; Increase max_allowed_packet on source; the first event 'binlog.000001' at 4, the last event read from './binlog.000001' at 126, the last byte read from './binlog.000001' at 126.", ErrPacketTooLarge},

		{"mariadb 10.11 ahead", fatal, "Error: connecting slave requested to start from GTID 0-1-999, which is not in the master's binlog", ErrPositionAhead},
		{"mariadb 10.11 diverged", fatal, "Error: connecting slave requested to start from GTID 0-55-1, which is not in the master's binlog. Since the master's binlog contains GTIDs with higher sequence numbers, it probably means that the slave has diverged due to executing extra erroneous transactions", ErrPositionDiverged},
		{"mariadb strict-mode hole", fatal, "The binlog on the master is missing the GTID 0-1-5 requested by the slave (even though both a prior and a subsequent sequence number does exist), and GTID strict mode is enabled", ErrPurged},
		{"mysql 5.7 more gtids", fatal, "Slave has more GTIDs than the master has, using the master's SERVER_UUID. This may indicate that the end of the binary log was truncated or that the last binary log file was lost, e.g., after a power or disk failure when sync_binlog != 1. The master may or may not have rolled back transactions that were already replicated to the slave. Suggest to replicate any transactions that master has rolled back from slave to master, and/or commit empty transactions on master to account for transactions that have been committed on master but are not included in GTID_EXECUTED.", ErrPositionDiverged},
		{"mysql 8.4 more gtids", fatal, "Replica has more GTIDs than the source has, using the source's SERVER_UUID. This may indicate that the end of the binary log was truncated or that the last binary log file was lost, e.g., after a power or disk failure when sync_binlog != 1. The source may or may not have rolled back transactions that were already replicated to the replica. Suggest to replicate any transactions that source has rolled back from replica to source, and/or commit empty transactions on source to account for transactions that have been committed on source but are not included in GTID_EXECUTED.", ErrPositionDiverged},

		{"unknown 1236", fatal, "binlog truncated in the middle of event; consider out of disk space on master; the first event 'binlog.000001' at 4, the last event read from 'binlog.000001' at 3038, the last byte read from 'binlog.000001' at 3069.", nil},
		{"mysql gtid_mode off", fatal, "Request to dump GTID when @@GLOBAL.GTID_MODE <> ON.", nil},
		{"other server error", mysql.ER_ACCESS_DENIED_ERROR, "Access denied for user 'relay'@'127.0.0.1' (using password: YES)", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			server := mysql.NewError(tt.code, tt.msg)
			in := fmt.Errorf("read binlog: %w", server)
			got := mapStreamErr(in)
			if tt.want == nil {
				if got != in {
					t.Fatalf("mapped to %v, want it unchanged", got)
				}
				return
			}
			for _, s := range []error{ErrPurged, ErrDuplicateServerID, ErrPacketTooLarge, ErrPositionAhead, ErrPositionDiverged} {
				if errors.Is(got, s) != (s == tt.want) {
					t.Fatalf("%v: errors.Is(%v) = %v", got, s, !(s == tt.want))
				}
			}
			var me *mysql.MyError
			if !errors.As(got, &me) || me.Code != tt.code {
				t.Fatalf("%v: the server error is not kept", got)
			}
			if msg := got.Error(); !strings.HasPrefix(msg, tt.want.Error()+": read binlog: ") || strings.Count(msg, tt.msg) != 1 {
				t.Fatalf("message %q: want the sentinel, the server's message once, and advice", msg)
			}
		})
	}
	if err := mapStreamErr(io.EOF); err != io.EOF {
		t.Fatalf("a non-server error was mapped: %v", err)
	}
}
