package audit

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
)

// Which rows of the window the committed checkpoint covers, when it does
// not cover them all. A row does not carry the GTID of its transaction, but
// the binlog after the checkpoint holds every transaction the checkpoint
// does not cover, with its rows: every row read was committed before the
// executed set read after the rows, so it is covered or its INSERT is in
// the binlog between the checkpoint and that set. Rows are told apart by
// their table and primary key, read by the SELECT and from the binlog's
// row image alike: an outbox row is written once and never changed, and a
// table holds one row per key, so the row the SELECT returned for a key
// whose INSERT is past the checkpoint is that INSERT's row. A key rendered
// differently on the two sides (a FLOAT or temporal key) matches nothing:
// its row counts as covered, a false alarm when it is pending, never a
// hidden loss. Without a primary key a table's rows cannot be told apart:
// they all count as covered.

// appendKey appends the key of a row of table with primary key values
// parts to buf: the table, then each part with its length (nil, a NULL,
// apart from the empty string).
func appendKey(buf []byte, table string, parts ...[]byte) []byte {
	buf = append(buf, table...)
	buf = append(buf, 0)
	for _, p := range parts {
		if p == nil {
			buf = binary.AppendUvarint(buf, 0)
			continue
		}
		buf = binary.AppendUvarint(buf, uint64(len(p))+1)
		buf = append(buf, p...)
	}
	return buf
}

// valueBytes renders a value of a binlog row image as the SELECT's text
// protocol and fieldBytes render the column: strings and bytes as they
// are, integers in decimal.
func valueBytes(v any) []byte {
	switch t := v.(type) {
	case nil:
		return nil
	case []byte:
		return t
	case string:
		return []byte(t)
	}
	return []byte(fmt.Sprint(v))
}

// rowKeys maps each row of the window, by its key, to its event id.
type rowKeys struct {
	ids   map[string]string
	arena arena
}

func newRowKeys() *rowKeys { return &rowKeys{ids: map[string]string{}} }

// add notes a row: key (appendKey) and event id, both copied.
func (k *rowKeys) add(key, id []byte) {
	if _, ok := k.ids[string(key)]; ok {
		return // one row per key: the SELECT returns it once
	}
	k.ids[internIn(&k.arena, key)] = internIn(&k.arena, id)
}

// has reports whether key is a row of the window.
func (k *rowKeys) has(key string) bool {
	_, ok := k.ids[key]
	return ok
}

// beyond returns, by event id, the rows of the window among past (the keys
// of rows past the checkpoint, with their commit times).
func (k *rowKeys) beyond(past map[string]time.Time) map[string]Beyond {
	out := map[string]Beyond{}
	for key, at := range past {
		id, ok := k.ids[key]
		if !ok {
			continue // a row outside the window, or deleted since
		}
		b := out[id]
		b.Rows++
		if b.Oldest.IsZero() || at.Before(b.Oldest) {
			b.Oldest = at
		}
		out[id] = b
	}
	return out
}

// pastRow is an INSERTed row of a transaction being read: its key, "" for
// a row not kept (of another table, outside the window, without a key).
type pastRow struct {
	key string
}

// past collects, from the binlog events after a checkpoint, the keys of
// the rows INSERTed into captured tables by transactions the checkpoint
// does not cover, as the relay would publish them: a transaction is covered
// when its GTID is in the checkpoint's set (an XA transaction's rows are
// those of its XA COMMIT, covered when that GTID is), and the first
// Partial.Rows rows of the checkpoint's partial transaction are. It stops
// (done) at the end of a transaction whose GTID set contains head, or at a heartbeat
// (the server had nothing more). Pure: events in, keys out.
type past struct {
	flavor   string
	covered  mysql.GTIDSet
	partial  checkpoint.Partial
	head     mysql.GTIDSet
	pks      map[string][]string   // "db.table" -> primary key columns; none: the table's rows are not keyed
	want     func(key string) bool // the keys kept (nil: all)
	curGTID  string
	curRows  int64
	cur      []pastRow
	held     map[string][]pastRow // an XA transaction's rows, by XID
	keys     map[string]time.Time
	unkeyed  map[string]bool // tables whose rows had no key
	done     bool
	scratch  []byte
	scratchP [][]byte
}

func newPast(cp *checkpoint.Checkpoint, head mysql.GTIDSet, pks map[string][]string, want func(string) bool) (*past, error) {
	covered, err := binlog.ParseSet(cp.Flavor, cp.GTIDSet)
	if err != nil {
		return nil, fmt.Errorf("checkpoint position: %w", err)
	}
	p := &past{flavor: cp.Flavor, covered: covered, head: head, pks: pks, want: want, held: map[string][]pastRow{},
		keys: map[string]time.Time{}, unkeyed: map[string]bool{}}
	if cp.Partial != nil {
		p.partial = *cp.Partial
	}
	return p, nil
}

// add takes the next event in binlog order.
func (p *past) add(ev *binlog.Event) error {
	if p.done {
		return nil
	}
	switch ev.Kind {
	case binlog.KindRows:
		if ev.GTID != p.curGTID {
			p.curGTID, p.curRows, p.cur = ev.GTID, 0, p.cur[:0]
		}
		if ev.Op != binlog.OpInsert {
			return nil // only INSERTs are published
		}
		rows, at := ev.Rows, []int(nil)
		if ev.Image != nil { // a partial image: its rows hold the columns present only
			rows, at = ev.Image.Rows, ev.Image.Columns
		}
		for _, values := range rows {
			key, ok := p.key(ev.Table, at, values)
			if !ok || p.want != nil && !p.want(key) {
				key = ""
			}
			if ev.XID != "" {
				// Counted at its XA COMMIT, whose rows they are (a
				// checkpoint's part of it counts them there).
				p.held[ev.XID] = append(p.held[ev.XID], pastRow{key})
				continue
			}
			p.curRows++
			if p.partial.GTID == ev.GTID && p.curRows <= p.partial.Rows {
				continue // published before: the checkpoint's part of it
			}
			if key != "" {
				p.cur = append(p.cur, pastRow{key})
			}
		}
	case binlog.KindCommit:
		rows := p.cur
		if ev.XID != "" {
			held := p.held[ev.XID]
			if p.partial.GTID == ev.GTID {
				// Published as the commit's rows, in parts: the
				// checkpoint's part of them is covered.
				held = held[min(int64(len(held)), p.partial.Rows):]
			}
			for _, r := range held {
				if r.key != "" {
					rows = append(rows, r)
				}
			}
			delete(p.held, ev.XID)
		}
		if len(rows) > 0 {
			one, err := binlog.ParseSet(p.flavor, ev.GTID)
			if err != nil {
				return fmt.Errorf("transaction %s: %w", ev.GTID, err)
			}
			if !p.covered.Contain(one) {
				for _, r := range rows {
					p.keys[r.key] = ev.Time
				}
			}
		}
		p.curGTID, p.curRows, p.cur = "", 0, p.cur[:0]
	case binlog.KindRollback:
		delete(p.held, ev.XID)
	case binlog.KindHeartbeat:
		p.done = true // everything the server had, head included, was sent
	}
	if ev.Kind != binlog.KindRows && ev.Set != nil && ev.Set.Contain(p.head) {
		p.done = true // the end of the last transaction of head
	}
	return nil
}

// key renders the key of a row of t (appendKey); ok is false for a table
// without a primary key, or a row image without one of its columns. at are
// the columns values holds, for a partial image (binlog.PartialImage: the
// relay stops at such a row, whose transaction is past the checkpoint;
// binlog_row_image MINIMAL logs the primary key); nil: every column.
func (p *past) key(t *binlog.Table, at []int, values []any) (string, bool) {
	name := t.String()
	pk := p.pks[name]
	if len(pk) == 0 {
		p.unkeyed[name] = true
		return "", false
	}
	p.scratchP = p.scratchP[:0]
	for _, col := range pk {
		i := columnIndex(t.Columns, col)
		if at != nil && i >= 0 {
			i = slices.Index(at, i)
		}
		if i < 0 || i >= len(values) {
			p.unkeyed[name] = true
			return "", false
		}
		p.scratchP = append(p.scratchP, valueBytes(values[i]))
	}
	p.scratch = appendKey(p.scratch[:0], name, p.scratchP...)
	return string(p.scratch), true
}

// columnIndex finds col in cols as the server compares column names:
// without regard to case.
func columnIndex(cols []string, col string) int {
	for i, c := range cols {
		if strings.EqualFold(c, col) {
			return i
		}
	}
	return -1
}
