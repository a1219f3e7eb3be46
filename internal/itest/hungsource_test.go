//go:build integration

package itest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/source"
)

// A source host that accepts TCP and never answers, at each point of the
// conversation: every wait on it is bounded, the relay says which host and
// which phase, tries the next host, and stops when asked (hungsource.go).

var hangPoints = []struct {
	name  string
	at    HangAt
	phase string // the phase the relay names
}{
	{"accepts and never answers", HangAtAccept, "login to"},
	{"greets and never answers the login", HangAtLogin, "login to"},
	{"logs in and never answers the first query", HangAtFirstQuery, "query on"},
}

// phaseRegister is the phase of a replication connection's registration.
const phaseRegister = "start the binlog stream on"

// hungTimings are short source bounds, so that the tests wait little.
func hungTimings(cfg *config.Config) {
	cfg.Source.ConnectTimeout = time.Second
	cfg.Source.QueryTimeout = 2 * time.Second
}

// noAnswer is what the relay says of hung at phase.
func noAnswer(phase string, hung *HungSource, cfg config.Config) string {
	limit := cfg.Source.ConnectTimeout
	if phase == "query on" || phase == phaseRegister {
		limit = cfg.Source.QueryTimeout
	}
	return fmt.Sprintf("%s %s: no answer within %s", phase, hung.Addr, limit)
}

// grepLines returns the last n lines of logs that contain want.
func grepLines(logs, want string, n int) string {
	var out []string
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, want) {
			out = append(out, line)
		}
	}
	return strings.Join(out[max(0, len(out)-n):], "\n")
}

// warnings counts the warn-level log lines that contain want.
func warnings(logs, want string) int {
	n := 0
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, `"level":"warn"`) && strings.Contains(line, want) {
			n++
		}
	}
	return n
}

// With source.hosts [hung, good], the relay gives the hung host up within
// its bound, says so naming the host and the phase, and streams from the
// next one: every row is published once.
func TestRunFailsOverFromASourceHostThatDoesNotAnswer(t *testing.T) {
	BrokerOnlyAsSink(t)
	for _, hp := range hangPoints {
		t.Run(hp.name, func(t *testing.T) {
			k, s, cfg := env.Pipeline(t)
			hungTimings(&cfg)
			hung := StartHungSource(t, env.DB.Addr, hp.at)
			cfg.Source.Hosts = []string{hung.Addr, env.DB.Addr}
			began := time.Now()
			p := RunRelay(t, cfg)
			p.WaitReady(t)
			t.Logf("streaming from the second host %s after the first hung", time.Since(began).Round(time.Millisecond))
			want := noAnswer(hp.phase, hung, cfg)
			if warnings(p.Logs(), want) == 0 {
				t.Fatalf("no warning %q; the log:\n%s", want, tailLines(p.Logs(), 20))
			}
			if _, err := s.Write(context.Background(), WriteOptions{Writers: 2, Transactions: 20}); err != nil {
				t.Fatal(err)
			}
			WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
			if rep := Compare(t, s, Consume(t, k.Brokers, cfg.Router.TopicPrefix)); !rep.OK() || rep.Received == 0 {
				t.Fatal(rep)
			}
		})
	}
}

// With source.hosts [host, good] where host answers every query but never
// starts a binlog stream (its registration as a replica hangs), the relay
// gives the host up within source.query_timeout, says so naming the host
// and the phase, and streams from the next one instead of choosing the
// same host again and again: every row is published once. Whether the
// stream's silence bound (3 x source.heartbeat_period, 15s by default) is
// shorter than source.query_timeout (30s by default) or not.
func TestRunFailsOverFromASourceHostThatNeverStartsTheBinlogStream(t *testing.T) {
	BrokerOnlyAsSink(t)
	for _, tc := range []struct {
		name      string
		heartbeat time.Duration
	}{
		{"silence bound past the query bound", 5 * time.Second},
		{"silence bound within the query bound", 250 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, s, cfg := env.Pipeline(t)
			hungTimings(&cfg)
			cfg.Source.HeartbeatPeriod = tc.heartbeat
			hung := StartHungSource(t, env.DB.Addr, HangAtRegister)
			cfg.Source.Hosts = []string{hung.Addr, env.DB.Addr}
			p := RunRelay(t, cfg)
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("the relay's warnings:\n%s", grepLines(p.Logs(), `"level":"warn"`, 20))
				}
			})
			p.WaitReady(t) // the start position is pinned: the rows below come after it
			if _, err := s.Write(context.Background(), WriteOptions{Writers: 2, Transactions: 20}); err != nil {
				t.Fatal(err)
			}
			began := time.Now()
			WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
			t.Logf("published through the second host %s after the writes", time.Since(began).Round(time.Millisecond))
			want := noAnswer(phaseRegister, hung, cfg)
			if warnings(p.Logs(), want) == 0 {
				t.Fatalf("no warning %q", want)
			}
			if rep := Compare(t, s, Consume(t, k.Brokers, cfg.Router.TopicPrefix)); !rep.OK() || rep.Received == 0 {
				t.Fatal(rep)
			}
		})
	}
}

// With a hung host alone, a fresh start stops by itself within the bounds
// (a source unreachable before the first start fails fast), naming the
// host and the phase.
func TestRunStopsWhenItsOnlySourceHostDoesNotAnswer(t *testing.T) {
	BrokerOnlyAsSink(t)
	for _, hp := range hangPoints {
		t.Run(hp.name, func(t *testing.T) {
			_, _, cfg := env.Pipeline(t)
			hungTimings(&cfg)
			hung := StartHungSource(t, env.DB.Addr, hp.at)
			cfg.Source.Hosts = []string{hung.Addr}
			began := time.Now()
			p := RunRelay(t, cfg)
			err := p.StoppedWith(t)
			took := time.Since(began)
			want := noAnswer(hp.phase, hung, cfg)
			if !errors.Is(err, source.ErrUnreachable) || !strings.Contains(err.Error(), want) {
				t.Fatalf("stopped with %v, want source unreachable naming %q", err, want)
			}
			if took > 30*time.Second {
				t.Fatalf("took %s to give up", took)
			}
			t.Logf("stopped after %s: %v", took.Round(time.Millisecond), err)
		})
	}
}

// SIGTERM while the relay waits on a host that accepted the connection and
// never answers (bounds far away): the process ends at once, cleanly.
func TestSIGTERMEndsARelayWaitingOnASourceHostThatDoesNotAnswer(t *testing.T) {
	BrokerOnlyAsSink(t)
	for _, hp := range hangPoints {
		t.Run(hp.name, func(t *testing.T) {
			_, _, cfg := env.Pipeline(t)
			cfg.Source.ConnectTimeout = 5 * time.Minute
			cfg.Source.QueryTimeout = 5 * time.Minute
			hung := StartHungSource(t, env.DB.Addr, hp.at)
			cfg.Source.Hosts = []string{hung.Addr}
			p := env.StartProc(t, WriteConfig(t, cfg))
			Eventually(t, time.Minute, func() error {
				if p.Exited() {
					t.Fatalf("relay exited: %s", p.Output())
				}
				if hung.Accepted() == 0 {
					return errors.New("the relay has not connected to the hung host yet")
				}
				return nil
			})
			began := time.Now()
			code, err := p.Terminate(10 * time.Second)
			if err != nil || code != 0 {
				t.Fatalf("SIGTERM: exit %d (%v) after %s:\n%s", code, err, time.Since(began), p.Output())
			}
			t.Logf("exited 0 %s after SIGTERM", time.Since(began).Round(time.Millisecond))
		})
	}
}

// SIGTERM while the relay tries a replication connection to learn whether
// the server grants REPLICATION SLAVE (the grants do not show it) and the
// host never starts that stream (bounds far away): the process ends at
// once, cleanly.
func TestSIGTERMEndsARelayWhosePrivilegeTryWaitsOnTheSource(t *testing.T) {
	BrokerOnlyAsSink(t)
	db := startServer(t, nil)
	k := StartKafka(t)
	cfg := env.RelayConfig(k, "app.outbox")
	cfg.Source.User, cfg.Source.Password = "weak", "weak-pw" // SELECT only: the relay tries the replication connection
	cfg.Source.ConnectTimeout = 5 * time.Minute
	cfg.Source.QueryTimeout = 5 * time.Minute
	hung := StartHungSource(t, db.Addr, HangAtRegister)
	cfg.Source.Hosts = []string{hung.Addr}
	p := env.StartProc(t, WriteConfig(t, cfg))
	Eventually(t, time.Minute, func() error {
		if p.Exited() {
			t.Fatalf("relay exited: %s", p.Output())
		}
		if hung.Registrations() == 0 {
			return errors.New("the relay has not tried a replication connection yet")
		}
		return nil
	})
	began := time.Now()
	code, err := p.Terminate(10 * time.Second)
	if err != nil || code != 0 {
		t.Fatalf("SIGTERM: exit %d (%v) after %s:\n%s", code, err, time.Since(began), p.Output())
	}
	t.Logf("exited 0 %s after SIGTERM", time.Since(began).Round(time.Millisecond))
}

// A single source host that freezes mid-stream (a SIGSTOPped mysqld: the
// kernel still accepts connections, nothing answers): the silent stream is
// dropped, each reconnect gives up within source.connect_timeout with a
// warning naming the host and the phase, /healthz fails once the relay has
// been connecting past http.stall_timeout, and SIGTERM ends it at once.
// Thawed, a restarted relay publishes everything exactly once.
func TestRelayWithAFrozenSourceHostSaysSoAndStops(t *testing.T) {
	BrokerOnlyAsSink(t)
	k, s, cfg := env.Pipeline(t)
	hungTimings(&cfg)
	cfg.Kafka.RequestTimeout = 3 * time.Second
	cfg.HTTP.StallTimeout = 5 * time.Second
	cfg.HTTP.Listen = freeAddr(t)
	hung := StartHungSource(t, env.DB.Addr, HangNever)
	cfg.Source.Hosts = []string{hung.Addr}
	path := WriteConfig(t, cfg)
	p := env.StartProc(t, path)
	waitStarted(t, p, cfg)
	if _, err := s.Write(context.Background(), WriteOptions{Writers: 2, Transactions: 20, Tag: "before"}); err != nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)

	hung.Freeze()
	frozenAt := time.Now()
	// Written while frozen: the relay cannot see them until thawed.
	if _, err := s.Write(context.Background(), WriteOptions{Writers: 2, Transactions: 10, Tag: "frozen"}); err != nil {
		t.Fatal(err)
	}
	want := noAnswer("login to", hung, cfg)
	Eventually(t, time.Minute, func() error {
		if p.Exited() {
			t.Fatalf("relay exited: %s", p.Output())
		}
		if n := warnings(p.Output(), want); n < 2 {
			return fmt.Errorf("%d warnings %q, want repeated attempts", n, want)
		}
		return nil
	})
	t.Logf("two bounded reconnect attempts within %s of the freeze", time.Since(frozenAt).Round(time.Millisecond))
	Eventually(t, time.Minute, func() error {
		code, body := httpGet(t, "http://"+cfg.HTTP.Listen+"/healthz")
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "connecting for") || !strings.Contains(body, "no answer within") {
			return fmt.Errorf("/healthz %d %q", code, body)
		}
		return nil
	})
	t.Logf("/healthz 503 %s after the freeze", time.Since(frozenAt).Round(time.Millisecond))
	began := time.Now()
	code, err := p.Terminate(10 * time.Second)
	if err != nil || code != 0 {
		t.Fatalf("SIGTERM while frozen: exit %d (%v) after %s", code, err, time.Since(began))
	}
	t.Logf("exited 0 %s after SIGTERM", time.Since(began).Round(time.Millisecond))

	hung.Thaw()
	p = env.StartProc(t, path)
	if _, err := s.Write(context.Background(), WriteOptions{Writers: 2, Transactions: 10, Tag: "after"}); err != nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, env.DB), 2*time.Minute)
	if rep := Compare(t, s, Consume(t, k.Brokers, cfg.Router.TopicPrefix)); !rep.OK() {
		t.Fatal(rep)
	}
	if _, err := p.Terminate(time.Minute); err != nil {
		t.Fatal(err)
	}
}

// A single source host that answers every query but never starts a binlog
// stream (its registration as a replica hangs): the relay is never ready
// (it streams nothing), /healthz fails once it has been connecting past
// http.stall_timeout, naming the host and the phase, and SIGTERM ends it
// at once.
func TestRelayWhoseSourceNeverStartsTheBinlogStreamIsNeitherReadyNorHealthy(t *testing.T) {
	BrokerOnlyAsSink(t)
	_, _, cfg := env.Pipeline(t)
	hungTimings(&cfg)
	cfg.Kafka.RequestTimeout = 3 * time.Second
	cfg.HTTP.StallTimeout = 5 * time.Second
	cfg.HTTP.Listen = freeAddr(t)
	hung := StartHungSource(t, env.DB.Addr, HangAtRegister)
	cfg.Source.Hosts = []string{hung.Addr}
	p := env.StartProc(t, WriteConfig(t, cfg))
	began := time.Now()
	want := noAnswer(phaseRegister, hung, cfg)
	Eventually(t, time.Minute, func() error {
		if p.Exited() {
			t.Fatalf("relay exited: %s", p.Output())
		}
		if code, body := httpGet(t, "http://"+cfg.HTTP.Listen+"/readyz"); code == http.StatusOK {
			t.Fatalf("/readyz %d %q %s after the start: ready without a binlog stream", code, body, time.Since(began).Round(time.Millisecond))
		}
		code, body := httpGet(t, "http://"+cfg.HTTP.Listen+"/healthz")
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "connecting for") || !strings.Contains(body, want) {
			return fmt.Errorf("/healthz %d %q", code, body)
		}
		return nil
	})
	t.Logf("/healthz 503 %s after the start", time.Since(began).Round(time.Millisecond))
	stopped := time.Now()
	code, err := p.Terminate(10 * time.Second)
	if err != nil || code != 0 {
		t.Fatalf("SIGTERM: exit %d (%v) after %s", code, err, time.Since(stopped))
	}
}

// `check` against a hung host says what it checks as it goes and fails
// within the bounds, naming the host and the phase.
func TestCheckNamesASourceHostThatDoesNotAnswer(t *testing.T) {
	BrokerOnlyAsSink(t)
	for _, hp := range hangPoints {
		t.Run(hp.name, func(t *testing.T) {
			_, _, cfg := env.Pipeline(t)
			hungTimings(&cfg)
			hung := StartHungSource(t, env.DB.Addr, hp.at)
			cfg.Source.Hosts = []string{hung.Addr}
			path := WriteConfig(t, cfg)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, env.Binary, "check", "--config", path)
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			began := time.Now()
			err := cmd.Run()
			took := time.Since(began)
			if ctx.Err() != nil {
				t.Fatalf("check still running after %s; stdout:\n%s\nstderr:\n%s", took, out.String(), errb.String())
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 {
				t.Fatalf("check: %v, want exit 1; stdout:\n%s", err, out.String())
			}
			if want := noAnswer(hp.phase, hung, cfg); !strings.Contains(out.String(), want) {
				t.Fatalf("the report does not name %q:\n%s", want, out.String())
			}
			if want := "checking source host " + hung.Addr; !strings.Contains(errb.String(), want) {
				t.Fatalf("stderr does not say %q:\n%s", want, errb.String())
			}
			t.Logf("check failed after %s", took.Round(time.Millisecond))
		})
	}
}

func httpGet(t testing.TB, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
