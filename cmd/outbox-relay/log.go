package main

import (
	"io"
	"os"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

// newLogger builds the process logger: JSON by default, console on request.
func newLogger(cfg config.Log, w io.Writer) zerolog.Logger {
	if w == nil {
		w = os.Stderr
	}
	if cfg.Format == "console" {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339}
	}
	level, err := zerolog.ParseLevel(cfg.Level)
	if err != nil {
		level = zerolog.InfoLevel
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger()
}
