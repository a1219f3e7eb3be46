package inbox

import (
	"errors"
	"fmt"
	"testing"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-sql-driver/mysql"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestIsMarkerDuplicate(t *testing.T) {
	sqlErr := func(code uint16, msg string) error {
		return fmt.Errorf("wrapped: %w", &mysql.MySQLError{Number: code, Message: msg})
	}
	cases := map[string]struct {
		err  error
		want bool
	}{
		"mariadb primary":         {sqlErr(1062, "Duplicate entry 'notify-e1' for key 'PRIMARY'"), true},
		"mysql 8 primary":         {sqlErr(1062, "Duplicate entry 'notify-e1' for key 'consumed_event.PRIMARY'"), true},
		"mysql 8 other table":     {sqlErr(1062, "Duplicate entry 'x' for key 'notification.PRIMARY'"), false},
		"other unique key":        {sqlErr(1062, "Duplicate entry 'x' for key 'uk_other'"), false},
		"deadlock":                {sqlErr(1213, "Deadlock found when trying to get lock; try restarting transaction"), false},
		"lock wait timeout":       {sqlErr(1205, "Lock wait timeout exceeded; try restarting transaction"), false},
		"table missing":           {sqlErr(1146, "Table 'app.consumed_event' doesn't exist"), false},
		"go-mysql driver primary": {&gomysql.MyError{Code: 1062, Message: "Duplicate entry 'a-b' for key 'PRIMARY'"}, true},
		"plain error":             {errors.New("Error 1062: Duplicate entry 'a' for key 'PRIMARY'"), false},
		"nil":                     {nil, false},
	}
	for name, c := range cases {
		if got := IsMarkerDuplicate(c.err, "app.consumed_event"); got != c.want {
			t.Errorf("%s: got %v, want %v", name, got, c.want)
		}
	}
}

func TestEventID(t *testing.T) {
	id, err := EventID(&kgo.Record{Headers: []kgo.RecordHeader{{Key: "type", Value: []byte("x")}, {Key: "id", Value: []byte("e-1")}}})
	if err != nil || id != "e-1" {
		t.Fatalf("EventID = %q, %v", id, err)
	}
	key, _ := IdempotencyKey(&kgo.Record{Headers: []kgo.RecordHeader{{Key: "id", Value: []byte("e-1")}}})
	if key != "e-1" {
		t.Fatalf("IdempotencyKey = %q", key)
	}
	for _, r := range []*kgo.Record{{}, {Headers: []kgo.RecordHeader{{Key: "id"}}}} {
		if _, err := EventID(r); !errors.Is(err, ErrNoEventID) {
			t.Errorf("record %v: err %v, want ErrNoEventID", r.Headers, err)
		}
	}
}

// IsMarkerDuplicate recognises the marker's duplicate whatever the case the
// server names the table in. The failure guarded against: on MySQL 8.0.19+
// with lower_case_table_names=1 (Windows, Azure Database for MySQL's
// default) a table created or configured as "ConsumedEvent" is stored and
// named in ER_DUP_ENTRY as "consumedevent". IsMarkerDuplicate then does not
// recognise the marker's own duplicate: every redelivered record after a
// crash is an error, and the consumer stops at it on every restart.
func TestIsMarkerDuplicateIgnoresTableNameCase(t *testing.T) {
	err := &mysql.MySQLError{Number: 1062, Message: "Duplicate entry 'notifier-e3' for key 'consumedevent.PRIMARY'"}
	if !IsMarkerDuplicate(err, "shop.ConsumedEvent") {
		t.Errorf("the marker's own duplicate on MySQL 8 with lower_case_table_names=1 is not recognised: redelivered records fail forever")
	}
}
