package relay

import (
	"slices"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/outbox-relay/outbox-relay/binlog"
)

// spoil makes row i of script event ev a bad row (an empty aggregate_type:
// router.ErrBadRow) and takes it out of what the script expects published
// to the outbox topics. It returns the row's event id.
func spoil(s *script, ev, i int) string {
	row := s.events[ev].Rows[i]
	row[1] = ""
	id := row[0].(string)
	s.want = slices.DeleteFunc(s.want, func(r outboxRow) bool { return r.id == id })
	return id
}

// eventIndex is the script index of the k-th rows event (from 0) of the
// n-th transaction (from 1).
func (s *script) eventIndex(n, k int) int {
	first := 0
	if n > 1 {
		first = s.ends[n-2] + 1
	}
	return first + k
}

// reorder returns a copy of s whose source transactions come in the order
// given (1-based indexes of s's transactions), each commit carrying the
// GTID set of what precedes it in the new order: another server's binlog,
// as a replica with parallel appliers (MariaDB domains, or MySQL without
// replica_preserve_commit_order) logs independent transactions.
func reorder(s *script, order []int) *script {
	out := *s
	out.events, out.ends = nil, nil
	set := newMDSet()
	var mset mysql.GTIDSet
	if s.flavor == "mysql" {
		mset, _ = binlog.ParseSet("mysql", "")
	}
	for _, n := range order {
		first := 0
		if n > 1 {
			first = s.ends[n-2] + 1
		}
		for i := first; i <= s.ends[n-1]; i++ {
			ev := s.events[i]
			if ev.Set != nil {
				if s.flavor == "mysql" {
					_ = mset.Update(ev.GTID)
					ev.Set = mset.Clone()
				} else {
					g, err := mysql.ParseMariadbGTID(ev.GTID)
					if err != nil {
						panic(err)
					}
					_ = set.AddSet(g)
					ev.Set = set.Clone()
				}
			}
			out.events = append(out.events, ev)
		}
		out.ends = append(out.ends, len(out.events)-1)
	}
	return &out
}

// deleteLast adds, to the script's last transaction, a rows event deleting
// n of the outbox rows it inserted (the delete-after-insert pattern), just
// before its commit.
func deleteLast(s *script, n int) {
	end := s.ends[len(s.ends)-1]
	var rows [][]any
	for i := end - 1; i >= 0 && len(rows) < n && s.events[i].Kind == binlog.KindRows && s.events[i].GTID == s.events[end].GTID; i-- {
		for _, r := range s.events[i].Rows {
			if len(rows) < n {
				rows = append(rows, r)
			}
		}
	}
	ev := binlog.Event{Kind: binlog.KindRows, GTID: s.events[end].GTID, Table: outboxTable, Op: binlog.OpDelete, Rows: rows,
		Time: s.events[end].Time, Size: 100}
	s.events = slices.Insert(s.events, end, ev)
	s.ends[len(s.ends)-1]++
}

// withHeartbeats puts a heartbeat after every event of s, mid-transaction
// too (the reader sends them only between transactions; the loop must not
// rely on it). Each carries the GTID of the transaction the next event
// belongs to, so that an attempt started after it still gets it.
func withHeartbeats(s *script) *script {
	out := *s
	out.events, out.ends = nil, nil
	end := 0
	for i, ev := range s.events {
		out.events = append(out.events, ev)
		if end < len(s.ends) && i == s.ends[end] {
			out.ends = append(out.ends, len(out.events)-1)
			end++
		}
		next := s.gtid(s.n + 1)
		if i+1 < len(s.events) {
			next = s.events[i+1].GTID
		}
		out.events = append(out.events, binlog.Event{Kind: binlog.KindHeartbeat, GTID: next, Time: time.Now()})
	}
	return &out
}
