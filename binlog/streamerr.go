package binlog

import (
	"errors"
	"fmt"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// mapStreamErr turns the server's "binlog purged" answer into ErrPurged.
func mapStreamErr(err error) error {
	var me *mysql.MyError
	if errors.As(err, &me) && me.Code == mysql.ER_MASTER_FATAL_ERROR_READING_BINLOG {
		return fmt.Errorf("%w: %s: the server no longer has the binlogs needed; set a new position with `outbox-relay checkpoint set` knowing the events in between are skipped", ErrPurged, me.Message)
	}
	return err
}
