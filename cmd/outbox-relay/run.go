package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/internal/audit"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/internal/relay"
)

// loadConfig parses args with fs, which gains --config, and loads that file.
// For commands built on the flag package: flags may follow positional
// arguments, none of which is accepted; a parse error is a usage error
// (exit 2); --help prints to stdout and returns flag.ErrHelp (exit 0).
func loadConfig(fs *flag.FlagSet, args []string) (config.Config, error) {
	path := fs.String("config", "", "configuration file (YAML)")
	fs.SetOutput(os.Stdout)
	var extra []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return config.Config{}, err
			}
			return config.Config{}, fmt.Errorf("%w: %w", errUsage, err)
		}
		if fs.NArg() == 0 {
			break
		}
		extra = append(extra, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(extra) > 0 {
		return config.Config{}, usageErr("%s takes no arguments, got %q", fs.Name(), strings.Join(extra, " "))
	}
	return loadConfigFile(*path)
}

// loadConfigFile loads the --config file; an empty path is a usage error.
func loadConfigFile(path string) (config.Config, error) {
	if path == "" {
		return config.Config{}, usageErr("--config FILE is required")
	}
	return configErr(config.Load(path))
}

// configErr marks an unreadable configuration file as a configuration error
// (exit 78 in every command, like an invalid one).
func configErr(cfg config.Config, err error) (config.Config, error) {
	if err != nil && !errors.Is(err, errUsage) && !errors.Is(err, config.ErrInvalid) {
		err = fmt.Errorf("%w: %w", config.ErrInvalid, err)
	}
	return cfg, err
}

// configFlag adds --config to cmd.
func configFlag(cmd *cobra.Command) *string {
	p := cmd.Flags().String("config", "", "configuration file (YAML); ${VAR} in values is read from the environment")
	_ = cmd.MarkFlagFilename("config", "yaml", "yml")
	return p
}

// defaultMemoryLimit is the soft Go heap limit of `run` unless GOMEMLIMIT is set.
const defaultMemoryLimit = 96 << 20

// defaultGCPercent is the GC target of `run` unless GOGC is set: with the
// memory limit as the ceiling, a small live heap is collected less often.
const defaultGCPercent = 400

func newRunCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run --config FILE",
		Short: "relay outbox rows to Kafka until SIGINT/SIGTERM",
		Long: `run streams the binlog from the checkpoint (or source.start), publishes every
committed outbox row and stores the position in Kafka. On SIGINT/SIGTERM it
commits the work in hand, writes a final checkpoint and exits 0; SIGHUP,
SIGUSR1 and SIGUSR2 are logged and ignored (docs/cli.md "Signals"). Other exit
codes: 1 error, 2 command-line mistake, 65 fatal data stop, 66 purged
position, 75 transient failure, 78 configuration error (README "Exit codes").`,
		Example: `  outbox-relay run --config relay.yaml
  outbox-relay run --config relay.yaml --print-config
  RELAY_MYSQL_PASSWORD=... outbox-relay run --config relay.yaml --log-format console`,
		Args: noArgs,
	}
	path := configFlag(cmd)
	printCfg := cmd.Flags().Bool("print-config", false, "print the effective configuration, secrets redacted, and exit")
	logFormat := cmd.Flags().String("log-format", "", "override log.format: json | console")
	cpuProfile := cmd.Flags().String("cpuprofile", "", "write a CPU profile to this file until exit (diagnostics)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return runRelay(cmd.OutOrStdout(), *path, *printCfg, *logFormat, *cpuProfile)
	}
	return cmd
}

func runRelay(stdout io.Writer, path string, printCfg bool, logFormat, cpuProfile string) error {
	cfg, err := loadConfigFile(path)
	if err != nil {
		return err // an invalid or unreadable file: exit 78 (execute's line says so)
	}
	if logFormat != "" {
		cfg.Log.Format = config.LogFormat(logFormat)
		if err := cfg.Validate(); err != nil {
			return err
		}
	}
	if printCfg {
		fmt.Fprint(stdout, cfg.Redacted().YAML())
		return nil
	}
	logOut := newPipeWriter(os.Stderr)
	log := newLogger(cfg.Log, logOut)
	last := &lastLine{log: newLogger(cfg.Log, logOut.Final())}
	err = relayUntilStopped(cfg, log, logOut, cpuProfile, last)
	last.say(err, nil) // a way out before the relay ran
	return err
}

// lastLine is the log's last line of `run`, `relay stopped` with the exit
// code (README "Exit codes"): info on a clean stop, error otherwise; said
// once, on every way out once the logger exists.
type lastLine struct {
	log  zerolog.Logger
	said bool
}

func (l *lastLine) say(err, cause error) {
	if l.said {
		return
	}
	l.said = true
	var ev *zerolog.Event
	switch {
	case err == nil:
		ev = l.log.Info().AnErr("cause", cause) // the signal of a clean stop
	case errors.Is(err, errLogClosed):
		ev = l.log.Warn().Err(err) // stopped cleanly; nobody hears it
	default:
		ev = l.log.Error().Err(err)
	}
	ev.Int("exit_code", relay.ExitCode(err)).Msg("relay stopped")
}

// relayUntilStopped runs the relay with its HTTP server, signal watcher
// and background audit until a signal or an error stops it. It says the
// last line (last) once the relay has stopped and its audit has ended,
// before http.exit_grace.
func relayUntilStopped(cfg config.Config, log zerolog.Logger, logOut *pipeWriter, cpuProfile string, last *lastLine) error {
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return fmt.Errorf("create cpu profile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
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
	m := metrics.New(shortVersion())
	r, err := relay.New(cfg, log, m)
	if err != nil {
		return err
	}
	// SIGINT/SIGTERM, or a log stream that broke, stop the relay cleanly;
	// SIGHUP, SIGUSR1/2 are logged and ignored; SIGPIPE is ignored (signals.go).
	ctx, brokenLog, stop := runSignals(context.Background(), &log)
	logOut.onBroken(brokenLog)
	defer stop()

	if cfg.HTTP.Listen != "" {
		ln, err := net.Listen("tcp", cfg.HTTP.Listen)
		if err != nil {
			return fmt.Errorf("listen http %s: %w", cfg.HTTP.Listen, err)
		}
		srv, ln := newHTTPServer(ln, m.Handler(), defaultHTTPLimits)
		served := make(chan struct{})
		go func() {
			defer close(served)
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				log.Error().Err(err).Msg("http server stopped: /metrics, /healthz and /readyz no longer answer")
			}
		}()
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
			<-served // Serve returns as soon as Shutdown has closed the listener
		}()
		log.Info().Str("listen", ln.Addr().String()).Msg("serving /metrics /healthz /readyz")
	}
	log.Info().Str("name", cfg.Name).Str("version", shortVersion()).Msg("starting")
	for _, w := range cfg.TransportWarnings() {
		log.Warn().Str("target", w.Target).Str("fix", w.Fix).Msg("insecure transport: " + w.Detail)
	}
	stopAudit := func() {}
	if cfg.Audit.Interval > 0 {
		// The background audit (read-only; on every instance, the active
		// one and the standbys alike): stopped and joined once the relay
		// has stopped, within its deadline (a run's queries end when their
		// connection closes).
		actx, cancel := context.WithCancel(ctx)
		audited := make(chan struct{})
		go func() {
			defer close(audited)
			audit.Background(actx, cfg, log, m)
		}()
		var once sync.Once
		stopAudit = func() {
			once.Do(func() {
				cancel()
				select {
				case <-audited:
				case <-time.After(10 * time.Second):
					log.Warn().Msg("background audit did not stop within 10s of the relay's stop")
				}
			})
		}
		defer stopAudit()
		log.Info().Dur("interval", cfg.Audit.Interval).Dur("window", cfg.Audit.Window).Msg("background audit on")
	}
	err = r.Run(ctx)
	stopAudit()
	if err != nil {
		last.say(err, nil)
		// Keep /metrics up for http.exit_grace (the deferred shutdown runs
		// after it), so that a scrape sees the stop and its exit code; a
		// signal ends it.
		m.Exiting(relay.ExitCode(err))
		if cfg.HTTP.Listen != "" && cfg.HTTP.ExitGrace > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(cfg.HTTP.ExitGrace):
			}
		}
		return err
	}
	cause := context.Cause(ctx)
	if errors.Is(cause, errLogClosed) {
		// Stopped cleanly, the final checkpoint written: exit 75 so that a
		// supervisor starts it again with a log stream that works.
		err = fmt.Errorf("stopped after the final checkpoint: %w: restart the relay with a working stderr", cause)
	}
	last.say(err, cause)
	return err
}
