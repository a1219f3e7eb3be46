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
// as Debug.
func MySQLLogger(log zerolog.Logger) *slog.Logger {
	return slog.New(demoteInfo{zerolog.NewSlogHandler(log.With().Str("component", "go-mysql").Logger())})
}

type demoteInfo struct{ slog.Handler }

func demote(l slog.Level) slog.Level {
	if l >= slog.LevelInfo && l < slog.LevelWarn {
		return slog.LevelDebug
	}
	return l
}

func (h demoteInfo) Enabled(ctx context.Context, l slog.Level) bool {
	return h.Handler.Enabled(ctx, demote(l))
}

func (h demoteInfo) Handle(ctx context.Context, r slog.Record) error {
	r.Level = demote(r.Level)
	return h.Handler.Handle(ctx, r)
}

func (h demoteInfo) WithAttrs(a []slog.Attr) slog.Handler { return demoteInfo{h.Handler.WithAttrs(a)} }
func (h demoteInfo) WithGroup(n string) slog.Handler      { return demoteInfo{h.Handler.WithGroup(n)} }
