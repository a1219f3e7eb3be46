package binlog

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine they started is still
// running once they have all ended.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// glog (imported by Vitess, which the MySQL double, whose binary
		// JSON the JSON tests write, encodes its events with) starts its
		// flush daemon at init.
		goleak.IgnoreTopFunction("github.com/golang/glog.(*fileSink).flushDaemon"),
	)
}
