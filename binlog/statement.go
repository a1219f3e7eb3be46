package binlog

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/pingcap/tidb/pkg/parser"
	"github.com/pingcap/tidb/pkg/parser/ast"
)

// parseXID reads an XA xid as the server logs it after XA START / END /
// COMMIT / ROLLBACK: gtrid [, bqual [, formatID]], each string either
// 'text' or X'hex'. It returns the xid in one canonical form,
// "hex(gtrid),hex(bqual),formatID", the same for every spelling.
func parseXID(s string) (string, error) {
	xid, rest, err := readXID(s)
	if err != nil {
		return "", err
	}
	if strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), ";")) != "" {
		return "", fmt.Errorf("read xid: %d bytes of something else after it", len(rest)) // never quoted: it may hold a password
	}
	return xid, nil
}

// xaEnd reads the xid of XA COMMIT / XA ROLLBACK and whether ONE PHASE
// follows.
func xaEnd(s string) (xid string, onePhase bool, err error) {
	xid, rest, err := readXID(s)
	if err != nil {
		return "", false, err
	}
	rest = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), ";"))
	switch {
	case rest == "":
		return xid, false, nil
	case len(strings.Fields(rest)) == 2 && hasPrefixFold(rest, "ONE PHASE"):
		return xid, true, nil
	}
	return "", false, fmt.Errorf("read xid: %d bytes of something else after it", len(rest))
}

func readXID(s string) (xid, rest string, err error) {
	gtrid, s, err := xidString(s)
	if err != nil {
		return "", "", err
	}
	var bqual []byte
	format := int64(1)
	s = strings.TrimLeft(s, " \t\r\n")
	if strings.HasPrefix(s, ",") {
		if bqual, s, err = xidString(s[1:]); err != nil {
			return "", "", err
		}
		s = strings.TrimLeft(s, " \t\r\n")
		if strings.HasPrefix(s, ",") {
			s = strings.TrimLeft(s[1:], " \t\r\n")
			end := 0
			for end < len(s) && (s[end] >= '0' && s[end] <= '9' || end == 0 && s[end] == '-') {
				end++
			}
			if format, err = strconv.ParseInt(s[:end], 10, 64); err != nil {
				return "", "", fmt.Errorf("read xid format id: %w", err)
			}
			s = s[end:]
		}
	}
	return canonicalXID(format, gtrid, bqual), s, nil
}

func canonicalXID(format int64, gtrid, bqual []byte) string {
	return hex.EncodeToString(gtrid) + "," + hex.EncodeToString(bqual) + "," + strconv.FormatInt(format, 10)
}

// xidString reads one 'text' or X'hex' literal.
func xidString(s string) ([]byte, string, error) {
	s = strings.TrimLeft(s, " \t\r\n")
	if len(s) > 1 && (s[0] == 'X' || s[0] == 'x') && s[1] == '\'' {
		end := strings.IndexByte(s[2:], '\'')
		if end < 0 {
			return nil, "", errors.New("read xid: unterminated hex string")
		}
		b, err := hex.DecodeString(s[2 : 2+end])
		if err != nil {
			return nil, "", fmt.Errorf("read xid: %w", err)
		}
		return b, s[3+end:], nil
	}
	if len(s) > 1 && (s[0] == '0') && (s[1] == 'x') {
		end := 2
		for end < len(s) && isIdentByte(s[end]) {
			end++
		}
		b, err := hex.DecodeString(s[2:end])
		if err != nil {
			return nil, "", fmt.Errorf("read xid: %w", err)
		}
		return b, s[end:], nil
	}
	if len(s) == 0 || (s[0] != '\'' && s[0] != '"') {
		return nil, "", fmt.Errorf("read xid: no string %d bytes before the end", len(s)) // never quoted: it may hold a password
	}
	quote := s[0]
	var out []byte
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s):
			i++
			out = append(out, s[i])
		case c == quote && i+1 < len(s) && s[i+1] == quote:
			i++
			out = append(out, quote)
		case c == quote:
			return out, s[i+1:], nil
		default:
			out = append(out, c)
		}
	}
	return nil, "", errors.New("read xid: unterminated string")
}

// decodeXAPrepare reads XA_PREPARE_LOG_EVENT's body: one_phase (1 byte),
// formatID, gtrid length, bqual length (4 bytes each, little endian), then
// gtrid and bqual. The layout is the same in MySQL and MariaDB.
func decodeXAPrepare(data []byte) (onePhase bool, xid string, err error) {
	if len(data) < 13 {
		return false, "", fmt.Errorf("%d bytes, need at least 13", len(data))
	}
	format := int64(int32(binary.LittleEndian.Uint32(data[1:])))
	gl, bl := binary.LittleEndian.Uint32(data[5:]), binary.LittleEndian.Uint32(data[9:])
	if gl > 64 || bl > 64 || uint64(13+gl+bl) > uint64(len(data)) {
		return false, "", fmt.Errorf("xid lengths %d and %d do not fit %d bytes", gl, bl, len(data))
	}
	body := data[13:]
	return data[0] != 0, canonicalXID(format, body[:gl], body[gl:gl+bl]), nil
}

// dmlTargets parses a statement logged as such and, when it changes rows
// (INSERT, REPLACE, UPDATE, DELETE, LOAD DATA), returns every table named
// in its target clause as db.table (defaultDB when unqualified). Multi-table
// UPDATE and DELETE name all their joined tables: a statement that joins a
// captured table counts as changing it.
func dmlTargets(defaultDB, q string) (tables []string, dml bool, err error) {
	stmts, _, err := parser.New().Parse(q, "", "")
	if err != nil {
		return nil, false, err
	}
	name := func(tn *ast.TableName) string {
		db := tn.Schema.O
		if db == "" {
			db = defaultDB
		}
		return db + "." + tn.Name.O
	}
	collect := func(n ast.Node) {
		if n == nil {
			return
		}
		v := &tableNames{}
		n.Accept(v)
		for _, tn := range v.names {
			tables = append(tables, name(tn))
		}
	}
	for _, st := range stmts {
		switch s := st.(type) {
		case *ast.InsertStmt:
			dml = true
			collect(s.Table)
		case *ast.UpdateStmt:
			dml = true
			collect(s.TableRefs)
		case *ast.DeleteStmt:
			dml = true
			collect(s.TableRefs)
			if s.Tables != nil {
				collect(s.Tables)
			}
		case *ast.LoadDataStmt:
			dml = true
			if s.Table != nil {
				tables = append(tables, name(s.Table))
			}
		case *ast.SelectStmt, *ast.SetOprStmt, *ast.DoStmt, *ast.CallStmt:
			// Logged inside a transaction, these call stored functions or
			// procedures that change rows: which tables, the log does not say.
			dml = true
		}
	}
	return tables, dml, nil
}

// tableNames collects the table names of a node, not descending into
// subqueries (those are read, not changed).
type tableNames struct{ names []*ast.TableName }

func (v *tableNames) Enter(n ast.Node) (ast.Node, bool) {
	switch x := n.(type) {
	case *ast.SubqueryExpr, *ast.SelectStmt, *ast.SetOprStmt:
		return n, true
	case *ast.TableName:
		v.names = append(v.names, x)
	}
	return n, false
}

func (v *tableNames) Leave(n ast.Node) (ast.Node, bool) { return n, true }

// ParseXID is the canonical form of an XA xid (see parseXID): the form
// Event.XID has.
func ParseXID(s string) (string, error) { return parseXID(s) }

// ParseXAPrepare reads the xid of "XA PREPARE xid" (the Info of an
// XA_prepare event in SHOW BINLOG EVENTS) in Event.XID's canonical form;
// ok is false for any other text.
func ParseXAPrepare(info string) (xid string, ok bool) {
	if !hasPrefixFold(info, "XA PREPARE") {
		return "", false
	}
	xid, err := parseXID(info[len("XA PREPARE"):])
	return xid, err == nil
}
