package main

import (
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
)

// The demo's aggregate ids land in different partitions of its topic, as
// the relay places them (murmur2(key) % partitions): with all of them in
// one, partitioning looks broken.
func TestDemoDevicesSpreadOverPartitions(t *testing.T) {
	n := config.Default().Kafka.TopicPartitions
	seen := map[int32]string{}
	for _, dev := range devices {
		part := clients.KeyPartition([]byte(dev), n)
		if other, ok := seen[part]; ok {
			t.Errorf("%s and %s both go to partition %d of %d", other, dev, part, n)
		}
		seen[part] = dev
	}
	if len(seen) < int(min(n, int32(len(devices)))) {
		t.Fatalf("the demo's devices cover partitions %v of %d", seen, n)
	}
}

// A port another process holds is named as such at once (the demo waited
// ~40 s and blamed the login of the server holding it); port 0 is a free one.
func TestDemoPortInUseNamedAtOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	start := time.Now()
	_, err = freeAddr(ln.Addr().String(), "mariadb", "--db-port")
	if err == nil || !strings.Contains(err.Error(), "port "+ln.Addr().String()+" is in use") || !strings.Contains(err.Error(), "--db-port") {
		t.Fatalf("a held port: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("the clash was named after %v", d)
	}
	addr, err := freeAddr("127.0.0.1:0", "kafka", "--kafka")
	if err != nil || portOf(addr) == 0 {
		t.Fatalf("a free port: %q, %v", addr, err)
	}
}

// `make demo` runs a built demo binary (`go run` exits 1 on Ctrl-C, and
// make reports the demo as failed) and installs only what the demo needs
// (not promtool's Prometheus server).
func TestMakeDemoRunsBinaryAndNeedsOnlyMariaDB(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not installed")
	}
	out, err := exec.Command("make", "-C", "../..", "-n", "demo").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n demo: %v\n%s", err, out)
	}
	for _, bad := range []string{"go run", "promtool", "prometheus"} {
		if strings.Contains(string(out), bad) {
			t.Errorf("make demo runs %q:\n%s", bad, out)
		}
	}
	if !strings.Contains(string(out), "bin/demo --relay") {
		t.Errorf("make demo does not run the built demo:\n%s", out)
	}
}
