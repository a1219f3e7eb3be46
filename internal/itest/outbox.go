package itest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/outbox-relay/outbox-relay/internal/devdb"
)

// OutboxDDL is the article's outbox table as an append-only CDC outbox.
const OutboxDDL = `CREATE TABLE %s.outbox (
	id             BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
	event_id       VARCHAR(64)  NOT NULL,
	aggregate_type VARCHAR(64)  NOT NULL,
	aggregate_id   VARCHAR(64)  NOT NULL,
	event_type     VARCHAR(64)  NOT NULL,
	payload        JSON         NOT NULL,
	created_at     DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
	UNIQUE KEY uk_event_id (event_id)
) ENGINE=InnoDB`

// AlarmDDL is the business table of the article's IoT alarm scenario, plus a
// per-device sequence whose row lock orders one device's transactions.
const AlarmDDL = `CREATE TABLE %s.alarm_record (
	id        BIGINT      NOT NULL AUTO_INCREMENT PRIMARY KEY,
	device_id VARCHAR(64) NOT NULL,
	level     VARCHAR(16) NOT NULL,
	temp      INT         NOT NULL,
	seq       BIGINT      NOT NULL
) ENGINE=InnoDB`

// SeqDDL holds the per-device sequence.
const SeqDDL = `CREATE TABLE %s.device_seq (
	device_id VARCHAR(64) NOT NULL PRIMARY KEY,
	seq       BIGINT      NOT NULL
) ENGINE=InnoDB`

// Schema is one test's database with the outbox and business tables.
type Schema struct {
	DB   *devdb.Server
	Name string // database name
}

// NewSchema creates a fresh database with the outbox, alarm and sequence
// tables, and the relay user (relay / relay-pw) if missing.
func (e *Env) NewSchema(t testing.TB) *Schema {
	t.Helper()
	name := e.Unique("app")
	err := e.DB.Exec(
		"CREATE DATABASE "+name,
		fmt.Sprintf(OutboxDDL, name),
		fmt.Sprintf(AlarmDDL, name),
		fmt.Sprintf(SeqDDL, name),
		"CREATE USER IF NOT EXISTS 'relay'@'%' IDENTIFIED BY 'relay-pw'",
		"GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO 'relay'@'%'",
	)
	if err != nil {
		t.Fatalf("create schema: %v", err)
	}
	return &Schema{DB: e.DB, Name: name}
}

// Table is the outbox table's db.table.
func (s *Schema) Table() string { return s.Name + ".outbox" }

// Outcome of one writer transaction.
type Outcome struct {
	EventID  string
	DeviceID string
	Seq      int64
}

// WriteOptions shapes a writer run.
type WriteOptions struct {
	Writers      int     // concurrent connections
	Transactions int     // per writer
	Devices      int     // aggregates shared by all writers
	RollbackRate float64 // fraction of transactions rolled back
	// AggregateType is the outbox aggregate_type (default "alarm").
	AggregateType string
	// Pace is a pause after each transaction, to spread writes over time.
	Pace time.Duration
	// Tag makes event ids unique across several runs on one schema.
	Tag string
}

// Write runs writers that each commit (or roll back) Transactions
// transactions of one alarm row plus one outbox row, the device's sequence
// taken under a row lock so that per-device sequence order is commit order.
// It returns the committed outcomes.
func (s *Schema) Write(ctx context.Context, opt WriteOptions) ([]Outcome, error) {
	if opt.AggregateType == "" {
		opt.AggregateType = "alarm"
	}
	if opt.Devices == 0 {
		opt.Devices = 10
	}
	for d := 0; d < opt.Devices; d++ {
		if err := s.DB.Exec(fmt.Sprintf("INSERT IGNORE INTO %s.device_seq VALUES ('dev-%d', 0)", s.Name, d)); err != nil {
			return nil, err
		}
	}
	var (
		mu        sync.Mutex
		committed []Outcome
		wg        sync.WaitGroup
		errs      = make([]error, opt.Writers)
	)
	for w := 0; w < opt.Writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			c, err := s.DB.Root()
			if err != nil {
				errs[w] = err
				return
			}
			defer c.Close()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := 0; i < opt.Transactions && ctx.Err() == nil; i++ {
				dev := fmt.Sprintf("dev-%d", rng.IntN(opt.Devices))
				ev := fmt.Sprintf("%s-%sw%d-%d", s.Name, opt.Tag, w, i)
				rollback := rng.Float64() < opt.RollbackRate
				seq, err := s.alarmTx(c, opt.AggregateType, dev, ev, rollback)
				if err != nil {
					errs[w] = fmt.Errorf("writer %d tx %d: %w", w, i, err)
					return
				}
				if opt.Pace > 0 {
					time.Sleep(opt.Pace)
				}
				if !rollback {
					mu.Lock()
					committed = append(committed, Outcome{EventID: ev, DeviceID: dev, Seq: seq})
					mu.Unlock()
				}
			}
		}(w)
	}
	wg.Wait()
	return committed, errors.Join(errs...)
}

// alarmTx is what the application does: one local transaction with the
// business row and the outbox row.
func (s *Schema) alarmTx(c *client.Conn, aggType, dev, eventID string, rollback bool) (int64, error) {
	db := s.Name
	if _, err := c.Execute("BEGIN"); err != nil {
		return 0, err
	}
	fail := func(err error) (int64, error) {
		_, _ = c.Execute("ROLLBACK")
		return 0, err
	}
	if _, err := c.Execute("UPDATE "+db+".device_seq SET seq = seq + 1 WHERE device_id = ?", dev); err != nil {
		return fail(err)
	}
	res, err := c.Execute("SELECT seq FROM "+db+".device_seq WHERE device_id = ?", dev)
	if err != nil {
		return fail(err)
	}
	seq, _ := res.GetInt(0, 0)
	res.Close()
	temp := 80 + int(seq%40)
	if _, err := c.Execute("INSERT INTO "+db+".alarm_record (device_id, level, temp, seq) VALUES (?, 'CRITICAL', ?, ?)", dev, temp, seq); err != nil {
		return fail(err)
	}
	payload := fmt.Sprintf(`{"deviceId":"%s","level":"CRITICAL","temperature":%d,"seq":%d}`, dev, temp, seq)
	if _, err := c.Execute("INSERT INTO "+db+".outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES (?, ?, ?, 'AlarmCreated', ?)",
		eventID, aggType, dev, payload); err != nil {
		return fail(err)
	}
	if rollback {
		_, err := c.Execute("ROLLBACK")
		return 0, err
	}
	if _, err := c.Execute("COMMIT"); err != nil {
		return 0, err
	}
	return seq, nil
}

// BigInsert commits one transaction that inserts n outbox rows with one
// INSERT ... SELECT (MariaDB's sequence engine), over 10 aggregates, each
// row's payload seq increasing.
func (s *Schema) BigInsert(n int, prefix string) error {
	return s.DB.Exec(fmt.Sprintf(`INSERT INTO %s (event_id, aggregate_type, aggregate_id, event_type, payload)
		SELECT CONCAT('%s-', seq), 'alarm', CONCAT('big-', seq %% 10), 'Bulk', JSON_OBJECT('seq', seq)
		FROM %s.seq_1_to_%d`, s.Table(), prefix, s.Name, n))
}

// OutboxRows returns event_id -> aggregate_id of every committed outbox row.
func (s *Schema) OutboxRows(t testing.TB) map[string]string {
	t.Helper()
	rows, err := s.DB.Query("SELECT event_id, aggregate_id FROM " + s.Table())
	if err != nil {
		t.Fatalf("read outbox: %v", err)
	}
	out := make(map[string]string, len(rows))
	for _, r := range rows {
		out[r[0]] = r[1]
	}
	return out
}

// Head is the server's current GTID position.
func Head(t testing.TB, db *devdb.Server) string {
	t.Helper()
	rows, err := db.Query("SELECT @@gtid_binlog_pos")
	if err != nil || len(rows) != 1 {
		t.Fatalf("read gtid_binlog_pos: %v", err)
	}
	return rows[0][0]
}

// Eventually polls cond every 20ms until it returns nil or timeout passes,
// then fails with cond's last error.
func Eventually(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
