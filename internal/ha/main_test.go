package ha

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine they started (a
// term's watcher, a group client's) is still running once they have all
// ended.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// glog (imported through the relay, which the external tests use)
		// starts its flush daemon in its package init, for the life of the
		// process.
		goleak.IgnoreTopFunction("github.com/golang/glog.(*fileSink).flushDaemon"),
		// kfake's Cluster.Close does not wait for the goroutines that run
		// control functions (a heartbeat held back on purpose): the fake
		// broker's, not the elector's.
		goleak.IgnoreAnyFunction("github.com/twmb/franz-go/pkg/kfake.(*Cluster).SleepControl.func1"),
		goleak.IgnoreAnyFunction("github.com/twmb/franz-go/pkg/kfake.(*Cluster).runControl.func1"))
}
