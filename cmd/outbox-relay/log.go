package main

import (
	"io"
	"os"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/term"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

// newLogger builds the process logger: JSON by default, console on request
// (coloured only when w is a terminal).
func newLogger(cfg config.Log, w io.Writer) zerolog.Logger {
	if w == nil {
		w = os.Stderr
	}
	if cfg.Format == config.LogConsole {
		f, ok := w.(*os.File)
		if pw, isPipe := w.(interface{ File() *os.File }); isPipe {
			f, ok = pw.File(), pw.File() != nil
		}
		color := ok && term.IsTerminal(int(f.Fd())) && os.Getenv("NO_COLOR") == ""
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339, NoColor: !color}
	}
	level, err := zerolog.ParseLevel(string(cfg.Level))
	if err != nil {
		level = zerolog.InfoLevel
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger()
}
