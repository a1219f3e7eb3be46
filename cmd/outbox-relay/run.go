package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/internal/relay"
)

func loadConfig(fs *flag.FlagSet, args []string) (config.Config, error) {
	path := fs.String("config", "", "configuration file (YAML)")
	if err := fs.Parse(args); err != nil {
		return config.Config{}, err
	}
	if *path == "" {
		return config.Config{}, fmt.Errorf("%w: --config FILE is required", errUsage)
	}
	return config.Load(*path)
}

// defaultMemoryLimit is the soft Go heap limit of `run` unless GOMEMLIMIT is set.
const defaultMemoryLimit = 96 << 20

// defaultGCPercent is the GC target of `run` unless GOGC is set: with the
// memory limit as the ceiling, a small live heap is collected less often.
const defaultGCPercent = 400

func runCmd(args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	printCfg := fs.Bool("print-config", false, "print the effective configuration, secrets redacted, and exit")
	logFormat := fs.String("log-format", "", "override log.format: json | console")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile to this file until exit (diagnostics)")
	cfg, err := loadConfig(fs, args)
	if err != nil {
		if errors.Is(err, errUsage) || errors.Is(err, flag.ErrHelp) || errors.Is(err, config.ErrInvalid) {
			return err
		}
		return fmt.Errorf("%w: %w", config.ErrInvalid, err) // an unreadable file: exit 78
	}
	if *logFormat != "" {
		cfg.Log.Format = *logFormat
		if err := cfg.Validate(); err != nil {
			return err
		}
	}
	if *printCfg {
		fmt.Print(cfg.Redacted().YAML())
		return nil
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("create cpu profile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("start cpu profile: %w", err)
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		// A soft heap limit keeps catch-up bursts small (GC works harder near
		// it; it never fails an allocation). GOMEMLIMIT overrides it.
		debug.SetMemoryLimit(defaultMemoryLimit)
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
	log := newLogger(cfg.Log, nil)
	m := metrics.New(version)
	r, err := relay.New(cfg, log, m)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if cfg.HTTP.Listen != "" {
		ln, err := net.Listen("tcp", cfg.HTTP.Listen)
		if err != nil {
			return fmt.Errorf("listen http %s: %w", cfg.HTTP.Listen, err)
		}
		srv := &http.Server{Handler: m.Handler(), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				log.Error().Err(err).Msg("http server stopped: /metrics, /healthz and /readyz no longer answer")
			}
		}()
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
		log.Info().Str("listen", ln.Addr().String()).Msg("serving /metrics /healthz /readyz")
	}
	log.Info().Str("name", cfg.Name).Str("version", version).Msg("starting")
	err = r.Run(ctx)
	if err != nil {
		log.Error().Err(err).Int("exit_code", relay.ExitCode(err)).Msg("relay stopped")
		return err
	}
	log.Info().AnErr("cause", context.Cause(ctx)).Msg("stopped")
	return nil
}
