package relay

import (
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// Failpoints let crash tests kill the process at a named instant:
// OUTBOX_RELAY_FAILPOINT=name or name:N sends SIGKILL to the process the Nth
// time (default the first) the point is reached. Unset, a point costs one
// string comparison. Points:
//
//	after-flush    every record of a batch is acknowledged, the transaction not committed
//	               (at-least-once: the batch's checkpoint not yet produced)
//	after-commit   a batch is committed, before the next one begins
//	after-partial  a part of a split source transaction is committed
const failpointEnv = "OUTBOX_RELAY_FAILPOINT"

type failpointSpec struct {
	name string
	left atomic.Int64
}

var failpoint = parseFailpoint(os.Getenv(failpointEnv))

func parseFailpoint(v string) *failpointSpec {
	if v == "" {
		return nil
	}
	name, n, _ := strings.Cut(v, ":")
	count, err := strconv.Atoi(n)
	if err != nil || count < 1 {
		count = 1
	}
	f := &failpointSpec{name: name}
	f.left.Store(int64(count))
	return f
}

func hit(name string) {
	if failpoint == nil || failpoint.name != name {
		return
	}
	if failpoint.left.Add(-1) == 0 {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // never resume
	}
}
