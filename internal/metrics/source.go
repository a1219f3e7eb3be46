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

// SourceAtHead records that the relay loop has handled everything the
// server had: the reader passed on a server heartbeat, which the server
// sends only when it has nothing more to send. The lag is 0 until the next
// SourceRead, however old the last commit.
func (m *Metrics) SourceAtHead() { m.atHead.Store(true) }

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

// purgeMargin is the retention minus the checkpoint's age: how long the
// checkpoint's binlogs stay on the source if nothing moves it. +Inf when the
// source never purges by age, NaN while retention or checkpoint is unknown
// and on an instance that is not active (the active one exports it).
func (m *Metrics) purgeMargin() float64 {
	r := m.retention.Load()
	last := m.lastCheckpoint()
	switch {
	case r == 0 || last == 0 || m.Role() != RoleActive:
		return math.NaN()
	case r < 0:
		return math.Inf(1)
	}
	return time.Duration(r).Seconds() - (float64(time.Now().UnixNano())/1e9 - last)
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
