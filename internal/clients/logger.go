package clients

import (
	"context"
	"log/slog"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The libraries' logs go into the relay's zerolog logger, tagged with a
// component, one level lower than they log (their Info is routine: rotates,
// connections, metadata), so warnings and errors show at the default info
// level and the rest with log.level debug. franz-go's plugin/kzerolog is not
// served by the module proxy this project builds from; kgoLogger is its
// equivalent.

// kgoLogger adapts zerolog to franz-go's kgo.Logger.
type kgoLogger struct{ log zerolog.Logger }

// KafkaLogger returns the kgo.Opt that sends franz-go's logs to log.
func KafkaLogger(log zerolog.Logger) kgo.Opt {
	return kgo.WithLogger(kgoLogger{log.With().Str("component", "franz-go").Logger()})
}

func (l kgoLogger) Level() kgo.LogLevel {
	if l.log.GetLevel() <= zerolog.DebugLevel {
		return kgo.LogLevelInfo
	}
	return kgo.LogLevelWarn
}

func (l kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	var ev *zerolog.Event
	switch level {
	case kgo.LogLevelError:
		ev = l.log.Error()
	case kgo.LogLevelWarn:
		ev = l.log.Warn()
	case kgo.LogLevelInfo:
		ev = l.log.Debug()
	default:
		ev = l.log.Trace()
	}
	if ev == nil {
		return
	}
	ev.Fields(keyvals).Msg(msg)
}

// MySQLLogger is the slog logger for go-mysql: its records in log, Info
// as Debug. Once stopping is closed (nil: never) every record is Debug:
// the caller stopped the reader and closed the connection go-mysql reads
// itself, and go-mysql logs that close as a failure ("io.ReadFull(header)
// failed ... context canceled" at error, "retry sync is disabled" at warn)
// when its read returns before its own Close, at one stop in four. A clean
// stop logs nothing above info; a failure before the stop keeps its level.
func MySQLLogger(log zerolog.Logger, stopping <-chan struct{}) *slog.Logger {
	return slog.New(demoteInfo{zerolog.NewSlogHandler(log.With().Str("component", "go-mysql").Logger()), stopping})
}

// demoteInfo lowers go-mysql's Info to Debug, and everything to Debug
// once stopping is closed.
type demoteInfo struct {
	slog.Handler
	stopping <-chan struct{}
}

func (h demoteInfo) demote(l slog.Level) slog.Level {
	select {
	case <-h.stopping:
		return min(l, slog.LevelDebug)
	default:
	}
	if l >= slog.LevelInfo && l < slog.LevelWarn {
		return slog.LevelDebug
	}
	return l
}

func (h demoteInfo) Enabled(ctx context.Context, l slog.Level) bool {
	return h.Handler.Enabled(ctx, h.demote(l))
}

func (h demoteInfo) Handle(ctx context.Context, r slog.Record) error {
	r.Level = h.demote(r.Level)
	return h.Handler.Handle(ctx, r)
}

func (h demoteInfo) WithAttrs(a []slog.Attr) slog.Handler {
	return demoteInfo{h.Handler.WithAttrs(a), h.stopping}
}

func (h demoteInfo) WithGroup(n string) slog.Handler {
	return demoteInfo{h.Handler.WithGroup(n), h.stopping}
}
