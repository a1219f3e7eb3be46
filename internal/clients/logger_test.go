package clients

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestLibraryLogsIntoZerolog(t *testing.T) {
	var buf bytes.Buffer
	info := zerolog.New(&buf).Level(zerolog.InfoLevel)
	k := kgoLogger{info.With().Str("component", "franz-go").Logger()}
	if k.Level() != kgo.LogLevelWarn {
		t.Fatalf("at info, franz-go should log warnings and up, got %v", k.Level())
	}
	k.Log(kgo.LogLevelWarn, "unable to open connection", "broker", "1", "err", "refused")
	k.Log(kgo.LogLevelInfo, "metadata refresh")
	out := buf.String()
	if !strings.Contains(out, `"level":"warn","component":"franz-go","broker":"1","err":"refused","message":"unable to open connection"`) {
		t.Fatalf("franz-go warning: %s", out)
	}
	if strings.Contains(out, "metadata refresh") {
		t.Fatalf("franz-go info shown at info level: %s", out)
	}

	buf.Reset()
	debug := zerolog.New(&buf).Level(zerolog.DebugLevel)
	if (kgoLogger{debug}).Level() != kgo.LogLevelInfo {
		t.Fatal("at debug, franz-go info should be on")
	}
	var ib bytes.Buffer
	m := MySQLLogger(zerolog.New(&ib).Level(zerolog.InfoLevel), nil)
	m.Info("rotate to next binlog", "name", "mysql-bin.000002")
	m.Warn("retry sync", "err", "EOF")
	if s := ib.String(); strings.Contains(s, "rotate") || !strings.Contains(s, `"component":"go-mysql"`) || !strings.Contains(s, "retry sync") {
		t.Fatalf("go-mysql logs: %s", s)
	}
	var db bytes.Buffer
	MySQLLogger(zerolog.New(&db).Level(zerolog.DebugLevel), nil).Info("rotate to next binlog")
	if !strings.Contains(db.String(), `"level":"debug"`) {
		t.Fatalf("go-mysql info should be debug: %s", db.String())
	}
}

// Once the caller has stopped the reader (stopping closed), go-mysql's
// error and warning about the connection the caller closed are debug
// lines: a clean stop logs nothing above info. Before it they keep their
// level.
func TestGoMySQLErrorsAfterTheStopAreDebug(t *testing.T) {
	var buf bytes.Buffer
	stopping := make(chan struct{})
	m := MySQLLogger(zerolog.New(&buf).Level(zerolog.DebugLevel), stopping)
	m.Error("io.ReadFull(header) failed. err read the binlog stream: connection reset: connection was bad")
	close(stopping)
	m.Error("io.ReadFull(header) failed. err read the binlog stream of db:3306: context canceled: connection was bad")
	m.With("k", "v").Warn("retry sync is disabled")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{`"level":"error"`, `"level":"debug"`, `"level":"debug"`}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %d: %s, want %s", i, lines[i], w)
		}
	}
	var info bytes.Buffer
	MySQLLogger(zerolog.New(&info).Level(zerolog.InfoLevel), stopping).Error("after the stop")
	if info.Len() != 0 {
		t.Fatalf("at info, a record after the stop was written: %s", info.String())
	}
}
