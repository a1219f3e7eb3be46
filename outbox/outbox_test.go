package outbox

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestCheckRefusesBadEvents(t *testing.T) {
	w, err := New("app.outbox")
	if err != nil {
		t.Fatal(err)
	}
	good := Event{ID: "e1", AggregateType: "alarm", AggregateID: "dev-1", Type: "AlarmCreated", Payload: []byte(`{"t":90}`)}
	if err := w.check(&good); err != nil {
		t.Fatalf("good event refused: %v", err)
	}
	for name, mutate := range map[string]func(*Event){
		"no aggregate type":  func(e *Event) { e.AggregateType = "" },
		"no aggregate id":    func(e *Event) { e.AggregateID = "" },
		"no type":            func(e *Event) { e.Type = "" },
		"empty payload":      func(e *Event) { e.Payload = nil },
		"payload not json":   func(e *Event) { e.Payload = []byte(`{"t":`) },
		"payload two values": func(e *Event) { e.Payload = []byte(`{} {}`) },
		"id not utf-8":       func(e *Event) { e.ID = "\xff" },
	} {
		e := good
		mutate(&e)
		if err := w.check(&e); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestWriteWithoutTransaction(t *testing.T) {
	_, err := Write(t.Context(), nil, Event{AggregateType: "a", AggregateID: "b", Type: "c", Payload: []byte(`1`)})
	if !errors.Is(err, ErrInvalidEvent) {
		t.Fatalf("err = %v, want ErrInvalidEvent", err)
	}
}

func TestInsertIsOneMultiRowStatement(t *testing.T) {
	w, err := New("app.outbox", WithColumns(Columns{EventID: "id", AggregateType: "aggregatetype", AggregateID: "aggregateid",
		EventType: "type", Payload: "payload", Timestamp: "timestamp"}))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	evs := []Event{
		{ID: "a", AggregateType: "t", AggregateID: "1", Type: "x", Payload: []byte(`{}`), Extra: map[string]any{"tenant": "t1"}},
		{ID: "b", AggregateType: "t", AggregateID: "2", Type: "x", Payload: []byte(`[]`)},
	}
	q, args, err := w.insert(w.columns([]string{"tenant"}), []string{"tenant"}, evs, now, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := "INSERT INTO `app`.`outbox` (`id`, `aggregatetype`, `aggregateid`, `type`, `payload`, `timestamp`, `tenant`) VALUES (?, ?, ?, ?, ?, ?, ?), (?, ?, ?, ?, ?, ?, ?)"
	if q != want {
		t.Fatalf("query:\n%s\nwant\n%s", q, want)
	}
	if len(args) != 14 || args[4] != "{}" || args[5] != now || args[6] != "t1" || args[13] != nil {
		t.Fatalf("args = %v", args)
	}
}

func TestNewIDIsUUIDv7(t *testing.T) {
	a, _ := NewID()
	b, _ := NewID()
	if len(a) != 36 || a[14] != '7' || a >= b {
		t.Fatalf("ids %s, %s: want increasing version-7 UUIDs", a, b)
	}
}

func TestCreateTable(t *testing.T) {
	for _, f := range []Flavor{MySQL, MariaDB} {
		ddl, err := CreateTable(f, TableSpec{Table: "app.outbox", Columns: DefaultColumns})
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"CREATE TABLE `app`.`outbox`", "`event_id`", "`aggregate_type`", "`payload`", "UNIQUE KEY uk_event_id (`event_id`)", "KEY idx_created_at (`created_at`)", "-- " + string(f)} {
			if !strings.Contains(ddl, want) {
				t.Errorf("%s: no %q in\n%s", f, want, ddl)
			}
		}
	}
	ddl, err := CreateTable(MySQL, TableSpec{Table: "outbox", Columns: DebeziumColumns, Debezium: true, Additional: []string{"tenant"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"PRIMARY KEY (`id`)", "`aggregatetype`", "`tenant`", "UNIQUE KEY uk_seq (`seq`)"} {
		if !strings.Contains(ddl, want) {
			t.Errorf("debezium: no %q in\n%s", want, ddl)
		}
	}
	if strings.Contains(ddl, "`id`                 BIGINT") || !strings.Contains(ddl, "`seq`              BIGINT        NOT NULL AUTO_INCREMENT") {
		t.Errorf("debezium table: want the event id as primary key and an auto-increment seq (write order for replay):\n%s", ddl)
	}
	if _, err := CreateTable("oracle", TableSpec{Table: "outbox", Columns: DefaultColumns}); err == nil {
		t.Error("flavor oracle accepted")
	}
}
