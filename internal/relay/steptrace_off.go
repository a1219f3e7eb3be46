//go:build !steptrace

package relay

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Step tracing exists only in a binary built with -tags steptrace
// (steptrace_on.go); here every call is empty.

func traceTook()                                                    {}
func traceSend(*kgo.Record, bool, *lane)                            {}
func traceProduce(*lane, *kgo.Record)                               {}
func traceCommit(*lane, time.Time, time.Time, time.Time, time.Time) {}
func traceSettled(*lane)                                            {}
