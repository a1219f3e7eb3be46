package binlog

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outbox-relay/outbox-relay/schema"
)

// tableMapNoNames is tableMap (id INT, v VARCHAR(20)) as a server with
// binlog_row_metadata MINIMAL or NO_LOG logs it: types, no column names.
func (e *encoder) tableMapNoNames(table string) *replication.BinlogEvent {
	db, tbl, _ := strings.Cut(table, ".")
	id, ok := e.tables[table]
	if !ok {
		id = uint64(100 + len(e.tables))
		e.tables[table] = id
	}
	b := binary.LittleEndian.AppendUint64(nil, id)[:6]
	b = binary.LittleEndian.AppendUint16(b, 1)
	b = append(b, byte(len(db)))
	b = append(b, db...)
	b = append(b, 0, byte(len(tbl)))
	b = append(b, tbl...)
	b = append(b, 0)
	b = append(b, 2, mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_VARCHAR)
	b = append(b, 2, 80, 0) // metadata: VARCHAR max length 80 bytes
	b = append(b, 0b10)     // nullable: v
	return e.event(replication.TABLE_MAP_EVENT, b)
}

// A CREATE TABLE IF NOT EXISTS of a table the reader has not seen (MySQL
// logs it even when the table exists and the statement does nothing) gives
// a provisional layout, checked against the table's first table map without
// column names: a match publishes the rows and the commit's layout is no
// longer provisional; another column count or column types stop the reader
// at the rows' GTID with ErrSchemaMismatch wrapping schema.ErrProvisional.
func TestProvisionalLayoutCheckedAgainstTableMap(t *testing.T) {
	cases := []struct {
		name, create string
		err          bool
	}{
		{"same definition", "CREATE TABLE IF NOT EXISTS outbox (id INT NOT NULL PRIMARY KEY, v VARCHAR(20))", false},
		{"integers of another width", "CREATE TABLE IF NOT EXISTS outbox (id BIGINT UNSIGNED, v TEXT)", false},
		{"columns in another order", "CREATE TABLE IF NOT EXISTS outbox (v VARCHAR(20), id INT)", true},
		{"another column count", "CREATE TABLE IF NOT EXISTS outbox (id INT, v VARCHAR(20), w INT)", true},
		{"another column type", "CREATE TABLE IF NOT EXISTS outbox (id DATETIME, v VARCHAR(20))", true},
	}
	for _, flavor := range []string{mysql.MySQLFlavor, mysql.MariaDBFlavor} {
		for _, c := range cases {
			t.Run(flavor+"/"+c.name, func(t *testing.T) {
				f := newFixture(t, flavor)
				f.r.srv.ColumnNames = false
				s := &script{encoder: newEncoder(t, flavor)}
				s.standalone(1, "a", c.create)
				s.begin(2).add(s.tableMapNoNames(testTable), s.rowsEvent(OpInsert, testTable, 1)).xid()
				var batch []Event
				var err error
				for _, ev := range s.evs {
					f.sync.stamp(ev)
					if batch, err = f.r.convert(f.st, ev, batch); err != nil {
						break
					}
				}
				if c.err {
					if !errors.Is(err, ErrSchemaMismatch) || !errors.Is(err, schema.ErrProvisional) ||
						!strings.Contains(err.Error(), gtidOfN(flavor, 2)) {
						t.Fatalf("error %v, want ErrSchemaMismatch wrapping schema.ErrProvisional at %s", err, gtidOfN(flavor, 2))
					}
					for _, ev := range batch {
						if ev.Kind == KindRows {
							t.Fatalf("rows handed on: %s", render(ev))
						}
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				var commits []Event
				for _, ev := range batch {
					if ev.Kind == KindCommit {
						commits = append(commits, ev)
					}
				}
				if len(commits) != 2 {
					t.Fatalf("%d commits, want 2", len(commits))
				}
				if _, ok := commits[0].Provisional[testTable]; !ok {
					t.Fatalf("after the CREATE: provisional %v, want %s", commits[0].Provisional, testTable)
				}
				if len(commits[1].Provisional) != 0 {
					t.Fatalf("after the rows: provisional %v, want none", commits[1].Provisional)
				}
			})
		}
	}
}
