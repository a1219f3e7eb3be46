package main

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/internal/hostiledb"
	"github.com/outbox-relay/outbox-relay/internal/kafkatest"
	"github.com/outbox-relay/outbox-relay/internal/relay"
)

const loginSecret = "Pw-of-the-replication-user-7731"

// loginConfig writes a configuration reading from the hostile server at
// addr and writing to brokers (plaintext both, loopback).
func loginConfig(t *testing.T, addr string, brokers []string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "relay.yaml")
	yaml := fmt.Sprintf("name: login\nsource:\n  hosts: [%q]\n  user: relay\n  password: %s\n  server_id: 4242\n  tables: [app.outbox]\n"+
		"kafka:\n  brokers: [%q]\n  request_timeout: 5s\nhttp:\n  listen: \"\"\n", addr, loginSecret, strings.Join(brokers, `", "`))
	if err := os.WriteFile(f, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// `check` and `run` against a server that asks for mysql_clear_password
// over plaintext: both refuse, say why and what to do, and the password
// never leaves the process.
func TestCheckAndRunRefuseCleartextLogin(t *testing.T) {
	srv := hostiledb.Start(t, hostiledb.ClearPassword)
	kc := kafkatest.Cluster(t, kfake.NumBrokers(1))
	cfg := loginConfig(t, srv.Addr, kc.ListenAddrs())

	code, out, errOut := runCapturing(t, "check", "--config", cfg)
	if code == 0 || !strings.Contains(out+errOut, "mysql_clear_password") || !strings.Contains(out+errOut, "source.tls") {
		t.Fatalf("check: exit %d, output %q %q: want a failure naming mysql_clear_password and source.tls", code, out, errOut)
	}
	logins := srv.Logins()
	if logins == 0 {
		t.Fatal("check never reached the server")
	}
	code, out, errOut = run(t, "run", "--config", cfg)
	if code != relay.ExitConfig || !strings.Contains(out+errOut, "insecure source login refused") {
		t.Fatalf("run: exit %d, output %q %q: want the refusal, exit %d (configuration)", code, out, errOut, relay.ExitConfig)
	}
	if srv.Logins() == logins {
		t.Fatal("run never reached the server")
	}
	if strings.Contains(string(srv.Received()), loginSecret) {
		t.Fatal("the server received the password")
	}
}

// `check` against a server asking for caching_sha2_password's full
// authentication with a trailing byte (01 04 00) over plaintext: it fails
// naming the refusal and the settings that would allow the login, not
// "access denied", and the server cannot decrypt the password from
// anything it received.
func TestCheckRefusesFullAuthenticationWithoutAPinnedKey(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	srv := hostiledb.StartScript(t, hostiledb.Script{Plugin: "caching_sha2_password", Keys: []*rsa.PrivateKey{key}, Steps: []hostiledb.Step{
		hostiledb.Read, hostiledb.Send([]byte("\x01\x04\x00")), hostiledb.Read,
		hostiledb.Send(append([]byte{1}, hostiledb.PEM(&key.PublicKey)...)), hostiledb.Read, hostiledb.AccessDenied}})
	cfg := loginConfig(t, srv.Addr, []string{"127.0.0.1:1"})
	code, out, errOut := runCapturing(t, "check", "--config", cfg)
	if code == 0 || !strings.Contains(out+errOut, "insecure source login refused") || !strings.Contains(out+errOut, "source.server_public_key_file") {
		t.Fatalf("check: exit %d, output %q %q: want the refusal naming source.server_public_key_file", code, out, errOut)
	}
	if how := srv.Leaked(loginSecret); how != "" {
		t.Fatalf("the server obtained the password: %s", how)
	}
}

// A login opt-in that weakens the transport (here
// source.allow_public_key_retrieval on a plaintext connection): `check`
// lists it as a WARN transport item with its fix, and `run` logs it at
// start, before it connects.
func TestCheckAndRunWarnAboutInsecureTransport(t *testing.T) {
	srv := hostiledb.Start(t, hostiledb.ClearPassword)
	kc := kafkatest.Cluster(t, kfake.NumBrokers(1))
	cfg := loginConfig(t, srv.Addr, kc.ListenAddrs())
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b = []byte(strings.Replace(string(b), "  server_id: 4242\n", "  server_id: 4242\n  allow_public_key_retrieval: true\n", 1))
	if err := os.WriteFile(cfg, b, 0o600); err != nil {
		t.Fatal(err)
	}
	const warned = "source.allow_public_key_retrieval: the password is encrypted with any RSA key"
	_, out, errOut := runCapturing(t, "check", "--config", cfg)
	var item string
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, warned) {
			item = line
		}
	}
	if !strings.Contains(item, "WARN") || !strings.Contains(item, "transport") {
		t.Fatalf("check lists no WARN transport item saying %q:\n%s%s", warned, out, errOut)
	}
	errOut = stderrOf(t, func() { _, out, _ = run(t, "run", "--config", cfg) })
	var logged string
	for _, line := range strings.Split(out+errOut, "\n") {
		if strings.Contains(line, "insecure transport") && strings.Contains(line, warned) {
			logged = line
		}
	}
	if !strings.Contains(logged, `"level":"warn"`) || !strings.Contains(logged, "server_public_key_file") {
		t.Fatalf("run logged no warning naming %q and its fix:\n%s%s", warned, out, errOut)
	}
}

// A server that answers with endless continuation packets makes `check`
// fail with the bound named, not grow without limit.
func TestCheckStopsAnEndlessPacket(t *testing.T) {
	srv := hostiledb.Start(t, hostiledb.EndlessPacket)
	cfg := loginConfig(t, srv.Addr, []string{"127.0.0.1:1"})
	code, out, errOut := runCapturing(t, "check", "--config", cfg)
	if code == 0 || !strings.Contains(out+errOut, "source packet over the relay's bound") {
		t.Fatalf("check: exit %d, output %q %q: want the packet bound", code, out, errOut)
	}
	if srv.Sent() > 64<<20 {
		t.Fatalf("the server got %d bytes of its endless packet taken, want a bounded read", srv.Sent())
	}
}

// stderrOf returns what fn wrote to the process's stderr (the log of `run`).
func stderrOf(t *testing.T, fn func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stderr
	os.Stderr = w
	done := make(chan []byte)
	go func() {
		var b bytes.Buffer
		_, _ = io.Copy(&b, r)
		done <- b.Bytes()
	}()
	fn()
	os.Stderr = saved
	w.Close()
	return string(<-done)
}

// runCapturing is run with the process's stdout captured too (check
// prints its items there).
func runCapturing(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stdout
	os.Stdout = w
	done := make(chan []byte)
	go func() {
		var b bytes.Buffer
		_, _ = io.Copy(&b, r)
		done <- b.Bytes()
	}()
	code, stdout, stderr = run(t, args...)
	os.Stdout = saved
	w.Close()
	return code, stdout + string(<-done), stderr
}

// A server that lets the relay in and then answers its queries with a
// packet go-mysql indexes past (a one-byte OK), or declares a column count
// go-mysql would allocate for (2^34: a fatal "out of memory"): `check` and
// `run` end with the refusal named, exit 78 for `run`, and the process
// survives to say so.
func TestCheckAndRunSurviveHostileAnswers(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	for _, v := range []struct {
		name   string
		answer []byte
		want   string
	}{
		{"a one-byte OK", []byte{0x00}, "source answer the MySQL client library cannot read"},
		{"2^34 columns", []byte{0xfe, 0, 0, 0, 0, 4, 0, 0, 0}, "source answer over the relay's bound"},
	} {
		t.Run(v.name, func(t *testing.T) {
			srv := hostiledb.StartScript(t, hostiledb.Script{Plugin: "mysql_native_password",
				Steps: []hostiledb.Step{hostiledb.Read, hostiledb.OK}, Answers: [][][]byte{{v.answer}}})
			cfg := loginConfig(t, srv.Addr, kc.ListenAddrs())
			code, out, errOut := runCapturing(t, "check", "--config", cfg)
			if code == 0 || !strings.Contains(out+errOut, v.want) {
				t.Fatalf("check: exit %d, output %q %q: want a failure naming %q", code, out, errOut, v.want)
			}
			code, out, errOut = run(t, "run", "--config", cfg)
			if code != relay.ExitConfig || !strings.Contains(out+errOut, v.want) {
				t.Fatalf("run: exit %d, output %q %q: want %q, exit %d (configuration)", code, out, errOut, v.want, relay.ExitConfig)
			}
		})
	}
}
