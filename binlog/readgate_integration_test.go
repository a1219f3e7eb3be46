//go:build integration

package binlog_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/devdb"
	"github.com/outbox-relay/outbox-relay/schema"
	"github.com/outbox-relay/outbox-relay/source"
)

type gateEnv struct {
	srv   *devdb.Server
	dir   string
	cfg   binlog.Config
	info  *binlog.Server
	rows  int
	total int64
}

func startGateEnv(t *testing.T, ctx context.Context, settings map[string]string, tlsCfg *tls.Config, statements int) *gateEnv {
	t.Helper()
	dir := t.TempDir()
	if settings == nil {
		settings = map[string]string{}
	}
	settings["binlog-row-event-max-size"] = "4194304"
	srv, err := devdb.Start(ctx, devdb.Options{Dir: dir, Settings: settings})
	if errors.Is(err, devdb.ErrNotInstalled) {
		t.Skip("MariaDB not installed")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if pid := gatePid(dir); pid > 0 {
			_ = syscall.Kill(-pid, syscall.SIGCONT)
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
		srv.Stop()
	})
	if err := srv.Exec("CREATE DATABASE app", "CREATE TABLE app.outbox (id BIGINT AUTO_INCREMENT PRIMARY KEY, payload LONGTEXT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	cfg := binlog.Config{Hosts: []string{srv.Addr}, User: "root", Password: devdb.RootPassword, Flavor: "auto",
		Tables: []string{"app.outbox"}, ConnectTimeout: 5 * time.Second, ServerID: 4243, HeartbeatPeriod: time.Second,
		TLS: tlsCfg}
	info, err := source.Inspect(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	const perStatement, payload = 200, gatePayload
	var stmts []string
	for s := range statements {
		var b strings.Builder
		b.WriteString("INSERT INTO app.outbox (payload) VALUES ")
		for i := range perStatement {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, "(REPEAT('%c', %d))", 'a'+s%26, payload)
		}
		stmts = append(stmts, b.String())
	}
	if err := srv.Exec(stmts...); err != nil {
		t.Fatal(err)
	}
	return &gateEnv{srv: srv, dir: dir, cfg: cfg, info: info, rows: statements * perStatement,
		total: int64(statements * perStatement * payload)}
}

func gatePid(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, "mysqld.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

func (e *gateEnv) start(ctx context.Context, from string) (*binlog.Reader, chan []binlog.Event, chan error, context.CancelFunc) {
	r := binlog.NewReader(e.cfg, e.info, schema.New(e.cfg.Tables, nil, nil), nil)
	out := make(chan []binlog.Event)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx, from, out) }()
	return r, out, done, stop
}

func waitHeld(t *testing.T, r *binlog.Reader) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !binlog.ReadAheadHeld(r) {
		if time.Now().After(deadline) {
			t.Fatalf("no read held: %d bytes read", r.Received())
		}
		time.Sleep(time.Millisecond)
	}
}

// drain takes batches, checks row order, until the reader ends or within.
func drain(t *testing.T, out chan []binlog.Event, done chan error, want int, within time.Duration) (int, error, bool) {
	t.Helper()
	next := int64(1)
	timeout := time.After(within)
	for {
		select {
		case batch := <-out:
			for _, ev := range batch {
				if ev.Kind != binlog.KindRows {
					continue
				}
				for _, row := range ev.Rows {
					id, _ := row[0].(int64)
					if id != next {
						t.Fatalf("row %v where %d was due", row[0], next)
					}
					if p, _ := row[1].([]byte); len(p) != gatePayload && len(p) != gateBigRow {
						t.Fatalf("row %d: a payload of %d bytes, not whole", id, len(p))
					}
					next++
				}
			}
			if want > 0 && int(next-1) == want {
				return int(next - 1), nil, false
			}
		case err := <-done:
			return int(next - 1), err, true
		case <-timeout:
			return int(next - 1), nil, false
		}
	}
}

// The same freeze without the gate involved: the reader idle at the head.
func TestReadGateFrozenServerAtHeadEndsReader(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := startGateEnv(t, ctx, nil, nil, 1)
	head, err := source.Inspect(ctx, e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	r, out, done, stop := e.start(ctx, head.Head)
	defer stop()
	// The stream started (the server named its file): the reader waits at the head.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		if file, _ := r.ReadPosition(); file != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stream did not start within 30 s")
		}
	}
	freezeAndWaitEnd(t, e, out, done)
}

// freezeAndWaitEnd freezes e's server (SIGSTOP) and takes what the reader
// hands on until it ends: within 30 s (heartbeat 1 s, watchdog 3 s, go-mysql's
// KILL connection 10 s).
func freezeAndWaitEnd(t *testing.T, e *gateEnv, out chan []binlog.Event, done chan error) {
	t.Helper()
	pid := gatePid(e.dir)
	if pid <= 0 {
		t.Fatal("no pid")
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pid, syscall.SIGCONT)
	start := time.Now()
	n, err, ended := drain(t, out, done, 0, 30*time.Second)
	if !ended {
		dumpStacks(t)
		t.Fatalf("frozen server: the reader did not end within 30 s after %d rows", n)
	}
	t.Logf("ended after %s at row %d: %v", time.Since(start), n, err)
}

// The server ends while a read is held: frozen (SIGSTOP: a hung host, a VM
// pause; TCP still accepts: once the relay takes again, the watchdog must
// notice the silence), killed (a crash), or its dump thread killed. The
// reader must end with an error, the rows before it in order.
func TestReadGateServerEndWhileReadHeldEndsReader(t *testing.T) {
	for _, c := range []struct {
		name string
		end  func(t *testing.T, e *gateEnv)
	}{
		{"frozen", nil},
		{"killed", func(t *testing.T, e *gateEnv) { e.srv.Kill() }},
		{"dump thread killed", func(t *testing.T, e *gateEnv) {
			rows, err := e.srv.Query("SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'")
			if err != nil || len(rows) != 1 {
				t.Fatalf("processlist %v %v", rows, err)
			}
			if err := e.srv.Exec("KILL " + rows[0][0]); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			e := startGateEnv(t, ctx, nil, nil, 30)
			r, out, done, stop := e.start(ctx, e.info.Head)
			defer stop()
			waitHeld(t, r)
			if c.end == nil {
				freezeAndWaitEnd(t, e, out, done)
				return
			}
			c.end(t, e)
			n, err, ended := drain(t, out, done, 0, 30*time.Second)
			if !ended {
				t.Fatalf("the reader did not end within 30 s, %d rows", n)
			}
			t.Logf("ended at row %d: %v", n, err)
		})
	}
}

func selfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	_ = os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	_ = os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600)
	return
}

// TLS: held, stopped while held, then held and taken whole in order.
func TestReadGateOverTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	certs := t.TempDir()
	cert, key := selfSigned(t, certs)
	e := startGateEnv(t, ctx, map[string]string{"ssl-cert": cert, "ssl-key": key, "ssl-ca": cert},
		&tls.Config{InsecureSkipVerify: true}, 30)
	if err := e.srv.Exec("CREATE USER tlsrelay@'%' IDENTIFIED BY 'pw' REQUIRE SSL", "GRANT ALL ON *.* TO tlsrelay@'%'"); err != nil {
		t.Fatal(err)
	}
	e.cfg.User, e.cfg.Password = "tlsrelay", "pw"
	boundHolds(t, ctx, e, false)
}

func dumpStacks(t *testing.T) {
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
	for _, g := range strings.Split(b.String(), "\n\n") {
		if strings.Contains(g, "go-mysql") || strings.Contains(g, "binlog.") {
			t.Log(g)
		}
	}
}

// The watchdog does not take a busy relay for a silent server. The failure
// guarded against: the relay busy (nothing taken from the reader) for
// longer than the watchdog's silence with small transactions: go-mysql
// stops on its full channel of 512 events before the read-ahead bound (no
// read held), and the watchdog takes the relay's own pause for a silent
// server: the connection is closed and the attempt ends, though the server
// was fine all along.
func TestWatchdogTakesNoBusyRelayForSilentServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := startGateEnv(t, ctx, nil, nil, 0)
	const txs = 400 // 5 events each: 2000 events, about 0.5 MB
	stmts := make([]string, txs)
	for i := range stmts {
		stmts[i] = fmt.Sprintf("INSERT INTO app.outbox (payload) VALUES (REPEAT('x', %d))", gatePayload)
	}
	if err := e.srv.Exec(stmts...); err != nil {
		t.Fatal(err)
	}
	r, out, done, stop := e.start(ctx, e.info.Head)
	defer stop()
	time.Sleep(8 * time.Second) // the loop busy (a slow Kafka commit): watchdog silence is 3 s
	if binlog.ReadAheadHeld(r) {
		t.Log("a read is held")
	}
	t.Logf("%d bytes read, held %v", r.Received(), binlog.ReadAheadHeld(r))
	n, err, ended := drain(t, out, done, txs, 20*time.Second)
	if ended || n != txs {
		t.Fatalf("after a busy pause of the relay: %d of %d rows, reader ended: %v (%v)", n, txs, ended, err)
	}
	// And the reader is still streaming a second later.
	select {
	case err := <-done:
		t.Fatalf("the reader ended after the pause: %v", err)
	case <-time.After(2 * time.Second):
	}
}
