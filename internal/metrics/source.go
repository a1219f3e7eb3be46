package metrics

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// SourceRead records that the relay loop handled a source transaction
// committed at commit: until the next SourceAtHead the relay counts as
// behind, and outbox_relay_source_lag_seconds is now minus commit.
func (m *Metrics) SourceRead(commit time.Time) {
	m.lastCommit.Store(commit.UnixNano())
	m.atHead.Store(false)
}

// SourceEvent records that the relay loop handles a binlog event (a row
// event, a DDL, an XA prepare, ... anything but a heartbeat) dated t. The
// first one after a heartbeat ends "at the head": the server had more to
// send, and until its commit is handled the lag counts from t (a big
// transaction read and published for minutes is behind all that time).
func (m *Metrics) SourceEvent(t time.Time) {
	if !m.atHead.Load() {
		return
	}
	if t.IsZero() {
		t = time.Now()
	}
	m.lastCommit.Store(t.UnixNano())
	m.atHead.Store(false)
}

// SourceAtHead records that the relay loop has handled everything the
// server had: the reader passed on a server heartbeat, which the server
// sends only when it has nothing more to send. The lag is 0 until the next
// SourceEvent or SourceRead, however old the last commit. When the last
// checkpoint also covers everything handled, nothing after the checkpoint
// exists on the server at this instant (see purgeMargin).
func (m *Metrics) SourceAtHead() {
	m.atHead.Store(true)
	m.noteClear()
}

// AtHead tells whether a heartbeat was handled after the last event: the
// relay has everything the server had sent.
func (m *Metrics) AtHead() bool { return m.atHead.Load() }

// noteClear records now as a time at which the server held nothing after
// the checkpoint: at the head, and the checkpoint covers every transaction
// handled this term.
func (m *Metrics) noteClear() {
	if !m.atHead.Load() {
		return
	}
	last, cp := m.lastCommit.Load(), m.cpCommit.Load()
	if last == 0 || (cp != 0 && cp >= last) {
		m.clearAt.Store(time.Now().UnixNano())
	}
}

// CheckpointKnown records the pipeline's last committed checkpoint: when it
// was written and the commit time of the last source transaction it covers
// (zero: not recorded). The relay calls it with the checkpoint it loads at
// the start of an attempt and with every checkpoint it writes. It feeds
// outbox_relay_checkpoint_timestamp_seconds, _age_seconds and
// _purge_margin_seconds, which keep the last known checkpoint whatever the
// instance's role: a Kafka outage (connecting, or standby once the lock
// group is lost too) is when the checkpoint ages while the source purges.
func (m *Metrics) CheckpointKnown(written, commit time.Time) {
	m.CheckpointTime.Set(float64(written.UnixNano()) / 1e9)
	if !commit.IsZero() {
		m.cpCommit.Store(commit.UnixNano())
	}
	m.noteClear()
}

// LagSeconds is outbox_relay_source_lag_seconds now (the progress log line
// reports it).
func (m *Metrics) LagSeconds() float64 { return m.sourceLag() }

// sourceLag is the commit-time lag of the last transaction handled while
// behind the server's head, 0 at the head or before the first transaction
// of this term; NaN unless active.
func (m *Metrics) sourceLag() float64 {
	if m.Role() != RoleActive {
		return math.NaN() // a standby reads nothing: not behind, not at the head
	}
	last := m.lastCommit.Load()
	if last == 0 || m.atHead.Load() {
		return 0
	}
	return max(0, since(last).Seconds())
}

// SetRetention records how long the source keeps its binlogs, from its
// settings (MariaDB expire_logs_days or binlog_expire_logs_seconds, MySQL
// binlog_expire_logs_seconds); negative (binlog.NoExpiry): never purged by
// age; 0: unknown.
func (m *Metrics) SetRetention(d time.Duration) {
	m.retention.Store(int64(max(d, -1)))
}

// purgeMargin is how long the binlogs after the checkpoint stay on the
// source if the checkpoint does not move: the retention minus the age of
// the oldest transaction after the checkpoint. That age is not known
// without reading it; its lower bound is the later of
//   - the commit time of the checkpoint's last transaction (the binlog
//     after it is at least that recent; a relay days behind has days-old
//     binlogs after its checkpoint, however recently it wrote it), and
//   - the last time the relay was at the head with everything it had read
//     checkpointed (nothing after the checkpoint existed then).
//
// Before the checkpoint's commit time is known, the last transaction read
// stands in for it. +Inf when the source never purges by age; NaN while
// retention or checkpoint is unknown. Exported whatever the role (the
// last known checkpoint): an instance that knows a later one shows a
// higher margin, so alerts take the max over a pipeline's instances.
func (m *Metrics) purgeMargin() float64 {
	r := m.retention.Load()
	switch {
	case r == 0:
		return math.NaN()
	case r < 0:
		return math.Inf(1)
	}
	anchor := m.cpCommit.Load()
	if anchor == 0 {
		anchor = m.lastCommit.Load()
	}
	anchor = max(anchor, m.clearAt.Load())
	if anchor == 0 {
		return math.NaN()
	}
	return time.Duration(r).Seconds() - since(anchor).Seconds()
}

// SetPosition exports the checkpoint's GTID set as one sequence number per
// GTID source (outbox_relay_checkpoint_gtid_sequence): MariaDB, per domain
// id, the domain's sequence number; MySQL, per server_uuid (and tag,
// uuid:tag), the end of its last interval. The set itself is never a label
// (one series per checkpoint would churn Prometheus): it is in the progress
// log line and `checkpoint show`. Parts that are none of these forms are not
// exported. Only the relay loop calls it.
func (m *Metrics) SetPosition(gtidSet string) {
	if gtidSet == m.position {
		return
	}
	m.position = gtidSet
	seqs := Sequences(gtidSet)
	for src := range m.sources {
		if _, ok := seqs[src]; !ok {
			m.Position.DeleteLabelValues(src)
		}
	}
	for src, n := range seqs {
		m.Position.WithLabelValues(src).Set(float64(n))
	}
	m.sources = seqs
}

// Sequences reads a GTID set in MariaDB form (domain-server-seq,...) or
// MySQL form (uuid:interval[:interval...][:tag:interval...],...) into the
// highest sequence number per GTID source: the MariaDB domain id, the MySQL
// server_uuid or uuid:tag. Parts of neither form are left out.
func Sequences(gtidSet string) map[string]uint64 {
	out := map[string]uint64{}
	for _, part := range strings.Split(gtidSet, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if f := strings.Split(part, "-"); len(f) == 3 && !strings.Contains(part, ":") {
			_, e1 := strconv.ParseUint(f[0], 10, 32)
			_, e2 := strconv.ParseUint(f[1], 10, 32)
			seq, e3 := strconv.ParseUint(f[2], 10, 64)
			if e1 == nil && e2 == nil && e3 == nil && seq > out[f[0]] {
				out[f[0]] = seq
			}
			continue
		}
		f := strings.Split(part, ":")
		if len(f) < 2 || len(f[0]) != 36 || strings.Count(f[0], "-") != 4 {
			continue
		}
		uuid := strings.ToLower(f[0])
		src := uuid
		for _, x := range f[1:] {
			if x == "" || x[0] < '0' || x[0] > '9' {
				src = uuid + ":" + strings.ToLower(x) // a tag: the intervals after it are its own
				continue
			}
			_, end, found := strings.Cut(x, "-")
			if !found {
				end = x
			}
			if n, err := strconv.ParseUint(end, 10, 64); err == nil && n > out[src] {
				out[src] = n
			}
		}
	}
	return out
}
