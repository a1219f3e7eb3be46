package binlog

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/go-mysql-org/go-mysql/client"
)

// The bound of what one answer to a query may cost in memory.
//
// go-mysql sizes what it allocates for a result set from the server's
// word: the column count (a length-encoded integer, up to 2^64) becomes a
// slice of that many column definitions before any arrives (a 9-byte
// answer declaring 2^34 columns ended the process with a fatal "out of
// memory", which no recover catches), and every row packet becomes one
// value per column, whatever the packet holds (a row packet of one byte
// parses as that many NULLs: 4,096 columns make 160 KB of a 5-byte
// packet, and go-mysql keeps every row of the answer). The packet bound
// (loginguard.go) counts bytes, not what they decode to.
//
// So the guard reads the first packet of each answer (after each command
// the client writes): when it is a column count, the answer may hold at
// most answerBytes of go-mysql's decoded form, reckoned as fieldBytes per
// column definition and cellBytes per value of each row packet read so
// far (every row at once; one row at a time for a streamed answer, which
// go-mysql does not keep). The connection is closed when the answer
// passes it (ErrAnswerBound): a MySQL server answering the relay's
// queries never comes near it (100,000 rows of 16 columns are 64 MB), and
// go-mysql never allocates for more.

// ErrAnswerBound: the source's answer to a query would decode to more
// than the relay allows (answerBytes).
var ErrAnswerBound = errors.New("source answer over the relay's bound")

const (
	// fieldBytes and cellBytes are what go-mysql holds for a column
	// definition and for one value of a row (a mysql.FieldValue, its row
	// slices), rounded up.
	fieldBytes = 256
	cellBytes  = 48
)

// answerBytes bounds the decoded form of one answer: twice the packet
// bound the memory budget allows (65 MiB in the shipped 256 MiB), whatever
// source.max_packet_bytes says (rows are many small packets).
func (cfg Config) answerBytes() int64 {
	n, _ := cfg.budgetBound()
	return 2 * n
}

// answerState is the guard's reading of the answer being read.
type answerState struct {
	cmd     uint64 // the guard's command count when it began
	begun   bool
	packets int64  // packets read after its first
	columns int64  // the column count its first packet declared; 0: none
	peek    []byte // the first packet, while it arrives (a column count is at most 9 bytes)
	peekN   int    // bytes of the first packet still to peek
}

// answerPacket notes the start of a logical packet of length bytes.
func (s *guardState) answerPacket(length int64) error {
	a := &s.ans
	if c := s.cmds.Load(); !a.begun || c != a.cmd {
		*a = answerState{cmd: c, begun: true}
		switch length {
		case 1, 3, 4, 9: // a length-encoded integer alone: a column count
			a.peekN = int(length)
		}
		return nil
	}
	a.packets++
	return s.answerCost()
}

// answerPeek takes the first packet's bytes b as they arrive.
func (s *guardState) answerPeek(b []byte) error {
	a := &s.ans
	k := min(a.peekN, len(b))
	a.peek = append(a.peek, b[:k]...)
	if a.peekN -= k; a.peekN > 0 {
		return nil
	}
	p := a.peek
	a.peek = nil
	var n uint64
	switch {
	case len(p) == 1 && p[0] < 0xfb:
		n = uint64(p[0])
	case len(p) == 3 && p[0] == 0xfc:
		n = uint64(binary.LittleEndian.Uint16(p[1:]))
	case len(p) == 4 && p[0] == 0xfd:
		n = uint64(p[1]) | uint64(p[2])<<8 | uint64(p[3])<<16
	case len(p) == 9 && p[0] == 0xfe:
		n = binary.LittleEndian.Uint64(p[1:])
	default:
		return nil // an OK, ERR or LOCAL INFILE packet: no result set
	}
	if bound := s.cfg.answerBytes(); n > uint64(bound/fieldBytes) {
		return s.answerTooLarge(fmt.Sprintf("declares %d columns", n), bound)
	}
	a.columns = int64(n)
	return s.answerCost()
}

// answerCost refuses the answer when what go-mysql holds of it passes the
// bound.
func (s *guardState) answerCost() error {
	a := &s.ans
	if a.columns == 0 {
		return nil
	}
	rows := a.packets
	if s.streamed.Load() {
		rows = min(rows, 1)
	}
	bound := s.cfg.answerBytes()
	if cost := a.columns * (fieldBytes + cellBytes*rows); cost > bound {
		return s.answerTooLarge(fmt.Sprintf("of %d columns reached %d packets", a.columns, a.packets+1), bound)
	}
	return nil
}

func (s *guardState) answerTooLarge(what string, bound int64) error {
	return fmt.Errorf("%w: read from %s: the server's answer to a query %s, which the MySQL client library would decode to more than %d bytes "+
		"(twice the packet bound of the memory budget): no MySQL server answers the relay's queries so; the connection is closed",
		ErrAnswerBound, s.addr, what, bound)
}

// streamed runs fn, a call on conn that hands each row of its answer on
// as it reads it (go-mysql does not keep them): the bound counts one row
// at a time.
func streamed(conn *client.Conn, fn func() error) error {
	g, _ := conn.Conn.Conn.(*guardConn)
	if g == nil {
		return fn()
	}
	g.st.streamed.Store(true)
	defer g.st.streamed.Store(false)
	return fn()
}
