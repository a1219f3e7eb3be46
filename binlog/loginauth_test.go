package binlog

import (
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
func hostileLogins(t *testing.T) []struct {
	name string
	asks bool
	sc   hostiledb.Script
} {
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
	return []struct {
		name string
		asks bool
		sc   hostiledb.Script
	}{
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
