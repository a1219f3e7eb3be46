package errclass

// Exit codes of `run`, for supervisors (README "Exit codes"; systemd's
// RestartPreventExitStatus= lists the fatal ones). The values follow
// sysexits(3) where one fits.
const (
	// ExitOK: a clean stop (SIGTERM/SIGINT), the final checkpoint written.
	ExitOK = 0
	// ExitError: any other error; the log says which. Restart.
	ExitError = 1
	// ExitUsage: a command-line mistake.
	ExitUsage = 2
	// ExitData: a fatal data stop: a bad row under router.on_error fail, an
	// invalid operation under invalid_op fatal, statement-logged DML, a
	// transaction the relay cannot frame, outbox rows rolled back inside a
	// logged transaction, an XA COMMIT of an unknown prepare, a source whose
	// binlog diverges from the checkpoint, a DDL the tracker cannot follow,
	// a corrupt checkpoint, a checkpoint lost (checkpoint.ErrLost), a record
	// Kafka refused for its content although the relay's checks passed it
	// (ErrRecordRefused). A restart stops at the
	// same place: do not restart, fix it (docs/delivery.md "Transaction shapes").
	ExitData = 65
	// ExitPurged: the binlogs the checkpoint needs are gone from the source
	// (binlog.ErrPurged). A restart cannot help: move the checkpoint.
	ExitPurged = 66
	// ExitTransient: a failure that retrying may fix but that ended the run:
	// Kafka or the source unreachable before the first start, the final
	// commit at a stop failed, the lease lost during a stop. Restart.
	ExitTransient = 75
	// ExitConfig: the configuration (or the source's settings, grants,
	// flavor, server_id, max_allowed_packet, a session's binlog_row_image
	// met at its transaction, the checkpoint topic's layout,
	// Kafka refusing a topic or an authorisation: ErrRejected) is wrong. Do
	// not restart before it is fixed.
	ExitConfig = 78
)
