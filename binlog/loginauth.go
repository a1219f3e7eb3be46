package binlog

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1" //nolint:gosec // MySQL's RSA-OAEP padding for the password is SHA-1 based
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"encoding/pem"
	"fmt"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// Who holds the password, and what may leave the process.
//
// go-mysql (v1.16.0) takes the password as a string and decides by itself
// what to send: it encrypts it with whatever RSA key a server sends after
// whatever it reads as a full-authentication request (`01 04`, `01 04 00`,
// `01 04` and anything, a key packet with any first byte), it sends it as it
// is on a switch to mysql_clear_password, and it offers no hook to supply
// the key or to refuse. Recognising its triggers in the server's packets
// failed twice: every byte pattern the guard did not expect was one go-mysql
// still read as a request for the password.
//
// So on a plaintext connection go-mysql never holds the password. It logs
// in with a stand-in (loginGuard.clientPassword: random, never the
// password), and the guard, which alone holds the password, writes in place
// of go-mysql's login answers what the relay decides (guardState.answer).
// The rule, enforced where the bytes are written:
//
//   - the password leaves the process only as a scramble the relay computes
//     for the plugin and the server's nonce (mysql_native_password,
//     caching_sha2_password's fast path, client_ed25519: one-way, bound to
//     the nonce);
//   - or encrypted by the relay itself (RSA-OAEP, as MySQL does) with the key
//     pinned in source.server_public_key_file, never with a key the server
//     sends; with source.allow_public_key_retrieval (the operator trusts the
//     network) with the RSA key the server's last packet holds;
//   - or as it is, only with source.allow_cleartext_password;
//   - anything else the server asks for is refused (ErrInsecureLogin) and
//     nothing of the password is written.
//
// Which client packet gets which form is the guard's own reading of the
// exchange: the first login packet is the handshake response (its auth
// data replaced by the scramble for the plugin it names), the first after
// an auth switch answers the switch (the plugin it names), and any other
// packet longer than one byte (one byte is a request for the server's key)
// is where go-mysql would put the password: the guard writes the password
// encrypted with the pinned key there, or refuses. The login ends at the
// server's OK or ERR, or where go-mysql's login returned
// (guardState.loginOver), whichever comes first. Where go-mysql reads the
// server's packets differently from the guard, the server gets a stand-in's
// answer or one of the forms above, and the login fails: a disagreement can
// cost the login, never the password. Nothing here depends on recognising
// a packet pattern for safety: a server can send any sequence, go-mysql
// holds nothing to give.
//
// Over TLS (source.tls) go-mysql holds the password and the login runs
// inside the verified channel (full authentication sends the password in
// cleartext inside it, as MySQL's clients do); the guard below TLS sees
// ciphertext. An empty password has nothing to protect.
//
// go-mysql also indexes the server's login packets without checking their
// length (an empty packet, a key packet without PEM, a short OK): a server
// could crash the process. The guard refuses an empty login packet and a
// greeting it cannot read whole, and loginGuard.login turns a panic of
// go-mysql's login into a refusal.

// Plugins the guard answers.
const (
	pluginNative       = "mysql_native_password"
	pluginCachingSha2  = "caching_sha2_password"
	pluginSha256       = "sha256_password"
	pluginEd25519      = "client_ed25519"
	scrambleLen        = 20 // MySQL's nonce: native, caching_sha2, sha256
	ed25519ScrambleLen = 32 // MariaDB's client_ed25519 nonce
)

// What the client's next login packet answers.
const (
	answerHandshake = iota // the handshake response: the first login packet
	answerSwitch           // the server's auth switch request
	answerMore             // anything else: a key request, or the password
)

// newStandIn returns the password go-mysql gets on a plaintext connection:
// random, so that nothing computed from it says anything of the password,
// and never equal to it.
func newStandIn(password string) string {
	for {
		b := make([]byte, 24)
		_, _ = rand.Read(b)
		if s := "stand-in-" + hex.EncodeToString(b); s != password {
			return s
		}
	}
}

// owns reports whether the guard holds the password of this connection's
// login (plaintext, a password to protect, the login not over).
func (s *guardState) owns() bool {
	return s.holds && s.mode == modeLogin
}

// Write hands the server the client's bytes; during a login the guard owns
// (see above), whole login packets, each answered by answer.
func (g *guardConn) Write(p []byte) (int, error) {
	s := g.st
	if err := s.failed(); err != nil {
		return 0, err
	}
	if !s.owns() && len(s.wbuf) == 0 {
		s.cmds.Add(1) // a command: what the server sends next answers it (answerbound.go)
		return g.Conn.Write(p)
	}
	s.wbuf = append(s.wbuf, p...)
	for len(s.wbuf) >= 4 {
		n := int(s.wbuf[0]) | int(s.wbuf[1])<<8 | int(s.wbuf[2])<<16
		if n > loginPacketBytes {
			s.wbuf = nil
			return 0, g.refuse(fmt.Errorf("%w: login to %s: the client wrote a login packet of %d bytes", ErrInsecureLogin, s.addr, n))
		}
		if len(s.wbuf) < 4+n {
			break
		}
		seq, payload := s.wbuf[3], s.wbuf[4:4+n]
		out := payload
		if s.owns() {
			var err error
			if out, err = s.answer(payload); err != nil {
				s.wbuf = nil
				return 0, g.refuse(err)
			}
		}
		pkt := append([]byte{byte(len(out)), byte(len(out) >> 8), byte(len(out) >> 16), seq}, out...)
		s.wbuf = s.wbuf[4+n:]
		if _, err := g.Conn.Write(pkt); err != nil {
			s.wbuf = nil
			return 0, err
		}
	}
	if len(s.wbuf) == 0 {
		s.wbuf = nil
	}
	return len(p), nil
}

// answer returns what the server gets for the client's login packet
// payload, computed from the password go-mysql does not hold.
func (s *guardState) answer(payload []byte) ([]byte, error) {
	next := s.next
	s.next = answerMore
	switch next {
	case answerHandshake:
		return s.handshakeResponse(payload)
	case answerSwitch:
		return s.authData(s.switchPlugin)
	}
	if len(payload) <= 1 {
		return payload, nil // a request for the server's key, or nothing: no password in it
	}
	return s.encryptedPassword()
}

// Capability flags of the handshake response the guard reads.
const (
	clientConnectWithDB = 0x8
	clientPluginAuth    = 0x80000
	clientLenencAuth    = 0x200000
)

// handshakeResponse returns go-mysql's HandshakeResponse41 with its auth
// data replaced by the relay's for the plugin it names.
func (s *guardState) handshakeResponse(p []byte) ([]byte, error) {
	bad := fmt.Errorf("%w: login to %s: the client's handshake response cannot be read", ErrInsecureLogin, s.addr)
	if len(p) < 32 {
		return nil, bad
	}
	capability := binary.LittleEndian.Uint32(p)
	userEnd := bytes.IndexByte(p[32:], 0)
	if userEnd < 0 {
		return nil, bad
	}
	pos := 32 + userEnd + 1
	authLen, _, n := mysql.LengthEncodedInt(p[pos:])
	if capability&clientLenencAuth == 0 && pos < len(p) {
		authLen, n = uint64(p[pos]), 1
	}
	if n == 0 || uint64(len(p)-pos-n) < authLen {
		return nil, bad
	}
	tail := p[pos+n+int(authLen):]
	plugin := pluginNative
	if capability&clientPluginAuth != 0 {
		rest := tail
		if capability&clientConnectWithDB != 0 {
			db := bytes.IndexByte(rest, 0)
			if db < 0 {
				return nil, bad
			}
			rest = rest[db+1:]
		}
		end := bytes.IndexByte(rest, 0)
		if end < 0 {
			return nil, bad
		}
		plugin = string(rest[:end])
	}
	auth, err := s.authData(plugin)
	if err != nil {
		return nil, err
	}
	if len(auth) > 250 {
		capability |= clientLenencAuth
	}
	out := make([]byte, 0, len(p)+len(auth))
	out = binary.LittleEndian.AppendUint32(out, capability)
	out = append(out, p[4:pos]...)
	out = mysql.AppendLengthEncodedInteger(out, uint64(len(auth)))
	out = append(out, auth...)
	return append(out, tail...), nil
}

// authData is the relay's answer to the server's request for plugin, with
// the current exchange's nonce.
func (s *guardState) authData(plugin string) ([]byte, error) {
	pw := []byte(s.cfg.Password)
	switch plugin {
	case pluginNative, pluginCachingSha2:
		if len(s.scramble) < scrambleLen {
			return nil, s.badScramble(plugin, scrambleLen)
		}
		if plugin == pluginNative {
			return mysql.CalcNativePassword(s.scramble[:scrambleLen], pw), nil
		}
		return mysql.CalcCachingSha2Password(s.scramble[:scrambleLen], pw), nil
	case pluginEd25519:
		if len(s.scramble) != ed25519ScrambleLen {
			return nil, s.badScramble(plugin, ed25519ScrambleLen)
		}
		return mysql.CalcEd25519Password(s.scramble, s.cfg.Password)
	case pluginSha256:
		return []byte{1}, nil // ask for the server's key: the password follows, encrypted
	}
	if cleartextPlugins[plugin] {
		if !s.cfg.AllowCleartextPassword {
			return nil, fmt.Errorf("%w: login to %s: the server asked for %s, which sends the password in cleartext, over a plaintext connection; "+
				"enable source.tls (with a verified certificate), or set source.allow_cleartext_password: true if the network is trusted",
				ErrInsecureLogin, s.addr, plugin)
		}
		return append(pw, 0), nil
	}
	return nil, fmt.Errorf("%w: login to %s: the server asked for the auth plugin %q, which the relay does not answer over a plaintext connection; "+
		"enable source.tls, or give the user mysql_native_password, caching_sha2_password or ed25519", ErrInsecureLogin, s.addr, plugin)
}

func (s *guardState) badScramble(plugin string, want int) error {
	return fmt.Errorf("%w: login to %s: the server sent a nonce of %d bytes for %s (%d expected): not a login the relay answers",
		ErrInsecureLogin, s.addr, len(s.scramble), plugin, want)
}

// encryptedPassword is the password as caching_sha2_password's full
// authentication and sha256_password send it on a plaintext connection:
// XORed with the nonce, RSA-OAEP encrypted by the relay with the pinned key
// (or, with source.allow_public_key_retrieval, the key the server sent).
func (s *guardState) encryptedPassword() ([]byte, error) {
	if len(s.scramble) < scrambleLen {
		return nil, s.badScramble("the encrypted password", scrambleLen)
	}
	key, err := s.passwordKey()
	if err != nil {
		return nil, err
	}
	plain := append([]byte(s.cfg.Password), 0)
	for i := range plain {
		plain[i] ^= s.scramble[i%scrambleLen]
	}
	enc, err := rsa.EncryptOAEP(sha1.New(), rand.Reader, key, plain, nil) //nolint:gosec // MySQL's padding
	if err != nil {
		return nil, fmt.Errorf("%w: login to %s: encrypt the password with the server's RSA key: %v", ErrInsecureLogin, s.addr, err)
	}
	return enc, nil
}

// passwordKey is the RSA key the password may be encrypted with: the pinned
// one; with retrieval allowed, the one the server's last packet holds;
// otherwise none.
func (s *guardState) passwordKey() (*rsa.PublicKey, error) {
	sent := keyIn(s.last)
	pinned := s.cfg.ServerPublicKey
	switch {
	case len(pinned) > 0:
		// A different key sent is a change to tell the operator about
		// (encrypting with the pinned key anyway would end in "access
		// denied"); a key that cannot be read changes nothing.
		if sent != nil && !bytes.Equal(sent, pinned) {
			return nil, fmt.Errorf("%w: login to %s: the server's RSA public key is not the one in source.server_public_key_file: "+
				"someone may be in the middle; enable source.tls, or update the file if the server's key changed", ErrInsecureLogin, s.addr)
		}
		return rsaKey(pinned)
	case s.cfg.AllowPublicKeyRetrieval:
		if sent == nil {
			return nil, fmt.Errorf("%w: login to %s: the server asked for the password encrypted and sent no RSA public key", ErrInsecureLogin, s.addr)
		}
		return rsaKey(sent)
	}
	return nil, fmt.Errorf("%w: login to %s: the server asks for the password encrypted with its RSA public key, which a plaintext connection "+
		"cannot verify; enable source.tls (with a verified certificate), or set source.server_public_key_file to the server's public key, "+
		"or source.allow_public_key_retrieval: true if the network is trusted", ErrInsecureLogin, s.addr)
}

// keyIn returns the public key (DER) of the first PEM block in b, nil if
// there is none.
func keyIn(b []byte) []byte {
	i := bytes.Index(b, []byte("-----BEGIN"))
	if i < 0 {
		return nil
	}
	block, _ := pem.Decode(b[i:])
	if block == nil {
		return nil
	}
	if _, err := rsaKey(block.Bytes); err != nil {
		return nil
	}
	return block.Bytes
}

// rsaKey parses a DER (PKIX) RSA public key.
func rsaKey(der []byte) (*rsa.PublicKey, error) {
	k, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, fmt.Errorf("%w: not a public key: %v", ErrInsecureLogin, err)
	}
	rk, ok := k.(*rsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("%w: a %T, not an RSA public key", ErrInsecureLogin, k)
	}
	return rk, nil
}

// login runs fn, go-mysql's login (and what follows it in the same call:
// a replication connection's registration queries) on connections of lg,
// and turns a panic of go-mysql on the server's packets into a refusal
// (ErrInsecureLogin during the login, ErrBrokenAnswer after it): the
// connections are closed, and the process goes on.
func login[T any](lg *loginGuard, fn func() (T, error)) (v T, err error) {
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		if lg.loggedIn.Load() {
			lg.fail(fmt.Errorf("%w: after the login to %s (%v)", ErrBrokenAnswer, lg.addr, p))
		} else {
			lg.fail(fmt.Errorf("%w: login to %s: the server's answer broke the MySQL client library (%v)", ErrInsecureLogin, lg.addr, p))
		}
		err = lg.err()
	}()
	return fn()
}
