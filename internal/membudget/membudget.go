// Package membudget says how much memory this process may use: the
// smallest of its cgroup's memory limits (cgroup v2 memory.max, v1
// memory.limit_in_bytes; of its own cgroup and every parent up to the
// mount) and GOMEMLIMIT when the environment sets it. The relay sizes what
// a peer can make it hold (the bound of a source packet) from it, never
// from what the peer says.
package membudget

import (
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// Budget is the memory the process may use; Bytes 0 when nothing sets it.
type Budget struct {
	Bytes int64
	From  string // what set it: "the cgroup memory limit", "GOMEMLIMIT"
}

// Read returns the process's budget.
func Read() Budget {
	var gomem int64
	if os.Getenv("GOMEMLIMIT") != "" {
		// The runtime parsed it at start; `run` sets its own soft limit
		// only when GOMEMLIMIT is unset, so this is the operator's.
		gomem = debug.SetMemoryLimit(-1)
	}
	return read("/proc/self/cgroup", "/sys/fs/cgroup", gomem)
}

// unlimited: cgroup v1 reports "no limit" as a large page-rounded number.
const unlimited = 1 << 62

func read(procCgroup, root string, gomem int64) Budget {
	var b Budget
	if n := cgroupLimit(procCgroup, root); n > 0 {
		b = Budget{Bytes: n, From: "the cgroup memory limit"}
	}
	if gomem > 0 && gomem < math.MaxInt64 && (b.Bytes == 0 || gomem < b.Bytes) {
		b = Budget{Bytes: gomem, From: "GOMEMLIMIT"}
	}
	return b
}

// cgroupLimit is the smallest memory limit of the process's cgroup and its
// parents (v2, then v1), 0 when none is set.
func cgroupLimit(procCgroup, root string) int64 {
	raw, err := os.ReadFile(procCgroup)
	if err != nil {
		return 0
	}
	var best int64
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var dir, file string
		switch {
		case parts[0] == "0" && parts[1] == "": // v2
			dir, file = root, "memory.max"
		case hasController(parts[1], "memory"): // v1
			dir, file = filepath.Join(root, "memory"), "memory.limit_in_bytes"
		default:
			continue
		}
		if n := smallest(dir, parts[2], file); n > 0 && (best == 0 || n < best) {
			best = n
		}
	}
	return best
}

func hasController(list, name string) bool {
	for _, c := range strings.Split(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// smallest is the smallest limit in file of mount/path and its parents up
// to mount (in a container the mount may be the cgroup itself), 0 if none.
func smallest(mount, path, file string) int64 {
	var best int64
	for p := filepath.Clean("/" + path); ; p = filepath.Dir(p) {
		if n := limitIn(filepath.Join(mount, p, file)); n > 0 && (best == 0 || n < best) {
			best = n
		}
		if p == "/" {
			return best
		}
	}
}

func limitIn(f string) int64 {
	raw, err := os.ReadFile(f)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil || n <= 0 || n >= unlimited { // "max", or v1's no limit
		return 0
	}
	return n
}
