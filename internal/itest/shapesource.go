package itest

// What a shape run writes to and reads of the source: its statements, the
// outbox rows a shape inserts, the binlog it produced, server settings, and a
// throttled connection.

import (
	"fmt"
	"io"
	"net"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/config"
)

// Conn opens a root connection to the shared server, closed at cleanup.
func (r *ShapeRun) Conn() *client.Conn {
	r.T.Helper()
	c, err := r.Env.DB.Root()
	if err != nil {
		r.T.Fatal(err)
	}
	r.T.Cleanup(func() { c.Close() })
	return c
}

// Exec runs statements on c in order, failing the test on an error.
func (r *ShapeRun) Exec(c *client.Conn, stmts ...string) {
	r.T.Helper()
	for _, q := range stmts {
		if _, err := c.Execute(q); err != nil {
			r.T.Fatalf("%s: %v", abbreviate(q), err)
		}
	}
}

func abbreviate(q string) string {
	q = strings.Join(strings.Fields(q), " ")
	if len(q) > 100 {
		return q[:100] + "..."
	}
	return q
}

// Rows returns n new outbox events on aggregate agg as the VALUES list of
// an INSERT, and their event ids. Each event's payload carries the
// aggregate's next seq, so commit order per aggregate is checkable: use one
// aggregate per concurrently open transaction.
func (r *ShapeRun) Rows(agg string, n int) (string, []string) {
	r.seqMu.Lock()
	defer r.seqMu.Unlock()
	var vals, ids []string
	for i := 0; i < n; i++ {
		r.nextID++
		r.seq[agg]++
		id := fmt.Sprintf("%s-%s-%d", r.S.Name, agg, r.nextID)
		ids = append(ids, id)
		vals = append(vals, fmt.Sprintf(`('%s', 'shape', '%s', 'ShapeEvent', '{"seq":%d}')`, id, agg, r.seq[agg]))
	}
	return strings.Join(vals, ", "), ids
}

// Insert returns an INSERT of n new events on agg into the outbox, and ids.
func (r *ShapeRun) Insert(agg string, n int) (string, []string) {
	vals, ids := r.Rows(agg, n)
	return fmt.Sprintf("INSERT INTO %s (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES %s", r.S.Table(), vals), ids
}

// Ghost is Insert for rows the shape rolls back: they are recorded as
// ghosts, never to be published.
func (r *ShapeRun) Ghost(agg string, n int) string {
	q, ids := r.Insert(agg, n)
	r.Ghosts = append(r.Ghosts, ids...)
	return q
}

// Must is Insert without the ids.
func (r *ShapeRun) Must(agg string, n int) string {
	q, _ := r.Insert(agg, n)
	return q
}

// XID returns a new XA transaction id, unique in the test binary.
func (r *ShapeRun) XID() string {
	r.seqMu.Lock()
	defer r.seqMu.Unlock()
	r.nextID++
	return fmt.Sprintf("%s-x%d", r.S.Name, r.nextID)
}

// LastGTID is the GTID of the last transaction c committed.
func (r *ShapeRun) LastGTID(c *client.Conn) string {
	r.T.Helper()
	return LastGTID(r.T, c)
}

// LastGTID is the GTID of the last transaction c committed (MariaDB's
// @@last_gtid), copied out of go-mysql's result: GetString's text lies in
// the result's buffer, which Close hands to the next query of any
// connection (a GTID read so became another transaction's of the same
// length, and tests compared the relay's stops with the wrong GTID).
func LastGTID(t testing.TB, c *client.Conn) string {
	t.Helper()
	res, err := c.Execute("SELECT @@last_gtid")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	g, err := res.GetString(0, 0)
	if err != nil || g == "" {
		t.Fatalf("read @@last_gtid: %q %v", g, err)
	}
	return strings.Clone(g)
}

// BinlogMark is a position in the server's binlog (SHOW MASTER STATUS):
// where GTIDHolding starts looking.
type BinlogMark struct {
	File string
	Pos  string
}

// Mark is the server's binlog position now.
func (r *ShapeRun) Mark() BinlogMark {
	r.T.Helper()
	rows, err := r.Env.DB.Query("SHOW MASTER STATUS")
	if err != nil || len(rows) != 1 || len(rows[0]) < 2 {
		r.T.Fatalf("show master status: %v %v", rows, err)
	}
	return BinlogMark{File: rows[0][0], Pos: rows[0][1]}
}

// BinlogSince is the server's binlog after m as SHOW BINLOG EVENTS lists
// it: one line per event, "Event_type Info".
func (r *ShapeRun) BinlogSince(m BinlogMark) []string {
	r.T.Helper()
	files, err := r.Env.DB.Query("SHOW BINARY LOGS")
	if err != nil {
		r.T.Fatal(err)
	}
	var out []string
	started := false
	for _, f := range files {
		started = started || f[0] == m.File
		if !started {
			continue
		}
		q := fmt.Sprintf("SHOW BINLOG EVENTS IN '%s'", f[0])
		if f[0] == m.File {
			q += " FROM " + m.Pos
		}
		evs, err := r.Env.DB.Query(q)
		if err != nil {
			r.T.Fatal(err)
		}
		for _, ev := range evs { // Log_name, Pos, Event_type, Server_id, End_log_pos, Info
			out = append(out, ev[2]+" "+ev[len(ev)-1])
		}
	}
	return out
}

// GTIDHolding is the GTID of the first event group after m whose events
// mention needle (an event id in a statement-logged INSERT), read from the
// server's own binlog: the oracle for "the relay names the transaction",
// independent of the session's @@last_gtid. On a miss it fails the test
// with the events it read.
func (r *ShapeRun) GTIDHolding(m BinlogMark, needle string) string {
	r.T.Helper()
	evs := r.BinlogSince(m)
	gtid := ""
	for _, ev := range evs {
		if typ, info, _ := strings.Cut(ev, " "); typ == "Gtid" {
			fs := strings.Fields(info)
			gtid = fs[len(fs)-1]
		}
		if strings.Contains(ev, needle) && gtid != "" {
			return gtid
		}
	}
	r.T.Fatalf("no binlog event after %s:%s mentions %q; events:\n%s", m.File, m.Pos, needle, strings.Join(evs, "\n"))
	return ""
}

// SetGlobal sets a global server variable for the test and restores its
// value at cleanup.
func SetGlobal(t testing.TB, e *Env, name, value string) {
	t.Helper()
	rows, err := e.DB.Query("SELECT @@GLOBAL." + name)
	if err != nil || len(rows) != 1 {
		t.Fatalf("read %s: %v", name, err)
	}
	old := rows[0][0]
	if err := e.DB.Exec("SET GLOBAL " + name + " = " + value); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		v := old
		if _, err := strconv.Atoi(old); err != nil {
			v = "'" + old + "'"
		}
		if err := e.DB.Exec("SET GLOBAL " + name + " = " + v); err != nil {
			t.Errorf("restore %s: %v", name, err)
		}
	})
}

// Throttle is a TCP proxy in front of a server that passes the server's
// bytes on at most Rate bytes a second (the client's bytes unthrottled):
// it makes a large binlog transaction take long to stream.
type Throttle struct {
	Addr   string
	Rate   int
	ln     net.Listener
	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

// StartThrottle starts a proxy to target passing rate bytes a second.
func StartThrottle(t testing.TB, target string, rate int) *Throttle {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Throttle{Addr: ln.Addr().String(), Rate: rate, ln: ln}
	go p.serve(target)
	t.Cleanup(p.Close)
	return p
}

func (p *Throttle) serve(target string) {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			s.Close()
			return
		}
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(s, c); s.Close(); c.Close() }()
		go func() { p.slowCopy(c, s); s.Close(); c.Close() }()
	}
}

func (p *Throttle) slowCopy(dst io.Writer, src io.Reader) {
	buf := make([]byte, 16<<10)
	start, sent := time.Now(), 0
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
			sent += n
			due := start.Add(time.Duration(float64(sent) / float64(p.Rate) * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				time.Sleep(d)
			} else if d < -time.Second {
				start, sent = time.Now(), 0 // idle: no burst credit beyond a second
			}
		}
		if err != nil {
			return
		}
	}
}

// Close stops the proxy and its connections.
func (p *Throttle) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	p.ln.Close()
	for _, c := range p.conns {
		c.Close()
	}
}

// SetStatementDML sets source.statement_dml (fail | warn: what a change of
// a non-captured table logged as a statement does) where the configuration
// has the setting, and reports whether it does (older versions never
// stopped on such changes). v "" leaves the value as it is.
func SetStatementDML(cfg *config.Config, v string) bool {
	f := reflect.ValueOf(&cfg.Source).Elem().FieldByName("StatementDML")
	if !f.IsValid() || f.Kind() != reflect.String {
		return false
	}
	if v != "" {
		f.SetString(v)
	}
	return true
}

// GTIDSetWith returns set (the server's notation) with gtid added.
func GTIDSetWith(t testing.TB, flavor, set, gtid string) string {
	t.Helper()
	s, err := binlog.ParseSet(flavor, set)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(gtid); err != nil {
		t.Fatal(err)
	}
	return s.String()
}
