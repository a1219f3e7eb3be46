// Package hostiledb is a hostile MySQL server for tests: it speaks just
// enough of the protocol's login to ask a client for what it must not give
// (its password in cleartext, its password under an RSA key the client
// cannot verify) or to send what the client must not take (a packet that
// never ends), and records every byte the client sends.
package hostiledb

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Behaviour is what the server does after the client's login response.
type Behaviour int

// Behaviours.
const (
	// ClearPassword asks the client to switch to mysql_clear_password.
	ClearPassword Behaviour = iota
	// CachingSha2FullAuth greets with caching_sha2_password and asks for
	// full authentication, then sends Key when the client asks for it.
	CachingSha2FullAuth
	// EndlessPacket lets the client in, then answers every command with
	// 16 MiB continuation packets until the client goes away.
	EndlessPacket
	// LargeMaxAllowedPacket lets the client in, answers a query of
	// max_allowed_packet with 1 GiB, and every other command with endless
	// packets.
	LargeMaxAllowedPacket
)

// Server is a running hostile server.
type Server struct {
	Addr string
	// Key is the RSA key CachingSha2FullAuth sends (public part, DER).
	Key []byte

	behaviour Behaviour
	script    *Script
	priv      *rsa.PrivateKey
	mu        sync.Mutex
	received  bytes.Buffer
	packets   [][]byte     // payloads received
	nonces    [][]byte     // nonces sent (greeting, auth switches)
	sent      atomic.Int64 // bytes of endless packets the client took
	logins    atomic.Int64
	conns     atomic.Int64 // connections a script was played on
}

// Start runs a server until the test ends.
func Start(t testing.TB, b Behaviour) *Server {
	t.Helper()
	s := &Server{behaviour: b}
	if b == CachingSha2FullAuth {
		var err error
		if s.priv, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			t.Fatal(err)
		}
		if s.Key, err = x509.MarshalPKIXPublicKey(&s.priv.PublicKey); err != nil {
			t.Fatal(err)
		}
	}
	s.listen(t)
	return s
}

// listen accepts clients until the test ends.
func (s *Server) listen(t testing.TB) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Addr = ln.Addr().String()
	var wg sync.WaitGroup
	var conns sync.Map
	t.Cleanup(func() {
		ln.Close()
		conns.Range(func(k, _ any) bool { k.(net.Conn).Close(); return true })
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Store(c, true)
			wg.Go(func() {
				defer c.Close()
				s.serve(c)
			})
		}
	})
}

// Received returns every byte clients sent.
func (s *Server) Received() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.received.Bytes())
}

// Sent returns the bytes of endless packets written to clients.
func (s *Server) Sent() int64 { return s.sent.Load() }

// Conns returns how many connections a script was played on.
func (s *Server) Conns() int64 { return s.conns.Load() }

// Logins returns how many clients sent a login response.
func (s *Server) Logins() int64 { return s.logins.Load() }

type conn struct {
	s   *Server
	c   net.Conn
	seq byte
}

func (c *conn) write(payload []byte) error {
	h := []byte{byte(len(payload)), byte(len(payload) >> 8), byte(len(payload) >> 16), c.seq}
	c.seq++
	_, err := c.c.Write(append(h, payload...))
	return err
}

func (c *conn) read() ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(c.c, h[:]); err != nil {
		return nil, err
	}
	n := int(h[0]) | int(h[1])<<8 | int(h[2])<<16
	p := make([]byte, n)
	if _, err := io.ReadFull(c.c, p); err != nil {
		return nil, err
	}
	c.s.mu.Lock()
	c.s.received.Write(h[:])
	c.s.received.Write(p)
	c.s.packets = append(c.s.packets, p)
	c.s.mu.Unlock()
	c.seq = h[3] + 1
	return p, nil
}

var okPacket = []byte{0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00}

func (s *Server) serve(nc net.Conn) {
	c := &conn{s: s, c: nc}
	if s.script != nil {
		s.play(c)
		return
	}
	plugin := "mysql_native_password"
	if s.behaviour == CachingSha2FullAuth {
		plugin = "caching_sha2_password"
	}
	if c.write(greeting(plugin)) != nil {
		return
	}
	if _, err := c.read(); err != nil { // the login response
		return
	}
	s.logins.Add(1)
	switch s.behaviour {
	case ClearPassword:
		if c.write(append([]byte("\xfemysql_clear_password\x00"), scramble...)) != nil {
			return
		}
		if _, err := c.read(); err != nil { // the password, if the client gives it
			return
		}
		_ = c.write(okPacket)
	case CachingSha2FullAuth:
		if c.write([]byte{0x01, 0x04}) != nil {
			return
		}
		req, err := c.read()
		if err != nil {
			return
		}
		if len(req) == 1 && req[0] == 0x02 { // the client asks for the key
			key := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: s.Key})
			if c.write(append([]byte{0x01}, key...)) != nil {
				return
			}
			if _, err := c.read(); err != nil { // the encrypted password
				return
			}
		}
		_ = c.write(okPacket)
		s.refuseCommands(c)
	case EndlessPacket, LargeMaxAllowedPacket:
		if c.write(okPacket) != nil {
			return
		}
		for {
			cmd, err := c.read()
			if err != nil {
				return
			}
			if s.behaviour != LargeMaxAllowedPacket || !bytes.Contains(cmd, []byte("max_allowed_packet")) {
				break
			}
			if c.writeAll(oneValue("@@max_allowed_packet", "1073741824")) != nil {
				return
			}
		}
		chunk := make([]byte, 4+0xffffff)
		chunk[0], chunk[1], chunk[2] = 0xff, 0xff, 0xff
		for {
			chunk[3] = c.seq
			c.seq++
			n, err := nc.Write(chunk)
			s.sent.Add(int64(n))
			if err != nil {
				return
			}
		}
	}
}

// writeAll sends payloads, each a packet, in one write: a client reads
// them off the socket at once, as it reads what a server flushed together
// (a dump thread's events, and the error that ends its stream).
func (c *conn) writeAll(payloads [][]byte) error {
	var b []byte
	for _, p := range payloads {
		b = append(b, byte(len(p)), byte(len(p)>>8), byte(len(p)>>16), c.seq)
		b = append(b, p...)
		c.seq++
	}
	_, err := c.c.Write(b)
	return err
}

// oneValue is a result set of one BIGINT column name holding value
// (column count, definition, EOF, row, EOF: the client does not
// deprecate EOF with the greeting's capabilities).
func oneValue(name, value string) [][]byte {
	lenenc := func(s string) []byte { return append([]byte{byte(len(s))}, s...) }
	var def []byte
	for _, f := range []string{"def", "", "", "", name, ""} {
		def = append(def, lenenc(f)...)
	}
	def = append(def, 0x0c, 63, 0, 20, 0, 0, 0, 0x08, 0x81, 0, 0, 0, 0) // binary charset, length 20, LONGLONG, NOT NULL|BINARY
	eof := []byte{0xfe, 0, 0, 2, 0}
	return [][]byte{{1}, def, eof, lenenc(value), eof}
}

// refuseCommands answers every command with an error.
func (s *Server) refuseCommands(c *conn) {
	for {
		if _, err := c.read(); err != nil {
			return
		}
		if c.write([]byte("\xff\x28\x04#HY000not supported")) != nil {
			return
		}
	}
}

var scramble = []byte("abcdefghijklmnopqrst\x00")

// Capability flags of a greeting.
const (
	CapLongPassword     uint32 = 0x1
	CapCompress         uint32 = 0x20
	CapProtocol41       uint32 = 0x200
	CapSSL              uint32 = 0x800
	CapTransactions     uint32 = 0x2000
	CapSecureConnection uint32 = 0x8000
	CapPluginAuth       uint32 = 0x80000
	CapDeprecateEOF     uint32 = 0x1000000
	CapZstd             uint32 = 0x4000000
	// Capabilities is what the servers' greetings offer by default.
	Capabilities = CapLongPassword | CapProtocol41 | CapTransactions | CapSecureConnection | CapPluginAuth
)

// greeting is a HandshakeV10 naming plugin.
func greeting(plugin string) []byte { return Greeting(plugin, Capabilities) }

// Greeting is a HandshakeV10 offering capability: the nonce's second part
// only with CapSecureConnection, the plugin only with CapPluginAuth.
func Greeting(plugin string, capability uint32) []byte {
	p := []byte{10}
	p = append(p, "8.0.36-hostile\x00"...)
	p = append(p, 1, 0, 0, 0)      // connection id
	p = append(p, scramble[:8]...) // auth-plugin-data part 1
	p = append(p, 0)
	p = append(p, byte(capability), byte(capability>>8))
	p = append(p, 255)  // charset
	p = append(p, 2, 0) // status
	p = append(p, byte(capability>>16), byte(capability>>24))
	if capability&CapPluginAuth != 0 {
		p = append(p, 21) // auth-plugin-data length
	} else {
		p = append(p, 0)
	}
	p = append(p, make([]byte, 10)...) // reserved
	if capability&CapSecureConnection != 0 {
		p = append(p, scramble[8:]...) // part 2: 12 bytes and a NUL
	}
	if capability&CapPluginAuth != 0 {
		p = append(p, plugin...)
		p = append(p, 0)
	}
	return p
}
