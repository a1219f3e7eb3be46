// Package checkpoint holds the relay's position (a GTID set in the source
// server's own notation) and stores it in a compacted, single-partition Kafka
// topic keyed by pipeline name.
//
// A checkpoint is written by the relay in the same Kafka transaction as the
// records it covers (exactly-once), or after they are acknowledged
// (at-least-once). Load reads with read_committed semantics, so it only ever
// sees checkpoints whose records are committed. A tombstone (nil value) for a
// name means "no checkpoint". Judge (lost.go) is the one rule, shared by
// `run` and every command that reads the checkpoint, that tells a pipeline
// without a checkpoint that never had one from one whose checkpoint is lost.
package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Checkpoint is the committed position of one pipeline.
type Checkpoint struct {
	// Format is the record's format version: Encode writes FormatVersion;
	// Decode reads a record without it (written before it existed) as
	// format 1 and refuses a newer one with ErrNewerFormat.
	Format int    `json:"format"`
	Name   string `json:"name"`
	// GTIDSet covers every source transaction fully published.
	GTIDSet string `json:"gtid_set"`
	Flavor  string `json:"flavor"` // mysql | mariadb
	// ServerID identifies the source server (MySQL server_uuid, MariaDB
	// server_id) the position was read from.
	ServerID string `json:"server_id,omitempty"`
	Host     string `json:"host,omitempty"`
	// Tables are the captured tables (source.tables, sorted) of the
	// pipeline that wrote it: part of its identity (see ErrTablesChanged).
	// Nil when written before the field existed.
	Tables []string `json:"tables,omitempty"`
	// SourceUID is that server's unique identity (MySQL server_uuid,
	// MariaDB server_uid; empty in checkpoints written before it was
	// recorded): prune deletes only on a host proven to be of this
	// source, as MariaDB's server_id and GTIDs repeat across servers.
	SourceUID string `json:"source_uid,omitempty"`
	// Partial is set when one source transaction was split across Kafka
	// transactions: its first Rows routed rows are already published.
	Partial *Partial `json:"partial,omitempty"`
	// CommitTime is the source commit time of the last transaction covered.
	CommitTime time.Time `json:"commit_time"`
	// Time is when the relay wrote this checkpoint.
	Time time.Time `json:"time"`
	// Events counts records published by this pipeline, cumulatively.
	Events int64 `json:"events"`
	// Schema is the captured tables' columns at GTIDSet ("db.table" ->
	// columns), so a restart decodes rows without column names in the
	// binlog with the layout they were written with. It also holds the
	// shadow tables of an online schema change in progress (schema.Tracker
	// follows them), so a restart before the cut-over still knows them.
	Schema map[string][]string `json:"schema,omitempty"`
	// Unsigned lists, for the tables of Schema whose signedness is known,
	// their UNSIGNED columns ("db.table" -> columns; a table absent:
	// unknown), so a restart reads integer columns of rows without
	// signedness in the binlog (binlog_row_metadata=NO_LOG) right.
	Unsigned map[string][]string `json:"unsigned,omitempty"`
	// Provisional lists the tables of Schema whose layout was taken from a
	// CREATE TABLE IF NOT EXISTS and not yet checked against a table map,
	// with their columns' type classes ("db.table" -> classes, "" where
	// unknown; schema.Provisional): a restart still checks them.
	Provisional map[string][]string `json:"provisional,omitempty"`
	// XA lists the XA transactions prepared in the source and not yet
	// committed or rolled back; nil when there is none.
	XA *XA `json:"xa,omitempty"`
	// Partitions is, for each output topic the pipeline wrote to, the
	// partition count its keys are placed by (murmur2(key) % count), so
	// that partitions added to a topic never split an aggregate across a
	// restart (kafka.on_partitions_added). An older checkpoint without it:
	// each topic's count when the relay first writes to it.
	Partitions map[string]int32 `json:"partitions,omitempty"`
	// Fingerprint identifies the last transaction with rows inserted into
	// captured tables that the checkpoint covers, beyond its GTID: a host is used
	// only when it proves it holds that same transaction (package source,
	// Prove). Nil in checkpoints written before it existed, by the
	// operator's commands that set a position, and before the pipeline
	// published its first transaction with outbox rows.
	Fingerprint *Fingerprint `json:"fingerprint,omitempty"`
	// Operator is set on a record an operator's command wrote (checkpoint
	// set, skip, reset, tables), not the relay, whose next checkpoint drops it: a
	// stop on the position can say it was set by hand. With Command
	// "reset" the record is a reset marker (see IsReset).
	Operator *Operator `json:"operator,omitempty"`
}

// Operator says which command wrote a record, when, and from where.
type Operator struct {
	Command string    `json:"command"` // set | skip | reset | tables
	Time    time.Time `json:"time"`
	// User is the OS user and host the command ran as and on.
	User string `json:"user,omitempty"`
	// From is the GTID set of the checkpoint the command replaced; "" when
	// there was none.
	From string `json:"from,omitempty"`
}

// CommandReset is Operator.Command of a reset marker.
const CommandReset = "reset"

// IsReset reports whether c is a reset marker: the record `checkpoint
// reset` writes in place of the checkpoint. It holds no position: Load
// reads it as no checkpoint (the relay starts at source.start, as the
// operator said), LoadWithReset also returns its Operator. Unlike a
// tombstone, compaction keeps it, so a pipeline that has had a checkpoint
// can tell a reset from a checkpoint that vanished.
func (c *Checkpoint) IsReset() bool { return c.Operator != nil && c.Operator.Command == CommandReset }

// ResetMarker is the record `checkpoint reset` writes for name. It carries
// partitions, the counts the replaced checkpoint placed keys by
// (Checkpoint.Partitions; nil when there were none): a reset moves the
// position, never an aggregate to another partition, so the relay started
// from it places keys as before (Loaded.Partitions).
func ResetMarker(name string, op Operator, partitions map[string]int32) *Checkpoint {
	op.Command = CommandReset
	return &Checkpoint{Name: name, Time: op.Time, Operator: &op, Partitions: partitions}
}

// resetFormat is the format of reset markers: newer than builds before
// them read (format 1), so that such a build refuses a marker (as a
// checkpoint in a newer format) rather than reading its empty GTID set as
// a position; its checkpoint set/reset --force replaces it.
const resetFormat = 2

// XA is the state of prepared XA transactions. Their rows are published
// when XA COMMIT comes, later in the binlog: until then a restart must read
// the binlog again from before the earliest prepare that holds outbox rows
// (Resume), publishing nothing it covered before (GTIDSet) but collecting
// the prepared rows again.
type XA struct {
	// Resume is the GTID set before the earliest prepared transaction
	// with outbox rows (maybe the empty set); nil when none has any.
	Resume *string `json:"resume,omitempty"`
	// Schema is the captured tables' layout at Resume, Unsigned their
	// signedness there (as Checkpoint's).
	Schema      map[string][]string `json:"schema,omitempty"`
	Unsigned    map[string][]string `json:"unsigned,omitempty"`
	Provisional map[string][]string `json:"provisional,omitempty"`
	// Prepared are the pending XA transactions in binlog order.
	Prepared []PreparedXA `json:"prepared"`
}

// From is where a restart reads the binlog from: before the earliest
// prepared XA transaction that holds outbox rows, else GTIDSet.
func (c *Checkpoint) From() string {
	if c.Replays() {
		return *c.XA.Resume
	}
	return c.GTIDSet
}

// Replays reports whether a restart reads again from before GTIDSet (see XA).
func (c *Checkpoint) Replays() bool { return c.XA != nil && c.XA.Resume != nil }

// Layout is the captured tables' layout, signedness and provisional tables
// at From, where a reader of the binlog after the checkpoint starts (the
// relay's schema tracker, audit's read of the transactions past it).
func (c *Checkpoint) Layout() (tables, unsigned, provisional map[string][]string) {
	if c.Replays() {
		return c.XA.Schema, c.XA.Unsigned, c.XA.Provisional
	}
	return c.Schema, c.Unsigned, c.Provisional
}

// PreparedXA is one prepared, not yet ended, XA transaction.
type PreparedXA struct {
	XID  string `json:"xid"`  // canonical: hex(gtrid),hex(bqual),formatID
	GTID string `json:"gtid"` // of its XA PREPARE group
	// Rows counts the outbox rows (of any operation) it holds, a rows
	// event handed on undecoded (a partial image) as one.
	Rows int64 `json:"rows"`
}

// Fingerprint is what identifies a transaction across the servers that
// hold it: its GTID and the digest of its rows inserted into captured
// tables (a replica re-logs them unchanged, with other event bytes), and
// where to read it again.
type Fingerprint struct {
	// GTID is the transaction's.
	GTID string `json:"gtid"`
	// Before is the GTID set just before it (where a stream that reads it
	// again starts), in the server's notation.
	Before string `json:"before"`
	// Tables are the captured tables with rows inserted in it; Rows
	// counts those rows.
	Tables []string `json:"tables"`
	Rows   int64    `json:"rows"`
	// Digest is binlog.TxDigest.Sum: the scheme, then the hash.
	Digest string `json:"digest"`
}

// Partial describes a source transaction that is published in part.
type Partial struct {
	GTID string `json:"gtid"`
	Rows int64  `json:"rows"`
}

// FormatVersion is the checkpoint format this build writes and the newest
// it reads. Raise it when a change would be misread by older builds.
const FormatVersion = 1

// Encode renders the checkpoint as the record value, in FormatVersion.
func (c *Checkpoint) Encode() []byte {
	v := *c
	v.Format = FormatVersion
	if c.IsReset() {
		v.Format = resetFormat
	}
	b, err := json.Marshal(&v)
	if err != nil { // cannot happen: plain fields only
		panic(fmt.Sprintf("encode checkpoint: %v", err))
	}
	return b
}

// ErrCorrupt is wrapped when a stored checkpoint cannot be decoded.
var ErrCorrupt = errors.New("corrupt checkpoint")

// ErrNewerFormat is matched (errors.Is) by the error Decode returns for a
// checkpoint written in a format newer than FormatVersion, by a newer
// outbox-relay: this build cannot read it safely. It matches ErrCorrupt
// too, so the relay stops on it as on a checkpoint it cannot decode.
var ErrNewerFormat = errors.New("checkpoint format newer than this build reads")

type newerFormatError struct{ format int }

func (e newerFormatError) Error() string {
	return fmt.Sprintf("checkpoint format %d is newer than this outbox-relay reads (%d): run the outbox-relay version that wrote it, or newer", e.format, FormatVersion)
}

func (e newerFormatError) Is(target error) bool {
	return target == ErrNewerFormat || target == ErrCorrupt
}

// Decode parses a record value.
func Decode(b []byte) (*Checkpoint, error) {
	var c Checkpoint
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	switch {
	case c.Format == 0: // written before the field existed
		c.Format = 1
	case c.Format == resetFormat && c.IsReset():
		return &c, nil // holds no position, no flavor
	case c.Format > FormatVersion:
		return nil, newerFormatError{c.Format}
	case c.Format < 0:
		return nil, fmt.Errorf("%w: format %d", ErrCorrupt, c.Format)
	}
	if c.Flavor != "mysql" && c.Flavor != "mariadb" {
		return nil, fmt.Errorf("%w: flavor %q", ErrCorrupt, c.Flavor)
	}
	return &c, nil
}
