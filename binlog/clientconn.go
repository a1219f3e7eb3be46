package binlog

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// The boundary between the relay and go-mysql's client on a source
// connection.
//
// go-mysql (v1.16.0) indexes the server's answers without checking their
// length: a short OK packet (one 0x00 byte) answering a query, an EOF or
// ERR packet cut short, a column definition without its fixed fields, a
// length-encoded integer running past its packet all end in an index out
// of range. Such a panic runs in the caller's goroutine (`check`, `run`'s
// inspection and monitors, prune, replay, audit): uncaught, a hostile or
// impersonated server crashes the process with one packet. So no package
// of the relay calls go-mysql's client on a source connection directly:
// Connect returns a Conn, whose every call that reads the server's answer
// turns a panic of go-mysql into ErrBrokenAnswer (and closes the
// connection, whose state is then unknown). What a panic cannot be caught
// at, an allocation the server sizes (a column count of 2^34 is a fatal
// "out of memory", not a panic), the login guard refuses before go-mysql
// reads it (answerbound.go).
//
// The replication connections' go-mysql calls are bounded the same way:
// StartSyncGTID by login (loginauth.go), the syncer's Close (which dials
// again to KILL the replication connection, and logs in there) by
// closeSyncer; go-mysql's own reading goroutine recovers by itself.

// ErrBrokenAnswer: the source's answer to a query broke the MySQL client
// library (a packet it cannot read). The connection is closed.
var ErrBrokenAnswer = errors.New("source answer the MySQL client library cannot read")

// Conn is a client connection to a source host (Connect): go-mysql's,
// whose calls end in an error where go-mysql would panic on the server's
// answer. Close it.
type Conn struct {
	c     *client.Conn
	addr  string
	guard *loginGuard
}

// do runs fn, a go-mysql call on c that reads the server's answer: a panic
// of go-mysql becomes ErrBrokenAnswer and closes the connection; an error
// is the guard's refusal when the guard refused (go-mysql words it as its
// own).
func (c *Conn) do(what string, fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			_ = c.c.Close()
			err = fmt.Errorf("%w: %s on %s: %v", ErrBrokenAnswer, what, c.addr, p)
		}
	}()
	if err := fn(); err != nil {
		return c.guard.or(err)
	}
	return nil
}

// Execute runs a statement (with args, as a prepared statement) and
// returns its whole result.
func (c *Conn) Execute(q string, args ...any) (res *mysql.Result, err error) {
	err = c.do("execute "+clipQuery(q), func() error {
		res, err = c.c.Execute(q, args...)
		return err
	})
	return res, err
}

// Begin starts a transaction.
func (c *Conn) Begin() error { return c.do("begin", c.c.Begin) }

// Commit commits the transaction.
func (c *Conn) Commit() error { return c.do("commit", c.c.Commit) }

// Rollback rolls the transaction back.
func (c *Conn) Rollback() error { return c.do("rollback", c.c.Rollback) }

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }

// Prepare prepares q.
func (c *Conn) Prepare(q string) (st *Stmt, err error) {
	var s *client.Stmt
	err = c.do("prepare "+clipQuery(q), func() error {
		s, err = c.c.Prepare(q)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &Stmt{s: s, conn: c, q: q}, nil
}

// Stmt is a prepared statement of a Conn.
type Stmt struct {
	s    *client.Stmt
	conn *Conn
	q    string
}

// ExecuteSelectStreaming runs the statement with args and hands each row
// to perRow as go-mysql reads it (the rows are not held: the answer may be
// as large as the table). A panic of perRow or perResult is the caller's
// own and goes on as a panic.
func (s *Stmt) ExecuteSelectStreaming(res *mysql.Result, perRow client.SelectPerRowCallback, perResult client.SelectPerResultCallback, args ...any) error {
	own := &callerPanic{}
	wrapRow := func(row []mysql.FieldValue) error { return own.catch(func() error { return perRow(row) }) }
	var wrapRes client.SelectPerResultCallback
	if perResult != nil {
		wrapRes = func(r *mysql.Result) error { return own.catch(func() error { return perResult(r) }) }
	}
	err := s.conn.do("execute "+clipQuery(s.q), func() error {
		return streamed(s.conn.c, func() error { return s.s.ExecuteSelectStreaming(res, wrapRow, wrapRes, args...) })
	})
	if own.caught {
		panic(own.value)
	}
	return err
}

// Close closes the statement.
func (s *Stmt) Close() error {
	return s.conn.do("close statement", s.s.Close)
}

// callerPanic carries a panic of the caller's callback through go-mysql's
// frames, so that the recover at the boundary does not take it for the
// server's.
type callerPanic struct {
	caught bool
	value  any
}

var errCallerPanicked = errors.New("the caller's callback panicked")

func (p *callerPanic) catch(fn func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			p.caught, p.value, err = true, v, errCallerPanicked
		}
	}()
	return fn()
}

// clipQuery is q for a message: its first 60 bytes.
func clipQuery(q string) string {
	if len(q) > 60 {
		return fmt.Sprintf("%q...", q[:60])
	}
	return fmt.Sprintf("%q", q)
}

// closeSyncer closes s. go-mysql's Close dials a connection to KILL the
// replication connection and logs in on it: a panic of go-mysql on that
// connection's packets (a greeting it indexes past, a short OK to the
// KILL) closes lg's connections, and is returned, instead of ending the
// process.
func closeSyncer(lg *loginGuard, s *replication.BinlogSyncer) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: close the replication connection to %s (the connection to KILL it): %v", ErrBrokenAnswer, lg.addr, p)
			lg.fail(err)
		}
	}()
	s.Close()
	return nil
}

// logClose closes s (closeSyncer), logging what broke.
func logClose(lg *loginGuard, s *replication.BinlogSyncer, logger *slog.Logger) {
	if err := closeSyncer(lg, s); err != nil && logger != nil {
		logger.Warn("closing the replication connection", slog.Any("error", err))
	}
}
