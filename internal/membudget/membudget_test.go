package membudget

import (
	"os"
	"path/filepath"
	"testing"
)

func write(t *testing.T, f, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The budget is the smallest limit of the process's cgroup and its
// parents (v2 and v1), or GOMEMLIMIT when smaller; nothing set is 0.
func TestReadTakesTheSmallestLimit(t *testing.T) {
	for _, c := range []struct {
		name   string
		cgroup string
		files  map[string]string
		gomem  int64
		want   Budget
	}{
		{"v2 pod", "0::/\n", map[string]string{"memory.max": "268435456\n"}, 0, Budget{256 << 20, "the cgroup memory limit"}},
		{"v2 service under a smaller slice", "0::/system.slice/outbox-relay.service\n", map[string]string{
			"system.slice/outbox-relay.service/memory.max": "max\n", "system.slice/memory.max": "134217728\n"}, 0,
			Budget{128 << 20, "the cgroup memory limit"}},
		{"v1", "4:memory:/kubepods/pod1\n1:cpu:/\n", map[string]string{
			"memory/kubepods/pod1/memory.limit_in_bytes": "536870912\n", "memory/memory.limit_in_bytes": "9223372036854771712\n"}, 0,
			Budget{512 << 20, "the cgroup memory limit"}},
		{"GOMEMLIMIT smaller", "0::/\n", map[string]string{"memory.max": "268435456\n"}, 200 << 20, Budget{200 << 20, "GOMEMLIMIT"}},
		{"GOMEMLIMIT alone", "0::/\n", map[string]string{"memory.max": "max\n"}, 300 << 20, Budget{300 << 20, "GOMEMLIMIT"}},
		{"no limit", "0::/\n", map[string]string{"memory.max": "max\n"}, 0, Budget{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			write(t, filepath.Join(dir, "cgroup"), c.cgroup)
			for f, s := range c.files {
				write(t, filepath.Join(dir, "fs", f), s)
			}
			if got := read(filepath.Join(dir, "cgroup"), filepath.Join(dir, "fs"), c.gomem); got != c.want {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}
}
