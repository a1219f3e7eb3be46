package debezium

import (
	"fmt"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/schema"
)

// Result is the translation: the relay's new position and what proves it.
type Result struct {
	// Published counts the walked rows whose records are in Kafka: a
	// prefix of the walk when Anomalies is empty. Claimed counts those
	// Debezium's offset covers (its transactions before its position).
	Published, Claimed, Walked int
	// Position is the GTID set of the new checkpoint, Partial the rows of
	// the transaction it cuts (nil: none); Layout etc. the captured tables'
	// layout there, CommitTime the commit time of its last transaction.
	Position    string
	Partial     *checkpoint.Partial
	Layout      schema.Tables
	Signs       schema.Signs
	Provisional schema.Provisional
	CommitTime  time.Time
	// Fingerprint is the last transaction with outbox rows the position
	// covers, for the relay's proof of a source host (nil: none walked).
	Fingerprint *checkpoint.Fingerprint
	// First is the first row the relay publishes (nil: none walked yet),
	// Last the last one Debezium published (nil: none walked).
	First, Last *Row
	// Anomalies are what makes the translation unproven: refused unless
	// forced. Notes are what the operator should know.
	Anomalies []string
	Notes     []string
}

// maxListed bounds the rows an anomaly lists.
const maxListed = 5

// describe names a row for an operator.
func (r *Row) describe() string {
	if len(r.Absent) > 0 {
		return fmt.Sprintf("event %q (GTID %s, row %d of its outbox rows, %s, whose binlog image lacks column(s) %s)", r.EventID, r.Tx.GTID,
			r.N, r.Table, strings.Join(r.Absent, ", "))
	}
	return fmt.Sprintf("event %q (GTID %s, row %d of its outbox rows, %s)", r.EventID, r.Tx.GTID, r.N, r.Table)
}

// Translate finds the new position from the walk w, where the walked
// rows' records are (found, by event id), and Debezium's offset off.
func Translate(w *Walk, found map[string]Found, off Offset) Result {
	rows := w.Rows
	res := Result{Walked: len(rows) + w.Dropped}
	for res.Published < len(rows) {
		if _, ok := found[rows[res.Published].EventID]; !ok || rows[res.Published].EventID == "" {
			break
		}
		res.Published++
	}
	for res.Claimed < len(rows) && rows[res.Claimed].Tx.Covered {
		res.Claimed++
	}
	k := res.Published
	// After the prefix, no record may be there: a row published after one
	// that is not is a gap Debezium left (or the rows are routed
	// elsewhere), and no position avoids both a loss and a duplicate.
	var after []string
	for i := k + 1; i < len(rows); i++ {
		if f, ok := found[rows[i].EventID]; ok && rows[i].EventID != "" {
			if len(after) < maxListed {
				after = append(after, fmt.Sprintf("%s is in %s[%d] at offset %d", rows[i].describe(), f.Topic, f.Partition, f.Offset))
			}
		}
	}
	if len(after) > 0 {
		res.Anomalies = append(res.Anomalies, fmt.Sprintf("records are not a prefix of the binlog: %s has no record, yet rows after it have: %s",
			rows[k].describe(), strings.Join(after, "; ")))
	}
	// The published rows must be where the relay places them, or the
	// relay would split aggregates across partitions.
	var moved []string
	dups := 0
	for i := range k {
		r, f := &rows[i], found[rows[i].EventID]
		if f.Count > 1 {
			dups++
		}
		if r.Topic != "" && r.Partition >= 0 && (f.Topic != r.Topic || f.Partition != r.Partition) && len(moved) < maxListed {
			moved = append(moved, fmt.Sprintf("%s is in %s[%d], the relay places it in %s[%d]", r.describe(), f.Topic, f.Partition, r.Topic, r.Partition))
		}
	}
	if len(moved) > 0 {
		res.Anomalies = append(res.Anomalies, "records are not where the relay places them (compare router.topic_replacement, the key "+
			"column and the partition counts with the connector's EventRouter settings): "+strings.Join(moved, "; "))
	}
	if res.Claimed > k {
		res.Anomalies = append(res.Anomalies, fmt.Sprintf("Debezium's offset (%s) covers %s, whose record is not in %s: the router's settings "+
			"differ from the connector's (topics, the id header), or the topic lost it (retention, deletion)", off, rows[k].describe(), topicOf(&rows[k])))
	}
	if k == 0 && res.Claimed == 0 && w.Dropped == 0 && len(rows) > 0 {
		// Nothing walked before the first row the relay would publish was
		// published: no record says the routing matches, nor that the row
		// before the walk was published.
		res.Anomalies = append(res.Anomalies, fmt.Sprintf("nothing in Kafka proves the position: none of the %d outbox rows from %q to the "+
			"source's head has a record in %s (the router's topics differ from the connector's, or it published no row since): "+
			"pass --force when the connector never published one", len(rows), w.From, topicOf(&rows[0])))
	}
	if w.Disorder != "" {
		res.Anomalies = append(res.Anomalies, fmt.Sprintf("Debezium's offset (%s) covers transaction %s but not one before it in the binlog: "+
			"an offset of another server?", off, w.Disorder))
	}
	if dups > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d of the published rows have more than one record (Debezium delivers at least once); "+
			"the relay publishes none of them again", dups))
	}
	res.notes(w, off)
	if k > 0 {
		res.Last = &rows[k-1]
	}
	if k == len(rows) {
		res.Position, res.Layout, res.Signs, res.Provisional, res.CommitTime = w.End, w.EndLayout, w.EndSigns, w.EndProvisional, w.EndTime
		res.Fingerprint = w.EndFingerprint
		return res
	}
	r := &rows[k]
	res.First = r
	if len(r.Absent) > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("the first row the relay would publish, %s, was logged without all its columns: the relay "+
			"stops at transaction %s rather than publish NULL in their place, and names the way past it (publish its rows from the table, "+
			"then `outbox-relay checkpoint skip`)", r.describe(), r.Tx.GTID))
	}
	tx := r.Tx
	res.Position, res.Layout, res.Signs, res.Provisional, res.CommitTime = tx.Before, tx.Layout, tx.Signs, tx.Provision, tx.BeforeTime
	res.Fingerprint = tx.Fingerprint
	if r.N > 1 {
		res.Partial = &checkpoint.Partial{GTID: tx.GTID, Rows: r.N - 1}
	}
	return res
}

// notes compares where Kafka's records end with where the offset says
// Debezium is.
func (res *Result) notes(w *Walk, off Offset) {
	rows, k := w.Rows, res.Published
	switch {
	case len(rows) == 0:
		res.Notes = append(res.Notes, fmt.Sprintf("the binlog from %s to the source's head holds no outbox row: the position is the head", w.From))
	case res.Claimed > k, k == 0 && w.Dropped == 0: // an anomaly says so
	case k > res.Claimed:
		first := rows[res.Claimed].Tx
		inFirst := 0
		for i := res.Claimed; i < k && rows[i].Tx == first; i++ {
			inFirst++
		}
		switch {
		case inFirst < k-res.Claimed:
		case int64(inFirst) < first.Rows:
			res.Notes = append(res.Notes, fmt.Sprintf("Debezium stopped inside transaction %s (offset: %s): %d of its %d outbox rows "+
				"are published, the relay publishes the rest", first.GTID, off, inFirst, first.Rows))
			return
		case off.InTransaction(): // else the offset is before it: Kafka is ahead
			res.Notes = append(res.Notes, fmt.Sprintf("Debezium's offset (%s) is inside transaction %s, after its last outbox row: all %d "+
				"are published, the relay starts after it", off, first.GTID, inFirst))
			return
		}
		res.Notes = append(res.Notes, fmt.Sprintf("Kafka holds %d rows past Debezium's committed offset (%s): records sent after its last "+
			"offset commit, which a restarted connector would publish again; the relay does not", k-res.Claimed, off))
	case off.InTransaction():
		res.Notes = append(res.Notes, fmt.Sprintf("the offset is inside a transaction (event %d, row %d), but no outbox row of it has a record: "+
			"the events it counts are of other tables", off.Event, off.Row))
	default:
		res.Notes = append(res.Notes, "Kafka's records end where Debezium's offset is")
	}
}

func topicOf(r *Row) string {
	if r.Topic == "" {
		return "the topics read"
	}
	return r.Topic
}
