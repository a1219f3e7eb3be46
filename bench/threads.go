package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// brokerThreads starts reading the broker's CPU time per thread name (JVM
// threads: request handlers, JIT compilers, GC) when -broker-threads is
// set; the function it returns prints what each name spent since, labelled,
// to stderr. Without the flag both do nothing.
func (h *harness) brokerThreads() func(label string) {
	if !h.threadCPU || h.brokerPID == 0 {
		return func(string) {}
	}
	before := threadTicks(h.brokerPID)
	return func(label string) {
		type spent struct {
			name  string
			ticks int
		}
		var all []spent
		total := 0
		for name, t := range threadTicks(h.brokerPID) {
			if d := t - before[name]; d > 0 {
				all = append(all, spent{name, d})
				total += d
			}
		}
		sort.Slice(all, func(i, j int) bool { return all[i].ticks > all[j].ticks })
		var b strings.Builder
		fmt.Fprintf(&b, "bench: broker CPU by thread, %s: %d ms;", label, total*10)
		for i, s := range all {
			if i == 12 {
				break
			}
			fmt.Fprintf(&b, " %s %d ms", s.name, s.ticks*10)
		}
		fmt.Fprintln(os.Stderr, b.String())
	}
}

// threadTicks is a process's CPU time per thread name (trailing digits and
// dashes dropped, so "data-plane-kafka-request-handler-3" counts with its
// siblings; Linux truncates names to 15 bytes), in clock ticks (USER_HZ 100).
func threadTicks(pid int) map[string]int {
	out := map[string]int{}
	dirs, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue // the thread ended
		}
		if name, ticks, ok := statTicks(string(b)); ok {
			out[name] += ticks
		}
	}
	return out
}

// statTicks reads a thread's name (trailing digits, dashes and '#'
// dropped) and its user plus system CPU ticks from the text of
// /proc/PID/task/TID/stat. The name sits in parentheses and may itself hold
// spaces and parentheses, so the fields are counted from the last ')'.
func statTicks(stat string) (string, int, bool) {
	open, end := strings.IndexByte(stat, '('), strings.LastIndexByte(stat, ')')
	if open < 0 || end < open {
		return "", 0, false
	}
	f := strings.Fields(stat[end+1:])
	if len(f) < 13 {
		return "", 0, false
	}
	ut, err1 := strconv.Atoi(f[11]) // utime and stime, fields 14 and 15 of stat
	st, err2 := strconv.Atoi(f[12])
	if err1 != nil || err2 != nil {
		return "", 0, false
	}
	return strings.TrimRight(stat[open+1:end], "0123456789-#"), ut + st, true
}
