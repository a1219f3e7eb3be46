package binlog

import (
	"errors"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// Errors a source server gives when it refuses or ends the binlog stream.
// MySQL and MariaDB send most of them as error 1236
// (ER_MASTER_FATAL_ERROR_READING_BINLOG, "source fatal error reading
// binlog"), which says nothing by itself: the message tells them apart.
var (
	// ErrDuplicateServerID: another replication client (a replica, another
	// relay, mysqlbinlog --stop-never) connected to the source with the
	// same server_id (MySQL: or server_uuid), and the server dropped this
	// connection in its favour. Fatal: reconnecting would take the stream
	// back from the other client, which then takes it back again. Fix:
	// give source.server_id a value no other replica of the server uses.
	ErrDuplicateServerID = errors.New("another replication client uses the same server_id")

	// ErrPacketTooLarge: the source refused to send a binlog event larger
	// than its max_allowed_packet. Fatal until the server's
	// max_allowed_packet is raised (the event is never skipped).
	ErrPacketTooLarge = errors.New("binlog event larger than the source's max_allowed_packet")

	// ErrPositionAhead: the source has not written the GTID the relay
	// asks to resume after: it is behind the checkpoint (a replica that
	// lags, or a freshly failed-over server that has not received the last
	// transactions yet) or it never had that domain's transactions. Not
	// fatal: a lagging server catches up, and the relay retries with
	// back-off, saying so at each attempt. If it lasts, the source.hosts
	// point at a server that lost transactions the relay already
	// published (an asynchronous failover), or at another cluster.
	// source.Resumable returns it for a host that lacks transactions of the
	// checkpoint before the relay streams from it (see source.Relate); the relay
	// then uses another host or waits, and never returns it.
	ErrPositionAhead = errors.New("source is behind the checkpoint's gtid position")

	// ErrPositionDiverged: the checkpoint's position is not in the
	// source's history although the server has written past it (MariaDB:
	// a GTID with higher sequence numbers in its domain exists, or, with
	// gtid_strict_mode, a hole where the GTID should be; MySQL: the
	// checkpoint holds GTIDs of the server's own server_uuid that the
	// server does not have, e.g. after losing the end of its binary log).
	// Fatal: the relay published transactions this server does not have,
	// or the checkpoint belongs to another server; an operator decides
	// (`outbox-relay checkpoint set` to a position of this server).
	// source.Resumable and source.MarkErrant return it for a host whose history
	// does not contain the checkpoint (see source.Relate for what each flavor
	// proves); the relay stops with it only when no host is usable and none
	// is behind or unreachable.
	ErrPositionDiverged = errors.New("checkpoint's gtid position diverges from the source's binlog")
)

// erSlaveSameID is MariaDB's ER_SLAVE_SAME_ID: MariaDB 10.x sends the
// duplicate server_id notice with this code, MySQL with 1236.
const erSlaveSameID = 4052

// mapStreamErr turns a server error that ended the binlog stream into the
// sentinel it means, with the server's own message and what to do; errors
// it does not recognise are returned unchanged (the relay retries them from
// its checkpoint), including an unknown 1236.
func mapStreamErr(err error) error {
	var me *mysql.MyError
	if !errors.As(err, &me) {
		return err
	}
	lower := strings.ToLower(me.Message)
	has := func(s ...string) bool {
		for _, x := range s {
			if strings.Contains(lower, x) {
				return true
			}
		}
		return false
	}
	switch {
	case me.Code == erSlaveSameID || me.Code == mysql.ER_MASTER_FATAL_ERROR_READING_BINLOG && has("same server_uuid/server_id"):
		// MariaDB: "A slave with the same server_uuid/server_id is already
		// connected" (10.11), "... as this slave has connected to the
		// master"; MySQL: "A slave (replica) with the same
		// server_uuid/server_id as this slave (replica) has connected to
		// the master (source)".
		return streamError{ErrDuplicateServerID, err,
			"source.server_id must be unique among all replicas and binlog readers of the server, other relays included: give this pipeline a server_id of its own"}
	case me.Code != mysql.ER_MASTER_FATAL_ERROR_READING_BINLOG:
		return err
	case has("max_allowed_packet"):
		// "log event entry exceeded max_allowed_packet; Increase
		// max_allowed_packet on master" (MariaDB; MySQL: "on source").
		return streamError{ErrPacketTooLarge, err,
			"raise max_allowed_packet on the source server (SET GLOBAL max_allowed_packet, and in its configuration), then restart the relay"}
	case has("the binlog on the master is missing the gtid"):
		// MariaDB with gtid_strict_mode (go-mysql asks for it on the dump
		// connection): "The binlog on the master is missing the GTID X
		// requested by the slave (even though [both a prior and] a
		// subsequent sequence number does exist), and GTID strict mode is
		// enabled". The server wrote past X in X's own server_id but its
		// binlog does not hold X: the binlog was reset (RESET MASTER) while
		// replication went on, or the server was rebuilt from a backup
		// after X. The transactions after X are not in this server's binlog:
		// for this host the position is purged; another host may have them.
		return streamError{ErrPurged, err,
			"this server's binlog lacks transactions after the checkpoint (its binlog was reset or rebuilt after it): " +
				"the relay uses another of source.hosts that has them; with none, set a new position with `outbox-relay checkpoint set` knowing the events in between are skipped"}
	case has("has more gtids than the"),
		has("which is not in the master's binlog. since the master's binlog contains gtids with higher sequence numbers"):
		// MySQL: "Slave has more GTIDs than the master has, using the
		// master's SERVER_UUID..." (8.0.26+: "Replica has more GTIDs than
		// the source has, using the source's SERVER_UUID..."). MariaDB:
		// "Error: connecting slave requested to start from GTID X, which
		// is not in the master's binlog. Since the master's binlog
		// contains GTIDs with higher sequence numbers, it probably means
		// that the slave has diverged due to executing extra erroneous
		// transactions".
		return streamError{ErrPositionDiverged, err,
			"the checkpoint holds transactions this server does not have: it is not the server the checkpoint was read from, or it lost the end of its binlog (failover, crash); " +
				"find out which transactions are missing, then set a position of this server with `outbox-relay checkpoint set`"}
	case has("which is not in the master's binlog"):
		// MariaDB: "Error: connecting slave requested to start from GTID
		// X, which is not in the master's binlog".
		return streamError{ErrPositionAhead, err,
			"the server has not written that transaction (yet): a lagging replica catches up and the relay resumes by itself; " +
				"if this lasts, source.hosts points at a server that lost transactions already published, or at another cluster"}
	case has("purged"), has("could not find first log file name in binary log index file"):
		// MariaDB: "Could not find GTID state requested by slave in any
		// binlog files. Probably the slave state is too old and required
		// binlog files have been purged." MySQL 5.6/5.7: "The slave is
		// connecting using CHANGE MASTER TO MASTER_AUTO_POSITION = 1, but
		// the master has purged binary logs containing GTIDs that the
		// slave requires."; 8.0: "Cannot replicate because the master
		// (source) purged required binary logs...". Both: "Could not find
		// first log file name in binary log index file".
		return streamError{ErrPurged, err,
			"the server no longer has the binlogs needed; set a new position with `outbox-relay checkpoint set` knowing the events in between are skipped"}
	}
	return err
}

// streamError is a mapped stream error: the sentinel, the server's error
// (with its message and code) and what to do.
type streamError struct {
	sentinel error
	err      error
	advice   string
}

func (e streamError) Error() string {
	return e.sentinel.Error() + ": " + e.err.Error() + ": " + e.advice
}

func (e streamError) Unwrap() []error { return []error{e.sentinel, e.err} }
