package binlog

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/cespare/xxhash/v2"
	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// The digest of a transaction's captured rows: what package source reads
// again from another host to prove that the host holds the transaction the
// relay last published (a GTID alone cannot: independent MariaDB servers
// all write 0-1-N). It covers what a replica re-logs unchanged and nothing
// it may log otherwise: the tables' names and the values of each INSERT's
// row as decoded, in binlog order; never an UPDATE's or DELETE's images
// (a replica logs them with its own binlog_row_image: a DELETE a session
// logged MINIMAL, the primary key alone, is whole rows on a FULL replica,
// and the relay publishes only INSERTs, whose images it requires whole:
// what a partial INSERT image holds is not digested either),
// never the events' bytes (positions, checksums, table ids, how rows are split into
// events and, on MariaDB, compression differ on a replica), never column
// names (binlog_row_metadata may differ) and never signedness (NO_LOG
// leaves it to the schema tracker, which a second reading has not got): an
// integer counts by its bits at the column type's width, the same whether
// it was decoded signed or UNSIGNED. Table names count in lower case.
//
// Both the Reader (for each commit, Event.Digest) and Dump.Digest (one
// transaction, from another host) compute it with the same decoder
// (rowsDecoder), so a host holding the same transaction gives the same
// digest. DigestScheme names this definition: change what a digest covers
// or how a value is encoded, and change the scheme, so that a digest
// written by an older build is not compared with one computed otherwise
// (package source then proves nothing rather than refusing a replica).

// DigestScheme prefixes every TxDigest.Sum this build computes. The hash
// is xxHash64: the reader digests every captured row, and SHA-256 took
// three times as long per outbox row (BenchmarkDigestOutboxRow), a sixth of
// the relay's CPU per row in bulk catch-up. What the digest guards against
// is an accident (another server's rows under the same GTID), not a forger,
// who would have to write to the source's own hosts; 64 bits make an
// accidental match a 2^-64 chance.
const DigestScheme = "rows-xxh64-v2"

// TxDigest is the digest of the rows of captured tables of one transaction.
type TxDigest struct {
	// Tables are the captured tables that have inserted rows in it
	// (db.table in lower case, in the order of their first rows).
	Tables []string
	// Rows counts the inserted rows.
	Rows int
	// Sum is DigestScheme, ":" and the hex hash of the canonical rows.
	Sum string
}

// rowsDigest accumulates the TxDigest of the group gtid.
type rowsDigest struct {
	gtid   string
	h      *xxhash.Digest
	tables []string
	rows   int
	buf    []byte
	// last is the Tables of the last sum, handed on again while a
	// transaction has the same tables (the one-row shape: every one).
	last []string
	// names: the name (lower case) of the table maps met, by table map:
	// the stream's parser hands the same TableMapEvent while a table's
	// table map repeats (hotparse.go). Reset when it grows past a bound.
	names map[*replication.TableMapEvent]string
	// lastTM and lastName: the table map named last (a stream of one-row
	// transactions digests one table).
	lastTM   *replication.TableMapEvent
	lastName string
}

// name is tm's db.table in lower case.
func (d *rowsDigest) name(tm *replication.TableMapEvent) string {
	if tm == d.lastTM {
		return d.lastName
	}
	n, ok := d.names[tm]
	if !ok {
		n = d.newName(tm)
	}
	d.lastTM, d.lastName = tm, n
	return n
}

// newName is name of a table map not met before.
func (d *rowsDigest) newName(tm *replication.TableMapEvent) string {
	// In lower case: a replica whose lower_case_table_names differs may log
	// the names in another case.
	n := strings.ToLower(string(tm.Schema) + "." + string(tm.Table))
	if d.names == nil || len(d.names) >= maxMappedTables {
		d.names = map[*replication.TableMapEvent]string{}
	}
	d.names[tm] = n
	return n
}

// reset starts the digest of the group gtid.
func (d *rowsDigest) reset(gtid string) {
	if d.h == nil {
		d.h = xxhash.New()
	}
	d.h.Reset()
	d.gtid, d.tables, d.rows = gtid, d.tables[:0], 0
}

// add adds the rows of one rows event of table tm to the digest of the
// group gtid, starting it when gtid is another group's: an INSERT's rows
// only (op), nothing of other operations.
func (d *rowsDigest) add(gtid string, tm *replication.TableMapEvent, op Op, rows [][]any) {
	if op != OpInsert {
		return
	}
	if d.gtid != gtid || d.h == nil {
		d.reset(gtid)
	}
	name := d.name(tm)
	if !slices.Contains(d.tables, name) {
		d.tables = append(d.tables, name)
	}
	for _, row := range rows {
		b := append(d.buf[:0], byte(op))
		b = binary.AppendUvarint(b, uint64(len(name)))
		b = append(b, name...)
		b = binary.AppendUvarint(b, uint64(len(row)))
		for i, v := range row {
			var tp byte
			if i < len(tm.ColumnType) {
				tp = tm.ColumnType[i]
			}
			b = appendValue(b, tp, v)
		}
		d.h.Write(b)
		d.buf = b
		d.rows++
	}
}

// sum is the digest of the group gtid; nil when it has no captured rows.
func (d *rowsDigest) sum(gtid string) *TxDigest {
	if d.gtid != gtid || d.rows == 0 {
		return nil
	}
	if !slices.Equal(d.last, d.tables) {
		d.last = slices.Clone(d.tables)
	}
	// The digest and its Sum's bytes in one allocation (one per
	// transaction with captured rows).
	box := new(digestBox)
	sum := strconv.AppendUint(append(append(box.sum[:0], DigestScheme...), ':'), d.h.Sum64(), 16)
	box.d = TxDigest{Tables: d.last, Rows: d.rows, Sum: unsafe.String(&sum[0], len(sum))}
	return &box.d
}

// digestBox is a TxDigest with the bytes of its Sum, never written after
// sum has made them.
type digestBox struct {
	d   TxDigest
	sum [len(DigestScheme) + 1 + 16]byte
}

func appendBytes(b, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// Value tags of the canonical encoding.
const (
	tagNull   = 'N'
	tagInt    = 'I' // the value's bits at the column's width
	tagFloat  = 'F'
	tagBytes  = 'B' // strings and byte slices alike
	tagOther  = 'O'
	tagDouble = 'D'
)

// appendValue appends v, a value of a column of binlog type tp, in the
// canonical encoding.
func appendValue(b []byte, tp byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return append(b, tagNull)
	case string:
		b = append(b, tagBytes)
		b = binary.AppendUvarint(b, uint64(len(x)))
		return append(b, x...)
	case []byte:
		return appendBytes(append(b, tagBytes), x)
	case float32:
		return binary.LittleEndian.AppendUint32(append(b, tagFloat), math.Float32bits(x))
	case float64:
		return binary.LittleEndian.AppendUint64(append(b, tagDouble), math.Float64bits(x))
	}
	if bits, ok := integerBits(v); ok {
		return binary.AppendUvarint(append(b, tagInt), bits&widthMask(tp))
	}
	return appendBytes(append(b, tagOther), fmt.Appendf(nil, "%T:%v", v, v))
}

// integerBits is an integer value's two's complement bits.
func integerBits(v any) (uint64, bool) {
	switch x := v.(type) {
	case int8:
		return uint64(x), true
	case int16:
		return uint64(x), true
	case int32:
		return uint64(x), true
	case int64:
		return uint64(x), true
	case int:
		return uint64(x), true
	case uint8:
		return uint64(x), true
	case uint16:
		return uint64(x), true
	case uint32:
		return uint64(x), true
	case uint64:
		return x, true
	case uint:
		return uint64(x), true
	}
	return 0, false
}

// widthMask keeps the bits of an integer column of binlog type tp: a value
// decoded signed (sign-extended) and the same value decoded UNSIGNED then
// agree.
func widthMask(tp byte) uint64 {
	switch tp {
	case mysql.MYSQL_TYPE_TINY:
		return 1<<8 - 1
	case mysql.MYSQL_TYPE_SHORT:
		return 1<<16 - 1
	case mysql.MYSQL_TYPE_INT24:
		return 1<<24 - 1
	case mysql.MYSQL_TYPE_LONG:
		return 1<<32 - 1
	}
	return math.MaxUint64
}
