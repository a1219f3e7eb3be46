package inbox

import (
	"testing"

	"github.com/go-sql-driver/mysql"
)

// TestAttack16MarkerDuplicateTableNameCase: on MySQL 8.0.19+ with
// lower_case_table_names=1 (Windows, Azure Database for MySQL's default)
// a table created or configured as "ConsumedEvent" is stored and named in
// ER_DUP_ENTRY as "consumedevent". IsMarkerDuplicate then does not
// recognise the marker's own duplicate: every redelivered record after a
// crash is an error, and the consumer stops at it on every restart.
func TestAttack16MarkerDuplicateTableNameCase(t *testing.T) {
	err := &mysql.MySQLError{Number: 1062, Message: "Duplicate entry 'notifier-e3' for key 'consumedevent.PRIMARY'"}
	if !IsMarkerDuplicate(err, "shop.ConsumedEvent") {
		t.Errorf("the marker's own duplicate on MySQL 8 with lower_case_table_names=1 is not recognised: redelivered records fail forever")
	}
}
