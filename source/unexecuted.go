package source

import (
	"sort"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outbox-relay/outbox-relay/binlog"
)

// Unexecuted returns the part of pos (a GTID set in s's notation) that s's
// binlog does not hold, in the server's notation: MariaDB, the GTIDs
// domain-server_id-seq of pos whose server_id is logged in their domain
// only up to a lower sequence number (or not at all); MySQL, pos minus
// gtid_executed. "" when the binlog holds all of it. For messages: a
// position set by hand (`checkpoint set`) that names transactions the
// server has not executed is a typo or another server's, never a place to
// read from.
func Unexecuted(s *binlog.Server, pos string) (string, error) {
	if s.Flavor == mysql.MariaDBFlavor {
		set, err := binlog.ParseSet(s.Flavor, pos)
		if err != nil {
			return "", err
		}
		st, err := parseMariaDBState(s.State)
		if err != nil {
			return "", err
		}
		var out []string
		for _, g := range set.(*mysql.MariadbGTIDSet).Sets {
			if g.SequenceNumber > 0 && st[g.DomainID][g.ServerID] < g.SequenceNumber {
				out = append(out, g.String())
			}
		}
		sort.Strings(out)
		return strings.Join(out, ","), nil
	}
	want, err := binlog.ParseSet(s.Flavor, pos)
	if err != nil {
		return "", err
	}
	have, err := binlog.ParseSet(s.Flavor, strings.ReplaceAll(s.State, "\n", ""))
	if err != nil {
		return "", err
	}
	return setMinus(want, have).String(), nil
}

// setMinus is the MySQL GTID set a without the GTIDs of b.
func setMinus(a, b mysql.GTIDSet) *mysql.MysqlGTIDSet {
	bs := *b.(*mysql.MysqlGTIDSet)
	out := mysql.MysqlGTIDSet{}
	for sid, tags := range *a.(*mysql.MysqlGTIDSet) {
		for tag, ivs := range tags {
			left := minus(ivs, bs[sid][tag])
			if len(left) == 0 {
				continue
			}
			if out[sid] == nil {
				out[sid] = map[mysql.Tag]mysql.IntervalSlice{}
			}
			out[sid][tag] = left
		}
	}
	return &out
}

// minus is a without the numbers of b (intervals with Stop exclusive).
func minus(a, b mysql.IntervalSlice) mysql.IntervalSlice {
	b = b.Normalize()
	var out mysql.IntervalSlice
	for _, iv := range a {
		start := iv.Start
		for _, h := range b {
			if h.Stop <= start || h.Start >= iv.Stop {
				continue
			}
			if h.Start > start {
				out = append(out, mysql.Interval{Start: start, Stop: h.Start})
			}
			start = max(start, h.Stop)
		}
		if start < iv.Stop {
			out = append(out, mysql.Interval{Start: start, Stop: iv.Stop})
		}
	}
	return out
}
