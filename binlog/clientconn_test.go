package binlog

import (
	"bytes"
	"errors"
	"runtime"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outbox-relay/outbox-relay/internal/hostiledb"
)

// Packets of hostile answers to a query (the greeting offers no
// CLIENT_DEPRECATE_EOF: column definitions end with an EOF packet).
var (
	eofPacket = []byte{0xfe, 0, 0, 2, 0}
	// prepareOK: a statement of one parameter and no columns (the
	// parameter's definition and an EOF follow it).
	prepareOK = []byte{0x00, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0}
)

// columnDef is a column definition of a VARCHAR column name.
func columnDef(name string) []byte {
	var b []byte
	for _, f := range []string{"def", "", "", "", name, ""} {
		b = append(b, byte(len(f)))
		b = append(b, f...)
	}
	return append(b, 0x0c, 33, 0, 0, 1, 0, 0, mysql.MYSQL_TYPE_VAR_STRING, 0, 0, 0, 0, 0)
}

// hostileAnswers are answers to a query that go-mysql (v1.16.0) indexes
// past (each crashed the process before the relay's boundary recovered
// from it), or sizes an allocation from.
func hostileAnswers() []struct {
	name    string
	answer  [][]byte
	want    error
	prepare bool // the call is a prepared statement (args): the first command is its prepare
} {
	def := columnDef("v")
	oneColumn := func(rest ...[]byte) [][]byte { return append([][]byte{{1}, def, eofPacket}, rest...) }
	return []struct {
		name    string
		answer  [][]byte
		want    error
		prepare bool
	}{
		{"a short OK", [][]byte{{0x00}}, ErrBrokenAnswer, false},
		{"an OK whose affected rows run past it", [][]byte{{0x00, 0xfe, 1}}, ErrBrokenAnswer, false},
		{"a short ERR", [][]byte{{0xff, 0x28}}, ErrBrokenAnswer, false},
		{"an ERR cut in its SQL state", [][]byte{{0xff, 0x28, 0x04, '#', 'H'}}, ErrBrokenAnswer, false},
		{"a column definition without its fixed fields", [][]byte{{1}, def[:len(def)-13]}, ErrBrokenAnswer, false},
		{"an EOF cut short after the columns", [][]byte{{1}, def, {0xfe}}, ErrBrokenAnswer, false},
		{"an empty row packet", oneColumn([]byte{}), ErrBrokenAnswer, false},
		{"a row whose length runs past it", oneColumn([]byte{0xfc, 0x10}, eofPacket), ErrBrokenAnswer, false},
		{"a last EOF cut short", oneColumn([]byte{1, 'x'}, []byte{0xfe, 0}), ErrBrokenAnswer, false},
		{"2^34 columns", [][]byte{{0xfe, 0, 0, 0, 0, 4, 0, 0, 0}}, ErrAnswerBound, false},
		{"2^64-1 columns", [][]byte{{0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}, ErrAnswerBound, false},
		{"a prepared statement answered by a short OK", [][]byte{{0x00}}, ErrBrokenAnswer, true},
		{"a prepare answered by a short prepare OK", nil, ErrBrokenAnswer, true},
	}
}

// hostileQueryServer runs a server that logs the relay in, then answers
// its commands with answer (a prepared statement's prepare with
// prepareOK first).
func hostileQueryServer(t *testing.T, answer [][]byte, prepare bool) *hostiledb.Server {
	t.Helper()
	answers := [][][]byte{answer}
	switch {
	case prepare && answer == nil:
		answers = [][][]byte{{prepareOK[:5]}}
	case prepare:
		answers = [][][]byte{{prepareOK, columnDef("?"), eofPacket}, answer}
	}
	return hostiledb.StartScript(t, hostiledb.Script{Plugin: pluginNative,
		Steps: []hostiledb.Step{hostiledb.Read, hostiledb.OK}, Answers: answers})
}

// connectHostile connects (with a configured packet bound: no query of
// max_allowed_packet) to a hostileQueryServer, until the test ends.
func connectHostile(t *testing.T, answer [][]byte, prepare bool) *Conn {
	t.Helper()
	srv := hostileQueryServer(t, answer, prepare)
	cfg := guardConfig(srv.Addr)
	cfg.MaxPacketBytes = 1 << 20
	conn, err := Connect(t.Context(), cfg, srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// A server's answer that go-mysql would crash on, or size an allocation
// the process cannot make from, ends the call with a named error (and the
// connection: a later call finds it broken), never the process: a plain
// query, a prepared statement, a transaction's BEGIN.
func TestHostileAnswerToAQueryIsAnErrorNotACrash(t *testing.T) {
	for _, v := range hostileAnswers() {
		t.Run(v.name, func(t *testing.T) {
			conn := connectHostile(t, v.answer, v.prepare)
			var err error
			if v.prepare {
				_, err = conn.Execute("SELECT v FROM t WHERE id = ?", 1)
			} else {
				_, err = Query(conn, "SELECT v FROM t")
			}
			if !errors.Is(err, v.want) {
				t.Fatalf("query: %v, want %v", err, v.want)
			}
			if !Broken(conn, err) {
				t.Fatalf("Broken(%v) is false: the connection's state is unknown", err)
			}
			if _, err := Query(conn, "SELECT 1"); err == nil {
				t.Fatal("a query after the broken answer went through")
			}
			t.Log(err)
		})
	}
	t.Run("BEGIN answered by a short OK", func(t *testing.T) {
		conn := connectHostile(t, [][]byte{{0x00}}, false)
		if err := conn.Begin(); !errors.Is(err, ErrBrokenAnswer) {
			t.Fatalf("begin: %v, want %v", err, ErrBrokenAnswer)
		}
	})
	t.Run("the relay's query of max_allowed_packet answered by a short OK", func(t *testing.T) {
		srv := hostileQueryServer(t, [][]byte{{0x00}}, false)
		if _, err := Connect(t.Context(), guardConfig(srv.Addr), srv.Addr); !errors.Is(err, ErrBrokenAnswer) {
			t.Fatalf("connect: %v, want %v", err, ErrBrokenAnswer)
		}
		// The replication connection's registration: after its login.
		if err := runReader(t, guardConfig(srv.Addr), srv.Addr); !errors.Is(err, ErrBrokenAnswer) {
			t.Fatalf("replication: %v, want %v", err, ErrBrokenAnswer)
		}
	})
}

// Rows of one byte in an answer of 4,096 columns: go-mysql keeps every row
// and decodes each to 4,096 values (160 KB of a 5-byte packet). The guard
// closes the connection once the answer would decode past its bound; the
// process allocates a few MB, not the 330 MB go-mysql would.
func TestAnswerOfManyColumnsAndTinyRowsIsCutAtTheBound(t *testing.T) {
	answer := [][]byte{{0xfc, 0x00, 0x10}}
	for range 4096 {
		answer = append(answer, columnDef("c"))
	}
	answer = append(answer, eofPacket)
	for range 2000 {
		answer = append(answer, []byte{0xfb})
	}
	answer = append(answer, eofPacket)
	conn := connectHostile(t, answer, false)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := Query(conn, "SELECT * FROM wide")
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrAnswerBound) {
		t.Fatalf("query: %v, want %v", err, ErrAnswerBound)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 64<<20 {
		t.Fatalf("the query allocated %d MB", got>>20)
	}
	t.Log(err)
}

// The bound leaves real answers alone: 100,000 rows of 16 columns (what
// `replay --max-rows` allows of a wide outbox table), and a streamed
// answer of more rows than a buffered one may hold (go-mysql keeps none of
// them; audit reads whole tables so).
func TestAnswerBoundLetsRealAnswersThrough(t *testing.T) {
	const columns = 16
	answer := func(rows int, binary bool) [][]byte {
		a := [][]byte{{columns}}
		for range columns {
			a = append(a, columnDef("c"))
		}
		a = append(a, eofPacket)
		row := bytes.Repeat([]byte{1, 'v'}, columns)
		if binary {
			row = append([]byte{0x00, 0x00, 0x00, 0x00}, row...) // a header and a NULL bitmap
		}
		for range rows {
			a = append(a, row)
		}
		return append(a, eofPacket)
	}
	t.Run("buffered: 100,000 rows of 16 columns", func(t *testing.T) {
		conn := connectHostile(t, answer(100_000, false), false)
		rows, err := Query(conn, "SELECT * FROM t")
		if err != nil || len(rows) != 100_000 {
			t.Fatalf("query: %d rows, %v", len(rows), err)
		}
	})
	t.Run("streamed: 200,000 rows of 16 columns", func(t *testing.T) {
		// Past the buffered bound: 3,200,000 values of 48 bytes are 154 MB.
		conn := connectHostile(t, answer(200_000, true), true)
		st, err := conn.Prepare("SELECT * FROM t WHERE id > ?")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		var res mysql.Result
		if err := st.ExecuteSelectStreaming(&res, func([]mysql.FieldValue) error { n++; return nil }, nil, 1); err != nil || n != 200_000 {
			t.Fatalf("streamed query: %d rows, %v", n, err)
		}
	})
}

// A panic of the caller's own row callback is the caller's: it goes on as
// a panic, not as the server's broken answer.
func TestStreamingCallbackPanicIsTheCallers(t *testing.T) {
	conn := connectHostile(t, [][]byte{{1}, columnDef("v"), eofPacket, {0, 0, 1, 'x'}, eofPacket}, true)
	st, err := conn.Prepare("SELECT v FROM t")
	if err != nil {
		t.Fatal(err)
	}
	type mine struct{}
	defer func() {
		if p := recover(); p != (mine{}) {
			t.Fatalf("recovered %v, want the callback's own panic", p)
		}
	}()
	var res mysql.Result
	err = st.ExecuteSelectStreaming(&res, func([]mysql.FieldValue) error { panic(mine{}) }, nil, 1)
	t.Fatalf("the callback's panic was swallowed: %v", err)
}
