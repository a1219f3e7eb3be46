package hostiledb

import (
	"bytes"
	"crypto/rsa"
	"crypto/sha1" //nolint:gosec // MySQL's RSA-OAEP padding is SHA-1 based
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"hash"
	"testing"
)

// A Script is a login the server plays with every client, to try what a
// hostile server (or anyone in the middle of a plaintext connection) can
// send: its greeting names Plugin (or is Greeting, as it is), then the
// Steps run in turn. The server holds the private part of Keys: Leaked
// tries each on everything the clients sent.
type Script struct {
	Plugin   string
	Greeting []byte // the greeting's payload as it is, instead of one naming Plugin
	Keys     []*rsa.PrivateKey
	Steps    []Step
	// Answers, when set, are what the server sends in answer to the
	// commands after a login that ended with an OK: the packets of
	// Answers[i] to the i-th command, the last to every later one,
	// instead of an error.
	Answers [][][]byte
	// Binlog, when set, is what the server sends in answer to a binlog
	// dump command (COM_BINLOG_DUMP, COM_BINLOG_DUMP_GTID) after a login
	// that ended with an OK, every other command answered with an OK: a
	// replica's registration goes through, then the stream is Binlog's
	// packets (each an OK byte and an event, or an error that ends it),
	// sent in one write.
	Binlog [][]byte
	// Then is the script of the connections after the first (a login
	// that goes well, then a hostile KILL connection); nil: the same.
	Then *Script
}

// A Step sends a packet (Send, its payload; in pieces of Chunk bytes when
// Chunk > 0; held back and sent with the next packet when Hold), or reads
// one packet of the client (Read). After the last step the server answers
// every command with an error if the last packet it sent was an OK, and
// closes the connection otherwise.
type Step struct {
	Send  []byte
	Chunk int
	Hold  bool
	Read  bool
}

// Steps that need no argument.
var (
	Read         = Step{Read: true}
	OK           = Step{Send: okPacket}
	AccessDenied = Step{Send: []byte("\xff\x15\x04#28000Access denied for user 'relay'")}
)

// Send is a step sending payload.
func Send(payload []byte) Step { return Step{Send: payload} }

// PEM is the PEM of k's public key.
func PEM(k *rsa.PublicKey) []byte {
	der, err := x509.MarshalPKIXPublicKey(k)
	if err != nil {
		panic(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// Switch is an auth switch request to plugin with nonce (sent as it is:
// MySQL ends it with a NUL).
func Switch(plugin string, nonce []byte) []byte {
	return append(append([]byte{0xfe}, plugin+"\x00"...), nonce...)
}

// Nonce is the nonce of the servers' greetings (20 bytes).
var Nonce = scramble[:20]

// StartScript runs a server playing sc until the test ends.
func StartScript(t testing.TB, sc Script) *Server {
	t.Helper()
	s := &Server{script: &sc}
	s.listen(t)
	return s
}

func (s *Server) play(c *conn) {
	sc := s.script
	for n := s.conns.Add(1); sc.Then != nil && n > 1; n-- {
		sc = sc.Then
	}
	g := sc.Greeting
	if g == nil {
		g = greeting(sc.Plugin)
	}
	if c.write(g) != nil {
		return
	}
	s.nonce(Nonce)
	var held []byte
	var last []byte
	for i, st := range sc.Steps {
		if st.Read {
			if _, err := c.read(); err != nil {
				return
			}
			if i == 0 {
				s.logins.Add(1)
			}
			continue
		}
		if len(st.Send) > 0 && st.Send[0] == 0xfe {
			if _, nonce, ok := bytes.Cut(st.Send[1:], []byte{0}); ok {
				s.nonce(bytes.TrimSuffix(nonce, []byte{0}))
			}
		}
		h := []byte{byte(len(st.Send)), byte(len(st.Send) >> 8), byte(len(st.Send) >> 16), c.seq}
		c.seq++
		held = append(append(held, h...), st.Send...)
		last = st.Send
		if st.Hold {
			continue
		}
		for len(held) > 0 {
			n := len(held)
			if st.Chunk > 0 {
				n = min(n, st.Chunk)
			}
			if _, err := c.c.Write(held[:n]); err != nil {
				return
			}
			held = held[n:]
		}
	}
	if !bytes.Equal(last, okPacket) {
		return
	}
	if sc.Binlog != nil {
		for {
			cmd, err := c.read()
			if err != nil {
				return
			}
			answer := [][]byte{okPacket}
			if len(cmd) > 0 && (cmd[0] == 0x12 || cmd[0] == 0x1e) {
				answer = sc.Binlog
			}
			if c.writeAll(answer) != nil {
				return
			}
		}
	}
	if sc.Answers == nil {
		s.refuseCommands(c)
		return
	}
	for i := 0; ; i++ {
		if _, err := c.read(); err != nil {
			return
		}
		if c.writeAll(sc.Answers[min(i, len(sc.Answers)-1)]) != nil {
			return
		}
	}
}

// nonce records a nonce the server sent.
func (s *Server) nonce(n []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nonces = append(s.nonces, bytes.Clone(n))
}

// Leaked says how the server can obtain password from what clients sent
// ("" when it cannot): in cleartext, XORed with a nonce it sent, or RSA
// encrypted (OAEP with SHA-1 or SHA-256, or PKCS #1 v1.5; XORed with a
// nonce or not) with one of its Keys. It tries every packet whole and each
// run of a key's size in it.
func (s *Server) Leaked(password string) string {
	s.mu.Lock()
	raw := bytes.Clone(s.received.Bytes())
	packets := append([][]byte(nil), s.packets...)
	nonces := append([][]byte(nil), s.nonces...)
	s.mu.Unlock()
	pw := []byte(password)
	found := func(b []byte) string {
		if bytes.Contains(b, pw) {
			return "in cleartext"
		}
		for _, n := range nonces {
			for r := range n { // the nonce starting anywhere in b
				if bytes.Contains(xor(b, append(bytes.Clone(n[r:]), n[:r]...)), pw) {
					return fmt.Sprintf("XORed with the nonce %q", n)
				}
			}
		}
		return ""
	}
	if how := found(raw); how != "" {
		return how + " in the bytes received"
	}
	var keys []*rsa.PrivateKey
	if s.script != nil {
		keys = s.script.Keys
	}
	for i, p := range packets {
		if how := found(p); how != "" {
			return fmt.Sprintf("packet %d: %s", i, how)
		}
		for ki, k := range keys {
			size := k.Size()
			for off := 0; off+size <= len(p); off++ {
				for name, plain := range decryptions(k, p[off:off+size]) {
					if how := found(plain); how != "" {
						return fmt.Sprintf("packet %d: decrypted with key %d (%s): %s", i, ki, name, how)
					}
				}
			}
		}
	}
	return ""
}

// decryptions are c decrypted with k in each padding MySQL clients use.
func decryptions(k *rsa.PrivateKey, c []byte) map[string][]byte {
	out := map[string][]byte{}
	for name, h := range map[string]func() hash.Hash{"OAEP SHA-1": sha1.New, "OAEP SHA-256": sha256.New} {
		if p, err := rsa.DecryptOAEP(h(), nil, k, c, nil); err == nil {
			out[name] = p
		}
	}
	if p, err := rsa.DecryptPKCS1v15(nil, k, c); err == nil { //nolint:staticcheck // tried as an attacker would
		out["PKCS #1 v1.5"] = p
	}
	return out
}

func xor(b, n []byte) []byte {
	out := make([]byte, len(b))
	for i := range b {
		out[i] = b[i] ^ n[i%len(n)]
	}
	return out
}
