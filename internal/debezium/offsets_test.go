package debezium

import (
	"errors"
	"strings"
	"testing"
)

func TestDecodeOffsetValues(t *testing.T) {
	key := []byte(`["outbox-debezium",{"server":"dbz"}]`)
	for _, c := range []struct {
		name, value string
		want        Offset
		err         string
	}{
		{name: "inside a transaction, GTIDs", value: `{"transaction_id":null,"ts_sec":1700000000,"file":"mysql-bin.000003","pos":1234,"gtids":"0-1-41","event":2,"row":1,"server_id":1}`,
			want: Offset{GTIDs: "0-1-41", File: "mysql-bin.000003", Pos: 1234, Event: 2, Row: 1, ServerID: 1, TsSec: 1700000000}},
		{name: "a boundary, file and position only", value: `{"file":"mysql-bin.000001","pos":4}`, want: Offset{File: "mysql-bin.000001", Pos: 4}},
		{name: "a MySQL GTID set with line breaks", value: `{"file":"binlog.000002","pos":7,"gtids":"3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5,\n4e11fa47-71ca-11e1-9e33-c80aa9429562:1-2"}`,
			want: Offset{File: "binlog.000002", Pos: 7, GTIDs: "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5,4e11fa47-71ca-11e1-9e33-c80aa9429562:1-2"}},
		{name: "a snapshot in progress", value: `{"file":"mysql-bin.000001","pos":328,"snapshot":"INITIAL","snapshot_completed":false}`,
			want: Offset{File: "mysql-bin.000001", Pos: 328, Snapshot: "INITIAL"}},
		{name: "an old snapshot flag", value: `{"file":"mysql-bin.000001","pos":328,"snapshot":true}`, want: Offset{File: "mysql-bin.000001", Pos: 328, Snapshot: "true"}},
		{name: "snapshot false", value: `{"file":"mysql-bin.000001","pos":328,"snapshot":false}`, want: Offset{File: "mysql-bin.000001", Pos: 328}},
		{name: "an incremental snapshot", value: `{"file":"f.000001","pos":9,"incremental_snapshot_collections":"[]","incremental_snapshot_primary_key":"x"}`,
			want: Offset{File: "f.000001", Pos: 9, Incremental: []string{"incremental_snapshot_collections", "incremental_snapshot_primary_key"}}},
		{name: "a position as text", value: `{"file":"f.000001","pos":"9"}`, err: "pos is 9, want a whole number"},
		{name: "a negative event count", value: `{"file":"f.000001","pos":9,"event":-1}`, err: "event is -1, want a whole number"},
		{name: "a fractional row", value: `{"file":"f.000001","pos":9,"row":1.5}`, err: "row is 1.5, want a whole number"},
		{name: "gtids not a string", value: `{"file":"f.000001","pos":9,"gtids":5}`, err: "gtids is 5, want a string"},
		{name: "no file: another database's connector", value: `{"lsn":123}`, err: "none is stored; 1 offsets of other connectors " +
			`(["outbox-debezium",{"server":"dbz"}] (no binlog file: not a MySQL or MariaDB connector's))`},
		{name: "not an object", value: `[1,2]`, err: "not a JSON object"},
		{name: "null inside", value: `null`, err: "not a JSON object"},
		{name: "two objects", value: `{"file":"f.000001","pos":9}{}`, err: "more after the JSON object"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := Decode([]Entry{{Key: key, Value: []byte(c.value)}}, "file x")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Select("", ""); c.err != "" {
				named := strings.Contains(err.Error(), "file x: offset of connector outbox-debezium (server dbz)") && errors.Is(err, ErrOffset) ||
					errors.Is(err, ErrNoOffset)
				if !named || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want %q", err, c.err)
				}
				return
			}
			c.want.Connector, c.want.Server = "outbox-debezium", "dbz"
			got := s.Offsets[0]
			if got.String() != c.want.String() || got.Snapshot != c.want.Snapshot || strings.Join(got.Incremental, ",") != strings.Join(c.want.Incremental, ",") ||
				got.ServerID != c.want.ServerID || got.TsSec != c.want.TsSec || got.Name() != c.want.Name() {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestDecodeKeepsOtherConnectorsApart(t *testing.T) {
	s, err := Decode([]Entry{
		{Key: []byte(`["file-source",{"filename":"/var/log/app.log"}]`), Value: []byte(`{"position":1024}`)},
		{Key: []byte(`["pg",{"server":"x","extra":1}]`), Value: []byte(`{"lsn":5}`)},
		{Key: []byte(`not json`), Value: []byte(`{}`)},
		{Key: []byte(`["b",{"server":"s"}]`), Value: nil},
		{Key: []byte(`["a",{"server":"s"}]`), Value: []byte(`{"file":"f.000001","pos":4}`)},
	}, "topic connect-offsets")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Offsets) != 2 || s.Offsets[0].Connector != "a" || !s.Offsets[1].Deleted || len(s.Others) != 3 {
		t.Fatalf("%+v", s)
	}
}

func TestSelectNamesWhatIsStored(t *testing.T) {
	s := Stored{Where: "topic connect-offsets", Offsets: []Offset{
		{Connector: "billing", Server: "billing", File: "f.000001"},
		{Connector: "billing", Server: "old", Deleted: true},
		{Connector: "orders", Server: "orders", File: "f.000002"},
	}, Others: []string{`["file-source",{"filename":"x"}]`}}
	for _, c := range []struct {
		connector, server string
		want              string // connector/server chosen
		err               error
		msg               string
	}{
		{"", "", "", ErrAmbiguous, "several Debezium connector offsets in topic connect-offsets: connector billing (server billing), " +
			"connector billing (server old) (deleted), connector orders (server orders); choose one with --connector NAME and --server TOPIC_PREFIX"},
		{"orders", "", "orders/orders", nil, ""},
		{"", "billing", "billing/billing", nil, ""},
		{"billing", "", "", ErrAmbiguous, "connector billing (server billing), connector billing (server old) (deleted)"},
		{"billing", "old", "", ErrNoOffset, "the offset of connector billing (server old) in topic connect-offsets was deleted"},
		{"shipping", "", "", ErrNoOffset, "no Debezium connector offset matches --connector shipping in topic connect-offsets: stored: connector billing (server billing), " +
			"connector billing (server old) (deleted), connector orders (server orders); 1 offsets of other connectors ([\"file-source\",{\"filename\":\"x\"}])"},
	} {
		o, err := s.Select(c.connector, c.server)
		if c.err != nil {
			if !errors.Is(err, c.err) || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("%s/%s: error %v, want %v with %q", c.connector, c.server, err, c.err, c.msg)
			}
			continue
		}
		if err != nil || o.Connector+"/"+o.Server != c.want {
			t.Errorf("%s/%s: %+v %v", c.connector, c.server, o, err)
		}
	}
	if _, err := (Stored{Where: "file f"}).Select("", ""); !errors.Is(err, ErrNoOffset) || !strings.Contains(err.Error(), "in file f: none is stored") {
		t.Errorf("empty: %v", err)
	}
}

func TestDecodeOffsetFileFixtures(t *testing.T) {
	es, err := DecodeOffsetFile(fixture(t, "offsets-several.dat"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Decode(es, "file offsets-several.dat")
	if err != nil {
		t.Fatal(err)
	}
	o, err := s.Select("orders-outbox", "")
	if err != nil || o.GTIDs != "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-77" || o.Pos != 4711 {
		t.Fatalf("%+v %v", o, err)
	}
	es, _ = DecodeOffsetFile(fixture(t, "offsets-snapshot.dat"))
	s, _ = Decode(es, "file offsets-snapshot.dat")
	if o, err := s.Select("", ""); err != nil || o.Snapshot != "INITIAL" {
		t.Fatalf("%+v %v", o, err)
	}
}

// Debezium's other connectors store their offsets under the same kind of
// source partition (Postgres, Oracle: {"server": PREFIX}) in a Kafka
// Connect cluster's one offsets topic: such an offset, which has no binlog
// file, is another connector's, listed, and the MySQL connector's is
// chosen beside it; a binlog offset that cannot be read is an error only
// once chosen. An offset without a binlog file failed the whole topic, so
// no connector of a shared Connect cluster could be taken over.
func TestDecodeTakesOtherDebeziumConnectorsAsOthers(t *testing.T) {
	s, err := Decode([]Entry{
		{Key: []byte(`["inventory-pg",{"server":"pg"}]`), Value: []byte(`{"lsn":24023128,"txId":555,"ts_usec":1700000000000000}`)},
		{Key: []byte(`["orders",{"server":"orders"}]`), Value: []byte(`{"file":"binlog.000003","pos":4,"gtids":"0-1-20"}`)},
		{Key: []byte(`["broken",{"server":"b"}]`), Value: []byte(`{"file":"binlog.000001","pos":-4}`)},
	}, "topic connect-offsets")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Others) != 1 || !strings.Contains(s.Others[0], "inventory-pg") {
		t.Fatalf("others %q, want the Postgres connector's", s.Others)
	}
	if o, err := s.Select("orders", ""); err != nil || o.File != "binlog.000003" || o.GTIDs != "0-1-20" {
		t.Fatalf("orders: %+v %v", o, err)
	}
	if _, err := s.Select("broken", ""); !errors.Is(err, ErrOffset) || !strings.Contains(err.Error(), "connector broken (server b)") ||
		!strings.Contains(err.Error(), "pos is -4") {
		t.Fatalf("broken: %v, want ErrOffset naming it and its pos", err)
	}
	if _, err := s.Select("", ""); !errors.Is(err, ErrAmbiguous) {
		t.Fatalf("none chosen: %v, want ErrAmbiguous", err)
	}
}
