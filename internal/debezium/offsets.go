package debezium

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Entry is one stored offset as Kafka Connect keeps it: the serialized
// source partition and the serialized offset (JSON, Connect's internal
// converter), Value nil when the offset was deleted (a null record or map
// value).
type Entry struct {
	Key   []byte
	Value []byte
}

// Offset is a Debezium MySQL (or MariaDB) connector's committed offset: its
// source partition (connector name and topic.prefix) and the offset's
// fields (BinlogOffsetContext).
type Offset struct {
	Connector string `json:"connector"`
	Server    string `json:"server"`
	// GTIDs is the GTID set completed before the transaction the offset is
	// in, or including it at a transaction boundary; "" when the connector
	// stored none (GTID mode off, or a MariaDB the MySQL connector reads).
	GTIDs string `json:"gtids,omitempty"`
	// File and Pos: the binlog position a restart reads from (the
	// transaction's start, or after it at a boundary).
	File string `json:"file"`
	Pos  int64  `json:"pos"`
	// Event: events of the transaction already handled, counted from its
	// start; Row: rows of the next event already emitted.
	Event int64 `json:"event,omitempty"`
	Row   int64 `json:"row,omitempty"`
	// ServerID is the server_id of the last event handled; TsSec its time.
	ServerID int64 `json:"server_id,omitempty"`
	TsSec    int64 `json:"ts_sec,omitempty"`
	// Snapshot is the value of the offset's snapshot key: set while a
	// snapshot is in progress (not switchable). Incremental names the
	// incremental snapshot keys present.
	Snapshot    string   `json:"snapshot,omitempty"`
	Incremental []string `json:"incremental_snapshot,omitempty"`
	// Deleted: the newest record of the key is null (the offset was reset).
	Deleted bool `json:"deleted,omitempty"`
	// bad says why its value cannot be read (nil: it can); Select refuses
	// it once chosen.
	bad error
}

// InTransaction reports whether the offset is inside a transaction (some
// of its events or rows already emitted) rather than at a boundary.
func (o Offset) InTransaction() bool { return o.Event > 0 || o.Row > 0 }

// String is the offset's fields as an operator reads them.
func (o Offset) String() string {
	s := fmt.Sprintf("file %s pos %d", o.File, o.Pos)
	if o.GTIDs != "" {
		s += ", gtids " + o.GTIDs
	}
	if o.InTransaction() {
		s += fmt.Sprintf(", event %d, row %d", o.Event, o.Row)
	}
	return s
}

// Name is the source partition as an operator names it.
func (o Offset) Name() string { return fmt.Sprintf("connector %s (server %s)", o.Connector, o.Server) }

// ErrNoOffset: no stored offset matches; ErrAmbiguous: several do, and no
// flag chooses one. The commands exit 1 on both, listing what is stored.
var (
	ErrNoOffset  = errors.New("no Debezium connector offset")
	ErrAmbiguous = errors.New("several Debezium connector offsets")
	ErrOffset    = errors.New("bad Debezium offset")
)

// Stored is what a store holds: the binlog connectors' offsets, and the
// keys of other connectors' (which are not Debezium binlog connectors).
type Stored struct {
	Offsets []Offset
	Others  []string
	Where   string // the store, for messages: "topic connect-offsets on ...", "file ..."
}

// maxKeyBytes and maxValueBytes bound one entry: Debezium's are a few
// hundred bytes, a GTID set of many server_uuids a few kilobytes.
const (
	maxKeyBytes   = 64 << 10
	maxValueBytes = 1 << 20
)

// Decode decodes entries (one per key: the newest) into s. A key that is a
// Debezium source partition (["<connector>",{"server":"<prefix>"}]) whose
// value is a binlog offset (it has a binlog file) is an Offset, refused by
// Select once chosen when its value cannot be read; other keys, among them
// the offsets of Debezium's other connectors (Postgres, Oracle: the same
// partition, another offset), are listed as Others.
func Decode(entries []Entry, where string) (Stored, error) {
	s := Stored{Where: where}
	for _, e := range entries {
		conn, server, ok := partitionOf(e.Key)
		if !ok {
			s.Others = append(s.Others, clip(string(e.Key)))
			continue
		}
		o := Offset{Connector: conn, Server: server}
		if e.Value == nil {
			o.Deleted = true
		} else if err := o.decodeValue(e.Value); errors.Is(err, errNoBinlogFile) {
			s.Others = append(s.Others, clip(string(e.Key))+" (no binlog file: not a MySQL or MariaDB connector's)")
			continue
		} else if err != nil {
			o.bad = fmt.Errorf("%s: offset of %s: %w", where, o.Name(), err)
		}
		s.Offsets = append(s.Offsets, o)
	}
	sort.Slice(s.Offsets, func(i, j int) bool {
		a, b := s.Offsets[i], s.Offsets[j]
		return a.Connector < b.Connector || a.Connector == b.Connector && a.Server < b.Server
	})
	sort.Strings(s.Others)
	return s, nil
}

// partitionOf reads a Debezium binlog connector's source partition key.
func partitionOf(key []byte) (connector, server string, ok bool) {
	if len(key) > maxKeyBytes {
		return "", "", false
	}
	var parts []json.RawMessage
	if json.Unmarshal(key, &parts) != nil || len(parts) != 2 {
		return "", "", false
	}
	var part map[string]json.RawMessage
	if json.Unmarshal(parts[0], &connector) != nil || json.Unmarshal(parts[1], &part) != nil || len(part) != 1 {
		return "", "", false
	}
	if json.Unmarshal(part["server"], &server) != nil || server == "" || connector == "" {
		return "", "", false
	}
	return connector, server, true
}

// decodeValue reads the offset's JSON object: the fields it knows must have
// their types; others are kept out (transaction metadata and the like).
func (o *Offset) decodeValue(v []byte) error {
	if len(v) > maxValueBytes {
		return fmt.Errorf("%w: %d bytes", ErrOffset, len(v))
	}
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil || m == nil {
		return fmt.Errorf("%w: not a JSON object: %.80q", ErrOffset, v)
	}
	if dec.More() {
		return fmt.Errorf("%w: more after the JSON object", ErrOffset)
	}
	str := func(k string, dst *string) error {
		switch x := m[k].(type) {
		case nil:
			return nil
		case string:
			*dst = x
			return nil
		}
		return fmt.Errorf("%w: %s is %v, want a string", ErrOffset, k, m[k])
	}
	num := func(k string, dst *int64) error {
		switch x := m[k].(type) {
		case nil:
			return nil
		case json.Number:
			n, err := x.Int64()
			if err == nil && n >= 0 {
				*dst = n
				return nil
			}
		}
		return fmt.Errorf("%w: %s is %v, want a whole number of 0 or more", ErrOffset, k, m[k])
	}
	for _, err := range []error{str("gtids", &o.GTIDs), str("file", &o.File), num("pos", &o.Pos), num("event", &o.Event),
		num("row", &o.Row), num("server_id", &o.ServerID), num("ts_sec", &o.TsSec)} {
		if err != nil {
			return err
		}
	}
	// Debezium removes line breaks from a long GTID set; so does this.
	o.GTIDs = strings.TrimSpace(strings.NewReplacer("\n", "", "\r", "").Replace(o.GTIDs))
	switch x := m["snapshot"].(type) {
	case nil:
	case bool:
		if x {
			o.Snapshot = "true"
		}
	case string:
		if !strings.EqualFold(x, "false") {
			o.Snapshot = x
		}
	default:
		o.Snapshot = fmt.Sprint(x)
	}
	for k := range m {
		if strings.HasPrefix(k, "incremental_snapshot") {
			o.Incremental = append(o.Incremental, k)
		}
	}
	slices.Sort(o.Incremental)
	if o.File == "" {
		return errNoBinlogFile
	}
	return nil
}

// errNoBinlogFile: the offset has no binlog file, as the offsets of
// Debezium's connectors of other databases: not a binlog connector's.
var errNoBinlogFile = fmt.Errorf("%w: no binlog file (not a MySQL or MariaDB connector's offset?)", ErrOffset)

// Select picks the offset of connector and server ("" matches any) among
// s's: exactly one must match, else an error listing what is stored.
func (s Stored) Select(connector, server string) (Offset, error) {
	var match []Offset
	for _, o := range s.Offsets {
		if (connector == "" || o.Connector == connector) && (server == "" || o.Server == server) {
			match = append(match, o)
		}
	}
	list := func(offs []Offset) string {
		var names []string
		for _, o := range offs {
			n := o.Name()
			if o.Deleted {
				n += " (deleted)"
			}
			names = append(names, n)
		}
		return strings.Join(names, ", ")
	}
	var filter []string
	if connector != "" {
		filter = append(filter, "--connector "+connector)
	}
	if server != "" {
		filter = append(filter, "--server "+server)
	}
	switch {
	case len(match) == 1 && match[0].Deleted:
		return Offset{}, fmt.Errorf("%w: the offset of %s in %s was deleted (its newest record is null): the connector starts over "+
			"by its snapshot.mode; there is no position to take over", ErrNoOffset, match[0].Name(), s.Where)
	case len(match) == 1 && match[0].bad != nil:
		return Offset{}, match[0].bad
	case len(match) == 1:
		return match[0], nil
	case len(match) > 1:
		return Offset{}, fmt.Errorf("%w in %s: %s; choose one with --connector NAME and --server TOPIC_PREFIX", ErrAmbiguous, s.Where, list(match))
	}
	what := "none is stored"
	if len(s.Offsets) > 0 {
		what = "stored: " + list(s.Offsets)
	}
	if len(s.Others) > 0 {
		what += fmt.Sprintf("; %d offsets of other connectors (%s)", len(s.Others), strings.Join(firstN(s.Others, 5), ", "))
	}
	if len(filter) > 0 {
		return Offset{}, fmt.Errorf("%w matches %s in %s: %s", ErrNoOffset, strings.Join(filter, " "), s.Where, what)
	}
	return Offset{}, fmt.Errorf("%w in %s: %s", ErrNoOffset, s.Where, what)
}

func firstN(l []string, n int) []string {
	if len(l) > n {
		return append(l[:n:n], "...")
	}
	return l
}
