// Package checkpoint holds the relay's position (a GTID set in the source
// server's own notation) and stores it in a compacted, single-partition Kafka
// topic keyed by pipeline name.
//
// A checkpoint is written by the relay in the same Kafka transaction as the
// records it covers (exactly-once), or after they are acknowledged
// (at-least-once). Load reads with read_committed semantics, so it only ever
// sees checkpoints whose records are committed. A tombstone (nil value) for a
// name means "no checkpoint".
package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Checkpoint is the committed position of one pipeline.
type Checkpoint struct {
	Name string `json:"name"`
	// GTIDSet covers every source transaction fully published.
	GTIDSet string `json:"gtid_set"`
	Flavor  string `json:"flavor"` // mysql | mariadb
	// ServerID identifies the source server (MySQL server_uuid, MariaDB
	// server_id) the position was read from.
	ServerID string `json:"server_id,omitempty"`
	Host     string `json:"host,omitempty"`
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
	// binlog with the layout they were written with.
	Schema map[string][]string `json:"schema,omitempty"`
}

// Partial describes a source transaction that is published in part.
type Partial struct {
	GTID string `json:"gtid"`
	Rows int64  `json:"rows"`
}

// Encode renders the checkpoint as the record value.
func (c *Checkpoint) Encode() []byte {
	b, err := json.Marshal(c)
	if err != nil { // cannot happen: plain fields only
		panic(fmt.Sprintf("encode checkpoint: %v", err))
	}
	return b
}

// ErrCorrupt is wrapped when a stored checkpoint cannot be decoded.
var ErrCorrupt = errors.New("corrupt checkpoint")

// Decode parses a record value.
func Decode(b []byte) (*Checkpoint, error) {
	var c Checkpoint
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if c.Flavor != "mysql" && c.Flavor != "mariadb" {
		return nil, fmt.Errorf("%w: flavor %q", ErrCorrupt, c.Flavor)
	}
	return &c, nil
}
