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
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		f := strings.Fields(s[end+1:])
		if len(f) < 13 {
			continue
		}
		ut, _ := strconv.Atoi(f[11]) // utime and stime, fields 14 and 15 of stat
		st, _ := strconv.Atoi(f[12])
		out[strings.TrimRight(s[open+1:end], "0123456789-#")] += ut + st
	}
	return out
}
