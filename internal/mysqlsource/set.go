package mysqlsource

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/google/uuid"
)

// GTID is one MySQL GTID: server uuid, optional tag (8.4), number.
type GTID struct {
	SID uuid.UUID
	Tag string // lower case; "" untagged
	GNO int64
}

func (g GTID) String() string {
	if g.Tag != "" {
		return fmt.Sprintf("%s:%s:%d", g.SID, g.Tag, g.GNO)
	}
	return fmt.Sprintf("%s:%d", g.SID, g.GNO)
}

// ParseGTID reads "uuid:n" or "uuid:tag:n".
func ParseGTID(s string) (GTID, error) {
	parts := strings.Split(strings.TrimSpace(s), ":")
	if len(parts) < 2 || len(parts) > 3 {
		return GTID{}, fmt.Errorf("parse gtid %q: want uuid[:tag]:number", s)
	}
	sid, err := uuid.Parse(parts[0])
	if err != nil {
		return GTID{}, fmt.Errorf("parse gtid %q: %w", s, err)
	}
	n, err := strconv.ParseInt(parts[len(parts)-1], 10, 64)
	if err != nil || n < 1 {
		return GTID{}, fmt.Errorf("parse gtid %q: bad number", s)
	}
	g := GTID{SID: sid, GNO: n}
	if len(parts) == 3 {
		g.Tag = strings.ToLower(parts[1])
	}
	return g, nil
}

type sidTag struct {
	sid uuid.UUID
	tag string
}

// interval is [Start, End], inclusive, as MySQL prints it.
type interval struct{ start, end int64 }

// Set is a MySQL GTID set (gtid_executed, gtid_purged). The zero value is
// not usable: use NewSet or ParseSet.
type Set struct{ m map[sidTag][]interval }

// NewSet returns an empty set.
func NewSet() *Set { return &Set{m: map[sidTag][]interval{}} }

// ParseSet reads MySQL's notation: "uuid:1-5:7,uuid2:1-3", with 8.4 tags
// as "uuid:1-5:tag:1-3"; newlines after commas (as MySQL prints) allowed.
func ParseSet(s string) (*Set, error) {
	out := NewSet()
	s = strings.TrimSpace(strings.ReplaceAll(s, "\n", ""))
	if s == "" {
		return out, nil
	}
	for _, part := range strings.Split(s, ",") {
		fields := strings.Split(strings.TrimSpace(part), ":")
		sid, err := uuid.Parse(fields[0])
		if err != nil {
			return nil, fmt.Errorf("parse gtid set %q: %w", s, err)
		}
		tag := ""
		for _, f := range fields[1:] {
			lo, hi, isRange := strings.Cut(f, "-")
			a, err := strconv.ParseInt(lo, 10, 64)
			if err != nil {
				tag = strings.ToLower(f) // a tag starts with a letter or _
				continue
			}
			b := a
			if isRange {
				if b, err = strconv.ParseInt(hi, 10, 64); err != nil {
					return nil, fmt.Errorf("parse gtid set %q: bad interval %q", s, f)
				}
			}
			for n := a; n <= b && b-a < 1<<20; n++ {
				out.Add(GTID{SID: sid, Tag: tag, GNO: n})
			}
			if b-a >= 1<<20 {
				out.addInterval(sidTag{sid, tag}, interval{a, b})
			}
		}
	}
	return out, nil
}

// MustParseSet is ParseSet for constants in tests.
func MustParseSet(s string) *Set {
	set, err := ParseSet(s)
	if err != nil {
		panic(err)
	}
	return set
}

// Clone returns a copy.
func (s *Set) Clone() *Set {
	out := NewSet()
	for k, iv := range s.m {
		out.m[k] = slices.Clone(iv)
	}
	return out
}

// Add adds g.
func (s *Set) Add(g GTID) { s.addInterval(sidTag{g.SID, g.Tag}, interval{g.GNO, g.GNO}) }

func (s *Set) addInterval(k sidTag, n interval) {
	iv := append(s.m[k], n)
	sort.Slice(iv, func(i, j int) bool { return iv[i].start < iv[j].start })
	merged := iv[:1]
	for _, x := range iv[1:] {
		last := &merged[len(merged)-1]
		if x.start <= last.end+1 {
			last.end = max(last.end, x.end)
			continue
		}
		merged = append(merged, x)
	}
	s.m[k] = merged
}

// AddSet adds every GTID of o.
func (s *Set) AddSet(o *Set) {
	for k, iv := range o.m {
		for _, x := range iv {
			s.addInterval(k, x)
		}
	}
}

// Contains reports whether g is in s.
func (s *Set) Contains(g GTID) bool {
	for _, x := range s.m[sidTag{g.SID, g.Tag}] {
		if g.GNO >= x.start && g.GNO <= x.end {
			return true
		}
	}
	return false
}

// Minus returns the GTIDs of s not in o.
func (s *Set) Minus(o *Set) *Set {
	out := NewSet()
	for k, iv := range s.m {
		for _, x := range iv {
			for n := x.start; n <= x.end; n++ {
				if g := (GTID{SID: k.sid, Tag: k.tag, GNO: n}); !o.Contains(g) {
					out.Add(g)
				}
			}
		}
	}
	return out
}

// Empty reports whether s has no GTID.
func (s *Set) Empty() bool { return len(s.m) == 0 }

// OnlySID returns the part of s with server uuid sid (any tag).
func (s *Set) OnlySID(sid uuid.UUID) *Set {
	out := NewSet()
	for k, iv := range s.m {
		if k.sid == sid {
			out.m[k] = slices.Clone(iv)
		}
	}
	return out
}

func (s *Set) keys() []sidTag {
	keys := make([]sidTag, 0, len(s.m))
	for k := range s.m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if c := strings.Compare(keys[i].sid.String(), keys[j].sid.String()); c != 0 {
			return c < 0
		}
		return keys[i].tag < keys[j].tag
	})
	return keys
}

// String renders s as MySQL does: uuids in order, the untagged intervals
// first, then each tag's; groups separated by ",\n" as in SELECT
// @@GLOBAL.gtid_executed.
func (s *Set) String() string { return s.format(",\n") }

// Flat is String without the newlines.
func (s *Set) Flat() string { return s.format(",") }

func (s *Set) format(sep string) string {
	var groups []string
	var cur uuid.UUID
	var b strings.Builder
	for i, k := range s.keys() {
		if i == 0 || k.sid != cur {
			if i > 0 {
				groups = append(groups, b.String())
				b.Reset()
			}
			cur = k.sid
			b.WriteString(k.sid.String())
		}
		if k.tag != "" {
			b.WriteString(":" + k.tag)
		}
		for _, x := range s.m[k] {
			if x.start == x.end {
				fmt.Fprintf(&b, ":%d", x.start)
			} else {
				fmt.Fprintf(&b, ":%d-%d", x.start, x.end)
			}
		}
	}
	if b.Len() > 0 {
		groups = append(groups, b.String())
	}
	return strings.Join(groups, sep)
}

// encode is the binary form of MySQL's Gtid_set::encode, used in
// Previous_gtids events: the number of (sid, tag) entries in 8 bytes (with
// tags: byte 0 = 1, bytes 1-6 the count, byte 7 = 1, the "tagged" format),
// then per entry the uuid (16 bytes), the tag with tags (a length byte
// holding length<<1, then the tag), the number of intervals (8 bytes) and
// each interval [start, end+1) in 8 + 8 bytes.
func (s *Set) encode() []byte {
	keys := s.keys()
	withTags := slices.ContainsFunc(keys, func(k sidTag) bool { return k.tag != "" })
	var b []byte
	if withTags {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(keys))<<8)
		n[0], n[7] = 1, 1
		b = append(b, n[:]...)
	} else {
		b = binary.LittleEndian.AppendUint64(b, uint64(len(keys)))
	}
	for _, k := range keys {
		b = append(b, k.sid[:]...)
		if withTags {
			b = append(b, byte(len(k.tag)<<1))
			b = append(b, k.tag...)
		}
		b = binary.LittleEndian.AppendUint64(b, uint64(len(s.m[k])))
		for _, x := range s.m[k] {
			b = binary.LittleEndian.AppendUint64(b, uint64(x.start))
			b = binary.LittleEndian.AppendUint64(b, uint64(x.end+1))
		}
	}
	return b
}
