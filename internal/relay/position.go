package relay

import (
	"fmt"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/schema"
)

// position is how far the loop has handed the source to the delivery, and
// what a checkpoint of it says. Only the loop's goroutine uses it.
type position struct {
	// set covers every source transaction fully handed to the delivery.
	set mysql.GTIDSet
	str string // set rendered, or "" when it changed since: use String
	// partial: rows of one source transaction already published (committed,
	// or produced into the open batch). Loaded from the checkpoint, it makes
	// a restart skip exactly those rows. GTID "" when there is none.
	partial  checkpoint.Partial
	schema   schema.Tables // captured tables' layout at set
	unsigned schema.Signs  // and their signedness
	// provisional: the tables of schema whose layout awaits its check
	// against a table map (schema.Provisional).
	provisional schema.Provisional
	commitTime  time.Time // of the last source transaction handed over
	events      int64     // cumulative published records, carried in checkpoints
	dirty       bool      // moved since the last checkpoint
	// fingerprint is the last transaction with rows of captured tables that
	// the position covers (carried from the checkpoint, replaced at each such
	// commit; source.Prove checks it on a host before the relay reads it);
	// fpBefore the set just before it, rendered into its Before when a
	// checkpoint first carries it.
	fingerprint *checkpoint.Fingerprint
	fpBefore    mysql.GTIDSet
	// fpNext is the digest of the last transaction with rows of captured
	// tables since the last checkpoint (fpGTID), made into the fingerprint
	// once a checkpoint carries it: one per checkpoint, not per
	// transaction.
	fpNext *binlog.TxDigest
	fpGTID string
}

// newPosition is the position from (a GTID set of flavor), with what cp
// (nil: none) carries on: the part of a split transaction published, the
// records published, the last commit time.
func newPosition(flavor, from string, cp *checkpoint.Checkpoint) (position, error) {
	set, err := binlog.ParseSet(flavor, from)
	if err != nil {
		return position{}, fmt.Errorf("start position: %w", err)
	}
	p := position{set: set, str: from}
	if cp != nil {
		if cp.Partial != nil {
			p.partial = *cp.Partial
		}
		p.events = cp.Events
		p.commitTime = cp.CommitTime
		p.fingerprint = cp.Fingerprint
	}
	return p, nil
}

// String is set rendered in the server's notation, rendered once per change.
func (p *position) String() string {
	if p.str == "" {
		p.str = p.set.String()
	}
	return p.str
}

// advance moves the position past ev, the end of a source transaction (a
// commit, an XA prepare or an XA rollback); fingerprinted, ev is the last
// transaction with rows of captured tables the position covers.
func (p *position) advance(ev *binlog.Event, fingerprinted bool) {
	if fingerprinted {
		p.fpNext, p.fpGTID, p.fpBefore = ev.Digest, ev.GTID, p.set
	}
	p.set, p.str, p.schema, p.unsigned = ev.Set, "", ev.Schema, ev.Unsigned
	p.provisional = ev.Provisional
	if p.partial.GTID == ev.GTID {
		p.partial = checkpoint.Partial{}
	}
	p.dirty = true
	p.commitTime = ev.Time
}

// lastFingerprint is the fingerprint a checkpoint written now carries.
func (p *position) lastFingerprint() *checkpoint.Fingerprint {
	if d := p.fpNext; d != nil {
		p.fingerprint = &checkpoint.Fingerprint{GTID: p.fpGTID, Tables: d.Tables, Rows: int64(d.Rows), Digest: d.Sum}
		if p.fpBefore != nil {
			p.fingerprint.Before = p.fpBefore.String()
		}
		p.fpNext, p.fpBefore = nil, nil
	}
	return p.fingerprint
}

// checkpoint is the checkpoint of the position, once the open batch's
// records (batch) are published, as pipeline name read from srv writes it
// at now; xa and placed are the XA transactions in flight and the
// partition counts keys are placed by.
func (p *position) checkpoint(name string, srv *binlog.Server, tables []string, now time.Time, batch int,
	xa *checkpoint.XA, placed map[string]int32) *checkpoint.Checkpoint {
	cp := &checkpoint.Checkpoint{
		Name:        name,
		GTIDSet:     p.String(),
		Flavor:      srv.Flavor,
		ServerID:    srv.ServerID,
		Host:        srv.Addr,
		SourceUID:   srv.UID,
		Tables:      tables,
		CommitTime:  p.commitTime,
		Time:        now.UTC(),
		Events:      p.events + int64(batch),
		Schema:      p.schema,
		Unsigned:    p.unsigned,
		Provisional: p.provisional,
		XA:          xa,
		Partitions:  placed,
		Fingerprint: p.lastFingerprint(),
	}
	if p.partial.GTID != "" {
		published := p.partial
		cp.Partial = &published
	}
	return cp
}
