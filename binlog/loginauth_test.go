package binlog

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/server"

	"github.com/outbox-relay/outbox-relay/internal/hostiledb"
)

var (
	keysOnce sync.Once
	// attackerKey, otherKey: keys a hostile server holds; pinnedKey: the
	// real server's, whose private part the hostile server lacks.
	attackerKey, otherKey, pinnedKey *rsa.PrivateKey
)

func testKeys(t *testing.T) {
	keysOnce.Do(func() {
		for _, k := range []**rsa.PrivateKey{&attackerKey, &otherKey, &pinnedKey} {
			var err error
			if *k, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
				panic(err)
			}
		}
	})
}

func der(t *testing.T, k *rsa.PrivateKey) []byte {
	t.Helper()
	b, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// hostileLogins are the login exchanges a hostile server (or anyone in the
// middle of a plaintext connection) plays to get the password: every
// variant of caching_sha2_password's full-authentication request and key
// packet, sha256_password, auth switches, odd nonces and odd packet
// boundaries. asks: the server asks for the password itself (in cleartext
// or encrypted), which a relay without a pinned key refuses by name.
func hostileLogins(t *testing.T) []hostileLogin {
	testKeys(t)
	const sha2, sha256, native = "caching_sha2_password", "sha256_password", "mysql_native_password"
	R, OK, AD := hostiledb.Read, hostiledb.OK, hostiledb.AccessDenied
	send := hostiledb.Send
	own, other, pinned := hostiledb.PEM(&attackerKey.PublicKey), hostiledb.PEM(&otherKey.PublicKey), hostiledb.PEM(&pinnedKey.PublicKey)
	key := func(prefix string, pem []byte) hostiledb.Step { return send(append([]byte(prefix), pem...)) }
	full := func(req string, keyStep hostiledb.Step) []hostiledb.Step {
		return []hostiledb.Step{R, send([]byte(req)), R, keyStep, R, AD}
	}
	nonce2 := []byte("ZYXWVUTSRQPONMLKJIHG\x00")
	ed := []byte(strings.Repeat("e", 32))
	truncated := []byte("\x0a8.0.36\x00\x01\x00\x00\x00abcdefgh\x00\x0f\xa2\xff\x02\x00\x08\x00\x15")
	caps := hostiledb.Capabilities
	pre41 := []byte("\x0a8.0.36\x00\x01\x00\x00\x00abcdefgh\x00\x00\x02") // a greeting that ends after the capabilities
	return []hostileLogin{
		{"full auth 01 04", true, hostiledb.Script{Plugin: sha2, Steps: full("\x01\x04", key("\x01", own))}},
		{"full auth 01 04 00", true, hostiledb.Script{Plugin: sha2, Steps: full("\x01\x04\x00", key("\x01", own))}},
		{"full auth 01 04 and more bytes", true, hostiledb.Script{Plugin: sha2, Steps: full("\x01\x04\xff\x01\x04", key("\x01", own))}},
		{"full auth, key packet X newline PEM", true, hostiledb.Script{Plugin: sha2, Steps: full("\x01\x04", key("X\n", own))}},
		{"full auth, key packet PEM without prefix", true, hostiledb.Script{Plugin: sha2, Steps: full("\x01\x04", key("", own))}},
		{"full auth, key packet 00 PEM", false, hostiledb.Script{Plugin: sha2, Steps: full("\x01\x04", key("\x00", own))}},
		{"full auth, another valid key", true, hostiledb.Script{Plugin: sha2, Steps: full("\x01\x04", key("\x01", other))}},
		{"full auth, the pinned key sent back", true, hostiledb.Script{Plugin: sha2, Steps: full("\x01\x04", key("\x01", pinned))}},
		{"full auth, two keys in the key packet", true, hostiledb.Script{Plugin: sha2, Steps: full("\x01\x04", key("\x01", append(append([]byte{}, pinned...), own...)))}},
		{"full auth, key packet without PEM", true, hostiledb.Script{Plugin: sha2, Steps: full("\x01\x04", key("\x01", []byte("no key here")))}},
		{"full auth, empty key packet", true, hostiledb.Script{Plugin: sha2, Steps: full("\x01\x04", send(nil))}},
		{"full auth, key sent unasked in the same write", false, hostiledb.Script{Plugin: sha2, Steps: []hostiledb.Step{R,
			{Send: []byte("\x01\x04"), Hold: true}, key("\x01", own), R, R, AD}}},
		{"full auth in one-byte pieces", true, hostiledb.Script{Plugin: sha2, Steps: []hostiledb.Step{R,
			{Send: []byte("\x01\x04"), Chunk: 1}, R, {Send: append([]byte{1}, own...), Chunk: 7}, R, AD}}},
		{"full auth twice", true, hostiledb.Script{Plugin: sha2, Steps: []hostiledb.Step{R,
			send([]byte("\x01\x04")), R, key("\x01", pinned), R, send([]byte("\x01\x04")), R, key("\x01", own), R, AD}}},
		{"full auth, then OK", true, hostiledb.Script{Plugin: sha2, Steps: []hostiledb.Step{R, send([]byte("\x01\x04")), R, key("\x01", own), R, OK}}},
		{"full auth, the key packet an auth switch to cleartext", true, hostiledb.Script{Plugin: sha2, Steps: []hostiledb.Step{R,
			send([]byte("\x01\x04")), R, send(hostiledb.Switch("mysql_clear_password", nonce2)), R, OK}}},
		{"fast auth, then full auth", false, hostiledb.Script{Plugin: sha2, Steps: []hostiledb.Step{R,
			send([]byte("\x01\x03")), send([]byte("\x01\x04")), R, key("\x01", own), R, OK}}},
		{"sha256_password, a key packet without a key, then OK", false, hostiledb.Script{Plugin: sha256, Steps: []hostiledb.Step{R,
			send([]byte("\x01")), R, OK}}},
		{"a login packet over the login bound", false, hostiledb.Script{Plugin: sha2, Steps: []hostiledb.Step{R,
			key("\x01\x04", []byte(strings.Repeat("k", 70000))), R, AD}}},
		{"fast auth", false, hostiledb.Script{Plugin: sha2, Steps: []hostiledb.Step{R, send([]byte("\x01\x03")), OK}}},
		{"more data 01 05", false, hostiledb.Script{Plugin: sha2, Steps: full("\x01\x05", key("\x01", own))}},
		{"another first byte 02 04", false, hostiledb.Script{Plugin: sha2, Steps: full("\x02\x04", key("\x01", own))}},
		{"empty packet", true, hostiledb.Script{Plugin: sha2, Steps: full("", key("\x01", own))}},
		{"sha256_password, key on request", true, hostiledb.Script{Plugin: sha256, Steps: []hostiledb.Step{R, key("\x01", own), R, AD}}},
		{"sha256_password, key without 01", false, hostiledb.Script{Plugin: sha256, Steps: []hostiledb.Step{R, key("", own), R, AD}}},
		{"sha256_password, 01 04", true, hostiledb.Script{Plugin: sha256, Steps: []hostiledb.Step{R, send([]byte("\x01\x04")), R, key("\x01", own), R, AD}}},
		{"switch to caching_sha2_password", true, hostiledb.Script{Plugin: native, Steps: []hostiledb.Step{R,
			send(hostiledb.Switch(sha2, nonce2)), R, send([]byte("\x01\x04")), R, key("\x01", own), R, AD}}},
		{"switch to caching_sha2_password, key at once", true, hostiledb.Script{Plugin: native, Steps: []hostiledb.Step{R,
			send(hostiledb.Switch(sha2, nonce2)), R, key("\x01\x04", own), R, key("\x01", own), R, AD}}},
		{"switch to sha256_password", true, hostiledb.Script{Plugin: native, Steps: []hostiledb.Step{R,
			send(hostiledb.Switch(sha256, nonce2)), R, key("\x01", own), R, AD}}},
		{"switch to mysql_clear_password", true, hostiledb.Script{Plugin: sha2, Steps: []hostiledb.Step{R,
			send(hostiledb.Switch("mysql_clear_password", nonce2)), R, OK}}},
		{"switch to dialog", false, hostiledb.Script{Plugin: native, Steps: []hostiledb.Step{R,
			send(hostiledb.Switch("dialog", []byte("\x04Password: "))), R, OK}}},
		{"switch to mysql_native_password, 5-byte nonce", true, hostiledb.Script{Plugin: sha2, Steps: []hostiledb.Step{R,
			send(hostiledb.Switch(native, []byte("abcde\x00"))), R, AD}}},
		{"switch to mysql_native_password, no nonce", false, hostiledb.Script{Plugin: sha2, Steps: []hostiledb.Step{R,
			send([]byte("\xfemysql_native_password")), R, AD}}},
		{"switch to mysql_native_password, 64-byte nonce", false, hostiledb.Script{Plugin: sha2, Steps: []hostiledb.Step{R,
			send(hostiledb.Switch(native, []byte(strings.Repeat("n", 64)))), R, AD}}},
		{"switch to client_ed25519", false, hostiledb.Script{Plugin: native, Steps: []hostiledb.Step{R,
			send(hostiledb.Switch("client_ed25519", ed)), R, AD}}},
		{"switch to caching_sha2_password, 8-byte nonce", true, hostiledb.Script{Plugin: native, Steps: []hostiledb.Step{R,
			send(hostiledb.Switch(sha2, []byte("12345678\x00"))), R, AD}}},
		{"more data after mysql_native_password, then a read", false, hostiledb.Script{Plugin: native, Steps: []hostiledb.Step{R,
			send(hostiledb.Switch(native, nonce2)), R, key("\x01\x04", own), R, AD}}},
		{"switch twice", false, hostiledb.Script{Plugin: native, Steps: []hostiledb.Step{R,
			send(hostiledb.Switch(sha2, nonce2)), R, send(hostiledb.Switch("mysql_clear_password", nonce2)), R, OK}}},
		{"unknown plugin in the greeting", false, hostiledb.Script{Plugin: "mysql_clear_password", Steps: []hostiledb.Step{R, OK}}},
		{"truncated greeting", false, hostiledb.Script{Greeting: truncated, Steps: []hostiledb.Step{R, OK}}},

		// Sequences out of order.
		{"full auth, the key request answered by an auth switch", false, hostiledb.Script{Plugin: sha2, Steps: []hostiledb.Step{R,
			send([]byte("\x01\x04")), R, send(hostiledb.Switch(native, nonce2)), R, OK}}},
		{"full auth, several key packets", true, hostiledb.Script{Plugin: sha2, Steps: []hostiledb.Step{R,
			send([]byte("\x01\x04")), R, key("\x01", own), key("\x01", other), key("\x01", pinned), R, R, AD}}},
		{"full auth, the pinned key then the server's", true, hostiledb.Script{Plugin: sha2, Steps: []hostiledb.Step{R,
			send([]byte("\x01\x04")), R, key("\x01", pinned), key("\x01", own), R, R, AD}}},
		{"auth-more-data after the OK", false, hostiledb.Script{Plugin: sha2, Steps: []hostiledb.Step{R,
			OK, send([]byte("\x01\x04")), R, key("\x01", own), R, R}}},
		{"a switch after the OK", false, hostiledb.Script{Plugin: native, Steps: []hostiledb.Step{R,
			OK, send(hostiledb.Switch("mysql_clear_password", nonce2)), R, R}}},
		{"ERR, then full auth", false, hostiledb.Script{Plugin: sha2, Steps: []hostiledb.Step{R,
			AD, send([]byte("\x01\x04")), R, key("\x01", own), R, OK}}},
		{"ERR, then a switch to cleartext", false, hostiledb.Script{Plugin: native, Steps: []hostiledb.Step{R,
			AD, send(hostiledb.Switch("mysql_clear_password", nonce2)), R, OK}}},
		{"plugins renegotiated three times", false, hostiledb.Script{Plugin: native, Steps: []hostiledb.Step{R,
			send(hostiledb.Switch(sha2, nonce2)), R, send(hostiledb.Switch(native, nonce2)), R,
			send(hostiledb.Switch("mysql_clear_password", nonce2)), R, send(hostiledb.Switch(sha256, nonce2)), R, OK}}},
		{"switch to caching_sha2_password, then more data 01 04 after the fast path", false, hostiledb.Script{Plugin: native, Steps: []hostiledb.Step{R,
			send(hostiledb.Switch(sha2, nonce2)), R, send([]byte("\x01\x03")), send([]byte("\x01\x04")), R, key("\x01", own), R, AD}}},
		{"switch to client_ed25519, then full auth", false, hostiledb.Script{Plugin: native, Steps: []hostiledb.Step{R,
			send(hostiledb.Switch("client_ed25519", ed)), R, send([]byte("\x01\x04")), R, key("\x01", own), R, AD}}},
		{"switch to sha256_password, empty nonce", false, hostiledb.Script{Plugin: native, Steps: []hostiledb.Step{R,
			send([]byte("\xfesha256_password\x00")), R, key("\x01", own), R, AD}}},
		{"switch to mysql_old_password (a lone FE)", false, hostiledb.Script{Plugin: native, Steps: []hostiledb.Step{R,
			send([]byte{0xfe}), R, OK}}},

		// Plugins the relay does not answer.
		{"switch to auth_gssapi_client", false, hostiledb.Script{Plugin: native, Steps: []hostiledb.Step{R,
			send(hostiledb.Switch("auth_gssapi_client", []byte("relay@REALM\x00"))), R, OK}}},
		{"switch to parsec", false, hostiledb.Script{Plugin: native, Steps: []hostiledb.Step{R,
			send(hostiledb.Switch("parsec", nonce2)), R, OK}}},
		{"switch to authentication_kerberos_client", false, hostiledb.Script{Plugin: native, Steps: []hostiledb.Step{R,
			send(hostiledb.Switch("authentication_kerberos_client", nonce2)), R, OK}}},
		{"switch to a plugin named like caching_sha2_password", false, hostiledb.Script{Plugin: native, Steps: []hostiledb.Step{R,
			send(hostiledb.Switch("Caching_sha2_password", nonce2)), R, send([]byte("\x01\x04")), R, key("\x01", own), R, AD}}},
		{"dialog (PAM) asking for the password", false, hostiledb.Script{Plugin: native, Steps: []hostiledb.Step{R,
			send(hostiledb.Switch("dialog", []byte("\x04Password: \x00"))), R, send([]byte("\x04Password: ")), R, OK}}},
		{"client_ed25519 in the greeting", false, hostiledb.Script{Plugin: "client_ed25519", Steps: []hostiledb.Step{R, OK}}},

		// Greetings whose capabilities change the packets' shapes.
		{"greeting without CLIENT_PLUGIN_AUTH, then a switch to cleartext", true, hostiledb.Script{
			Greeting: hostiledb.Greeting("", caps&^hostiledb.CapPluginAuth), Steps: []hostiledb.Step{R,
				send(hostiledb.Switch("mysql_clear_password", nonce2)), R, OK}}},
		{"greeting without CLIENT_PLUGIN_AUTH, then full auth", true, hostiledb.Script{
			Greeting: hostiledb.Greeting("", caps&^hostiledb.CapPluginAuth), Steps: []hostiledb.Step{R,
				send(hostiledb.Switch(sha2, nonce2)), R, send([]byte("\x01\x04")), R, key("\x01", own), R, AD}}},
		{"greeting without CLIENT_SECURE_CONNECTION (an 8-byte nonce)", false, hostiledb.Script{
			Greeting: hostiledb.Greeting("", caps&^hostiledb.CapSecureConnection&^hostiledb.CapPluginAuth), Steps: []hostiledb.Step{R, OK}}},
		{"greeting that ends after the capabilities", false, hostiledb.Script{Greeting: pre41, Steps: []hostiledb.Step{R, OK}}},
		{"greeting offering compression, then compressed answers", false, hostiledb.Script{
			Greeting: hostiledb.Greeting(native, caps|hostiledb.CapCompress|hostiledb.CapZstd), Steps: []hostiledb.Step{R, OK},
			Answers: [][][]byte{{{0x0b, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x01, 0x04}}}}},
		{"greeting offering TLS to a relay without it, then a switch to cleartext", true, hostiledb.Script{
			Greeting: hostiledb.Greeting(native, caps|hostiledb.CapSSL), Steps: []hostiledb.Step{R,
				send(hostiledb.Switch("mysql_clear_password", nonce2)), R, OK}}},
	}
}

type hostileLogin struct {
	name string
	asks bool
	sc   hostiledb.Script
}

// killLogins are hostile logins of the connection go-mysql opens to KILL
// the replication connection when the reader stops, and a hostile answer
// to its KILL.
func killLogins(t *testing.T) []hostileLogin {
	testKeys(t)
	const sha2, native = "caching_sha2_password", "mysql_native_password"
	R, OK, AD := hostiledb.Read, hostiledb.OK, hostiledb.AccessDenied
	send := hostiledb.Send
	own := hostiledb.PEM(&attackerKey.PublicKey)
	key := func(prefix string, pem []byte) hostiledb.Step { return send(append([]byte(prefix), pem...)) }
	full := func(req string, keyStep hostiledb.Step) []hostiledb.Step {
		return []hostiledb.Step{R, send([]byte(req)), R, keyStep, R, AD}
	}
	nonce2 := []byte("ZYXWVUTSRQPONMLKJIHG\x00")
	caps := hostiledb.Capabilities
	return []hostileLogin{
		{"full auth", true, hostiledb.Script{Plugin: sha2, Steps: full("\x01\x04", key("\x01", own))}},
		{"a switch to cleartext", true, hostiledb.Script{Plugin: native, Steps: []hostiledb.Step{R,
			send(hostiledb.Switch("mysql_clear_password", nonce2)), R, OK}}},
		{"greeting without CLIENT_SECURE_CONNECTION", false, hostiledb.Script{
			Greeting: hostiledb.Greeting("", caps&^hostiledb.CapSecureConnection&^hostiledb.CapPluginAuth), Steps: []hostiledb.Step{R, OK}}},
		{"switch to mysql_native_password, no nonce", false, hostiledb.Script{Plugin: sha2, Steps: []hostiledb.Step{R,
			send([]byte("\xfemysql_native_password\x00")), R, OK}}},
		{"full auth, key packet without PEM", false, hostiledb.Script{Plugin: sha2, Steps: full("\x01\x04", key("\x01", []byte("no key")))}},
		{"its KILL answered by a short OK", false, hostiledb.Script{Plugin: native, Steps: []hostiledb.Step{R, OK},
			Answers: [][][]byte{{{0x00}}}}},
		{"login ended by more data, then the KILL", false, hostiledb.Script{Plugin: native, Steps: []hostiledb.Step{R,
			send([]byte("\x01\x04")), R, R}}},
	}
}

// A hostile server never obtains the password, whatever login it plays:
// it tries everything it received in cleartext, XORed with its nonces,
// and decrypted with each of its keys. Without a pinned key, a server
// that asks for the password over plaintext is refused by name; with one,
// the password leaves only encrypted with the pinned key, which the server
// cannot read. The process survives every variant (go-mysql indexes some
// of these packets without checking them).
func TestLoginNeverGivesThePasswordToAHostileServer(t *testing.T) {
	for _, v := range hostileLogins(t) {
		t.Run(v.name, func(t *testing.T) {
			v.sc.Keys = []*rsa.PrivateKey{attackerKey, otherKey}
			srv := hostiledb.StartScript(t, v.sc)
			for _, pin := range []bool{false, true} {
				cfg := guardConfig(srv.Addr)
				if pin {
					cfg.ServerPublicKey = der(t, pinnedKey)
				}
				conn, err := Connect(t.Context(), cfg, srv.Addr)
				if err == nil {
					conn.Close()
				}
				if how := srv.Leaked(guardPassword); how != "" {
					t.Fatalf("pinned key %v: the server obtained the password: %s (connect: %v)", pin, how, err)
				}
				if v.asks && !pin && !errors.Is(err, ErrInsecureLogin) {
					t.Fatalf("connect without a pinned key: %v, want %v", err, ErrInsecureLogin)
				}
				t.Logf("pinned key %v: %v", pin, err)
			}
			// The replication connection logs in the same way.
			cfg := guardConfig(srv.Addr)
			cfg.ServerPublicKey = der(t, pinnedKey)
			err := runReader(t, cfg, srv.Addr)
			if how := srv.Leaked(guardPassword); how != "" {
				t.Fatalf("replication: the server obtained the password: %s (%v)", how, err)
			}
		})
	}
}

// The connection go-mysql opens to KILL the replication connection when
// the reader stops logs in through the guard as every other: a hostile
// server gets no password from it, and nothing it sends there (a greeting
// go-mysql indexes past, a short OK to the KILL) crashes the process; the
// reader returns. Each script is played on the KILL connection; the
// replication connection logs in and is refused its first query.
func TestKillConnectionNeverGivesThePasswordNorCrashes(t *testing.T) {
	for _, v := range killLogins(t) {
		t.Run(v.name, func(t *testing.T) {
			v.sc.Keys = []*rsa.PrivateKey{attackerKey, otherKey}
			for _, pin := range []bool{false, true} {
				killLogin(t, v, pin)
			}
		})
	}
}

func killLogin(t *testing.T, v hostileLogin, pin bool) {
	t.Helper()
	for _, dump := range []bool{false, true} {
		srv := hostiledb.StartScript(t, hostiledb.Script{Plugin: "mysql_native_password", Keys: v.sc.Keys,
			Steps: []hostiledb.Step{hostiledb.Read, hostiledb.OK}, Then: &v.sc})
		cfg := guardConfig(srv.Addr)
		cfg.MaxPacketBytes = 1 << 20
		if pin {
			cfg.ServerPublicKey = der(t, pinnedKey)
		}
		var err error
		if dump { // source's probes: a Dump closes the same way
			d, derr := NewDump(t.Context(), cfg, srv.Addr, "mysql", 77, 0)
			if derr != nil {
				t.Fatal(derr)
			}
			set, _ := ParseSet("mysql", "")
			_, err = d.Start(set)
			d.Close()
		} else {
			err = runReader(t, cfg, srv.Addr)
		}
		if how := srv.Leaked(guardPassword); how != "" {
			t.Fatalf("pinned key %v, dump %v: the server obtained the password: %s (%v)", pin, dump, how, err)
		}
		if srv.Conns() < 2 {
			t.Fatalf("pinned key %v, dump %v: %d connections, want the KILL connection too (%v)", pin, dump, srv.Conns(), err)
		}
		t.Logf("pinned key %v, dump %v: %v", pin, dump, err)
	}
}

// The password goes to the server that holds the pinned key, encrypted
// with it (caching_sha2_password's full authentication over plaintext), and
// the login succeeds; the same server without a pinned key is refused.
func TestLoginEncryptsThePasswordWithThePinnedKeyOnly(t *testing.T) {
	srv := hostiledb.Start(t, hostiledb.CachingSha2FullAuth)
	cfg := guardConfig(srv.Addr)
	if _, err := Connect(t.Context(), cfg, srv.Addr); !errors.Is(err, ErrInsecureLogin) {
		t.Fatalf("connect without a pinned key: %v, want %v", err, ErrInsecureLogin)
	}
	if err := runReader(t, cfg, srv.Addr); !errors.Is(err, ErrInsecureLogin) {
		t.Fatalf("replication without a pinned key: %v, want %v", err, ErrInsecureLogin)
	}
	cfg.ServerPublicKey = srv.Key
	conn, err := Connect(t.Context(), cfg, srv.Addr)
	if err != nil {
		t.Fatalf("connect with the server's pinned key: %v", err)
	}
	conn.Close()
}

// quietHandler answers every query with an error, without logging.
type quietHandler struct{ server.EmptyHandler }

func (quietHandler) HandleQuery(string) (*mysql.Result, error) {
	return nil, errors.New("not supported")
}

// startMySQL runs go-mysql's server (the protocol side the MySQL 8 double
// uses) until the test ends: one user, relay with guardPassword, the auth
// plugin plugin, RSA key key, TLS when tlsCfg is set.
func startMySQL(t *testing.T, plugin string, key *rsa.PrivateKey, tlsCfg *tls.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conf := server.NewServer("8.0.40", mysql.DEFAULT_COLLATION_ID, plugin, key, tlsCfg)
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				auth := server.NewInMemoryAuthenticationHandler(plugin)
				if auth.AddUser("relay", guardPassword, plugin) != nil {
					return
				}
				conn, err := conf.NewCustomizedConn(c, auth, quietHandler{})
				if err != nil {
					return
				}
				for !conn.Closed() && conn.HandleCommand() == nil {
				}
			})
		}
	})
	return ln.Addr().String()
}

// selfSigned returns a server certificate for 127.0.0.1 and a client TLS
// configuration that trusts it.
func selfSigned(t *testing.T) (srv, cli *tls.Config) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	d, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(d)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{d}, PrivateKey: k}}, MinVersion: tls.VersionTLS12},
		&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}

// The logins of real servers go through: caching_sha2_password's full
// authentication and then its fast path, and sha256_password, over
// plaintext with the server's key pinned (and refused without it, until
// the server has the password cached), and over TLS without a pinned key
// (the password inside the verified channel); mysql_native_password over
// plaintext needs nothing.
func TestLoginToRealServersWithThePinnedKeyOrTLS(t *testing.T) {
	testKeys(t)
	srvTLS, cliTLS := selfSigned(t)
	connect := func(t *testing.T, cfg Config, addr string) error {
		t.Helper()
		conn, err := Connect(t.Context(), cfg, addr)
		if err == nil {
			conn.Close()
		}
		return err
	}
	for _, plugin := range []string{pluginCachingSha2, pluginSha256} {
		t.Run(plugin+" pinned", func(t *testing.T) {
			// go-mysql's server sends its key for sha256_password only
			// when it offers TLS; the relay does not take it here.
			offer := map[string]*tls.Config{pluginCachingSha2: nil, pluginSha256: srvTLS}[plugin]
			addr := startMySQL(t, plugin, pinnedKey, offer)
			cfg := guardConfig(addr)
			if err := connect(t, cfg, addr); !errors.Is(err, ErrInsecureLogin) {
				t.Fatalf("without a pinned key: %v, want %v", err, ErrInsecureLogin)
			}
			cfg.ServerPublicKey = der(t, pinnedKey)
			for _, pass := range []string{"first (full authentication)", "second (cached)"} {
				if err := connect(t, cfg, addr); err != nil {
					t.Fatalf("%s login with the pinned key: %v", pass, err)
				}
			}
			cfg.ServerPublicKey = der(t, otherKey)
			if err := connect(t, cfg, addr); plugin == pluginSha256 && !errors.Is(err, ErrInsecureLogin) {
				t.Fatalf("with another key pinned: %v, want %v", err, ErrInsecureLogin)
			}
		})
		t.Run(plugin+" TLS", func(t *testing.T) {
			addr := startMySQL(t, plugin, pinnedKey, srvTLS)
			cfg := guardConfig(addr)
			cfg.TLS = cliTLS
			for range 2 {
				if err := connect(t, cfg, addr); err != nil {
					t.Fatalf("login over TLS: %v", err)
				}
			}
		})
	}
	t.Run("caching_sha2_password, key retrieval allowed", func(t *testing.T) {
		addr := startMySQL(t, pluginCachingSha2, pinnedKey, nil)
		cfg := guardConfig(addr)
		cfg.AllowPublicKeyRetrieval = true
		if err := connect(t, cfg, addr); err != nil {
			t.Fatalf("full authentication with the key the server sent: %v", err)
		}
	})
	t.Run(pluginNative, func(t *testing.T) {
		addr := startMySQL(t, pluginNative, pinnedKey, nil)
		if err := connect(t, guardConfig(addr), addr); err != nil {
			t.Fatalf("login: %v", err)
		}
		cfg := guardConfig(addr)
		cfg.Password = "wrong"
		if err := connect(t, cfg, addr); !errors.Is(err, ErrAccessDenied) {
			t.Fatalf("with a wrong password: %v, want %v", err, ErrAccessDenied)
		}
	})
}

// With source.tls the relay never logs in without TLS: a server (or anyone
// in the middle) that does not offer TLS in its greeting, or offers it and
// then answers the TLS request with a login packet in plaintext, gets
// nothing of the password (over TLS go-mysql holds it: the guard below TLS
// writes none of the login's answers).
func TestLoginWithTLSNeverFallsBackToPlaintext(t *testing.T) {
	_, cliTLS := selfSigned(t)
	R, OK, send := hostiledb.Read, hostiledb.OK, hostiledb.Send
	caps := hostiledb.Capabilities
	nonce2 := []byte("ZYXWVUTSRQPONMLKJIHG\x00")
	for _, v := range []struct {
		name string
		sc   hostiledb.Script
	}{
		{"TLS not offered", hostiledb.Script{Greeting: hostiledb.Greeting(pluginNative, caps), Steps: []hostiledb.Step{R, OK}}},
		{"TLS not offered, caching_sha2_password full auth", hostiledb.Script{Greeting: hostiledb.Greeting(pluginCachingSha2, caps),
			Steps: []hostiledb.Step{R, send([]byte("\x01\x04")), R, R, OK}}},
		{"TLS offered, then a switch to cleartext in plaintext", hostiledb.Script{Greeting: hostiledb.Greeting(pluginNative, caps|hostiledb.CapSSL),
			Steps: []hostiledb.Step{R, send(hostiledb.Switch("mysql_clear_password", nonce2)), R, OK}}},
		{"TLS offered, then full auth in plaintext", hostiledb.Script{Greeting: hostiledb.Greeting(pluginCachingSha2, caps|hostiledb.CapSSL),
			Steps: []hostiledb.Step{R, send([]byte("\x01\x04")), R, R, OK}}},
	} {
		t.Run(v.name, func(t *testing.T) {
			srv := hostiledb.StartScript(t, v.sc)
			cfg := guardConfig(srv.Addr)
			cfg.TLS = cliTLS
			conn, err := Connect(t.Context(), cfg, srv.Addr)
			if err == nil {
				conn.Close()
				t.Fatal("connect: logged in without TLS")
			}
			rerr := runReader(t, cfg, srv.Addr)
			if rerr == nil {
				t.Fatal("replication: logged in without TLS")
			}
			if how := srv.Leaked(guardPassword); how != "" {
				t.Fatalf("the server obtained the password: %s (%v; %v)", how, err, rerr)
			}
			for _, b := range [][]byte{mysqlNativeScramble(hostiledb.Nonce), mysqlCachingScramble(hostiledb.Nonce)} {
				if bytes.Contains(srv.Received(), b) {
					t.Fatalf("the server received a scramble of the password (%v; %v)", err, rerr)
				}
			}
			t.Logf("connect: %v; replication: %v", err, rerr)
		})
	}
}

func mysqlNativeScramble(nonce []byte) []byte {
	return mysql.CalcNativePassword(nonce, []byte(guardPassword))
}

func mysqlCachingScramble(nonce []byte) []byte {
	return mysql.CalcCachingSha2Password(nonce, []byte(guardPassword))
}
