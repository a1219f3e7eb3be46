package main

import (
	"errors"
	"os"
	"testing"
)

// A write to a pipe whose reader is gone fails with EPIPE (not a SIGPIPE
// death: the pipe is not fd 1 or 2, and `run` ignores SIGPIPE for those):
// the log's writer reports it once, as errLogClosed, and drops what follows
// without an error for zerolog to report.
func TestPipeWriterReportsBrokenPipeOnce(t *testing.T) {
	rd, wr, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer wr.Close()
	pw := newPipeWriter(wr)
	var got []error
	pw.onBroken(func(err error) { got = append(got, err) })
	if _, err := pw.Write([]byte("before\n")); err != nil || len(got) != 0 {
		t.Fatalf("write to a live pipe: %v, broken %v", err, got)
	}
	rd.Close()
	for i := 0; i < 3; i++ {
		if n, err := pw.Write([]byte("after\n")); err != nil || n != 6 {
			t.Fatalf("write %d to a closed pipe: %d, %v; want dropped", i, n, err)
		}
	}
	if len(got) != 1 || !errors.Is(got[0], errLogClosed) {
		t.Fatalf("broken called with %v, want errLogClosed once", got)
	}
}
