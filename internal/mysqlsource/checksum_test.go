package mysqlsource

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// go-mysql's syncer declares @master_binlog_checksum='NONE' (as mysqlbinlog
// does) whatever the server's binlog_checksum: MySQL then sends the fake
// rotate without a checksum, and the binlog's events as the binlog holds
// them. The syncer, verifying checksums, reads the rotate's file name as it
// is, then every event, heartbeats included, for either binlog_checksum.
func TestSyncerDeclaringNoChecksumReadsTheRotateName(t *testing.T) {
	for _, version := range []string{"8.0.40", "8.4.3"} {
		for _, checksum := range []string{"CRC32", "NONE"} {
			t.Run(version+" "+checksum, func(t *testing.T) {
				p := startTest(t, Options{Version: version, BinlogChecksum: checksum})
				tbl, err := p.CreateOutbox("app", "outbox")
				if err != nil {
					t.Fatal(err)
				}
				if _, err := p.Commit(Tx{Inserts: []Insert{{Table: tbl, Rows: [][]any{{int64(7), "ev-7", "alarm", "d", "T", `{}`, time.Now()}}}}}); err != nil {
					t.Fatal(err)
				}
				host, port, _ := net.SplitHostPort(p.Addr())
				n, _ := strconv.Atoi(port)
				s := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{ServerID: 77, Flavor: "mysql", Host: host, Port: uint16(n),
					User: "relay", Password: "relay-pw", DisableRetrySync: true, HeartbeatPeriod: 100 * time.Millisecond, VerifyChecksum: true,
					Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
				defer s.Close()
				from, err := mysql.ParseMysqlGTIDSet("")
				if err != nil {
					t.Fatal(err)
				}
				st, err := s.StartSyncGTID(from)
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				ev, err := st.GetEvent(ctx)
				if err != nil {
					t.Fatal(err)
				}
				rot, ok := ev.Event.(*replication.RotateEvent)
				if !ok || string(rot.NextLogName) != "binlog.000001" || rot.Position != 4 {
					t.Fatalf("first event %T %+v, want the fake rotate to binlog.000001 at 4", ev.Event, ev.Event)
				}
				var rows, beats int
				for rows == 0 || beats == 0 {
					ev, err := st.GetEvent(ctx)
					if err != nil {
						t.Fatalf("after %d rows, %d heartbeats: %v", rows, beats, err)
					}
					switch e := ev.Event.(type) {
					case *replication.FormatDescriptionEvent:
						if want := map[string]byte{"CRC32": 1, "NONE": 0}[checksum]; byte(e.ChecksumAlgorithm) != want {
							t.Fatalf("format description says checksum %d, want %d", e.ChecksumAlgorithm, want)
						}
					case *replication.RowsEvent:
						if len(e.Rows) != 1 || e.Rows[0][0] != int64(7) || e.Rows[0][1] != "ev-7" {
							t.Fatalf("rows %v", e.Rows)
						}
						rows++
					case *replication.HeartbeatEvent:
						beats++
					}
				}
			})
		}
	}
}

// A dump as MySQL serves it for each checksum a replica declares
// (@source_binlog_checksum, or @master_binlog_checksum, set to a value or
// to @@global.binlog_checksum) and each binlog_checksum: the fake rotate
// carries a CRC32 only when CRC32 was declared; the format description
// says the binlog's algorithm and always carries its CRC32; the binlog's
// other events carry one when the binlog does; a replica that declared
// nothing gets error 1236 from a binlog with checksums.
func TestDumpChecksumAsTheReplicaDeclared(t *testing.T) {
	cases := []struct {
		server, declare string
		rotateCRC       bool
		err             string
	}{
		{server: "CRC32", declare: "", err: "Replica can not handle replication events with the checksum that source is configured to log; " +
			"the first event '' at 4, the last event read from './binlog.000001' at 126, the last byte read from './binlog.000001' at 126."},
		{server: "CRC32", declare: "SET @master_binlog_checksum= @@global.binlog_checksum", rotateCRC: true},
		{server: "CRC32", declare: "SET @master_binlog_checksum = @@global.binlog_checksum, @source_binlog_checksum = @@global.binlog_checksum", rotateCRC: true},
		{server: "CRC32", declare: "SET @master_binlog_checksum='NONE', @source_binlog_checksum='NONE'"},
		{server: "CRC32", declare: "SET @source_binlog_checksum='NONE', @master_binlog_checksum='CRC32'"}, // the new name first
		{server: "NONE", declare: ""},
		{server: "NONE", declare: "SET @source_binlog_checksum='CRC32'", rotateCRC: true},
		{server: "NONE", declare: "SET @master_binlog_checksum= @@global.binlog_checksum"},
	}
	for _, c := range cases {
		t.Run(c.server+" "+c.declare, func(t *testing.T) {
			p := startTest(t, Options{Version: "8.0.40", BinlogChecksum: c.server})
			events, err := rawDump(t, p, c.declare, 3)
			if c.err != "" {
				var me *mysql.MyError
				if !asMyError(err, &me) || me.Code != mysql.ER_MASTER_FATAL_ERROR_READING_BINLOG || me.Message != c.err {
					t.Fatalf("dump: %v, want error 1236 %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			rotate, fde, prev := events[0], events[1], events[2]
			name := "binlog.000001"
			wantLen := 19 + 8 + len(name)
			if c.rotateCRC {
				wantLen += 4
				if !crcOK(rotate) {
					t.Fatal("fake rotate: bad CRC32")
				}
			}
			if rotate[4] != 4 || len(rotate) != wantLen || string(rotate[27:27+len(name)]) != name {
				t.Fatalf("fake rotate %x: want %d bytes naming %s", rotate, wantLen, name)
			}
			if fde[4] != 15 || !crcOK(fde) {
				t.Fatalf("format description %x: want one with its CRC32", fde)
			}
			if alg := fde[len(fde)-5]; alg != map[string]byte{"CRC32": 1, "NONE": 0}[c.server] {
				t.Fatalf("format description's checksum algorithm %d with binlog_checksum %s", alg, c.server)
			}
			// Previous_gtids of an empty set: 8 bytes of body.
			if want := 19 + 8 + map[string]int{"CRC32": 4, "NONE": 0}[c.server]; prev[4] != 35 || len(prev) != want ||
				c.server == "CRC32" && !crcOK(prev) {
				t.Fatalf("previous gtids %x: want %d bytes", prev, want)
			}
		})
	}
}

func crcOK(ev []byte) bool {
	n := len(ev)
	return n > 4 && binary.LittleEndian.Uint32(ev[n-4:]) == crc32.ChecksumIEEE(ev[:n-4])
}

func asMyError(err error, me **mysql.MyError) bool {
	e, ok := err.(*mysql.MyError)
	if ok {
		*me = e
	}
	return ok
}

// rawDump runs declare (if any), then COM_BINLOG_DUMP_GTID from the empty
// set, and returns the first n events as sent (each packet without its OK
// byte), or the server's error.
func rawDump(t *testing.T, p *Primary, declare string, n int) ([][]byte, error) {
	t.Helper()
	c, err := client.Connect(p.Addr(), "relay", "relay-pw", "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if declare != "" {
		if _, err := c.Execute(declare); err != nil {
			t.Fatalf("%s: %v", declare, err)
		}
	}
	cmd := []byte{0, 0, 0, 0, mysql.COM_BINLOG_DUMP_GTID, 0, 0}
	cmd = binary.LittleEndian.AppendUint32(cmd, 78) // server_id
	cmd = binary.LittleEndian.AppendUint32(cmd, 0)  // file name length
	cmd = binary.LittleEndian.AppendUint64(cmd, 4)  // position
	cmd = binary.LittleEndian.AppendUint32(cmd, 8)  // GTID data size
	cmd = binary.LittleEndian.AppendUint64(cmd, 0)  // no sids
	c.ResetSequence()
	if err := c.WritePacket(cmd); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var events [][]byte
	for len(events) < n {
		pkt, err := c.ReadPacket()
		if err != nil {
			t.Fatal(err)
		}
		switch pkt[0] {
		case mysql.OK_HEADER:
			events = append(events, pkt[1:])
		case mysql.ERR_HEADER:
			code := binary.LittleEndian.Uint16(pkt[1:3])
			msg := string(pkt[3:])
			if strings.HasPrefix(msg, "#") {
				msg = msg[6:]
			}
			return events, mysql.NewError(code, msg)
		default:
			t.Fatalf("packet %x", pkt)
		}
	}
	return events, nil
}
