package binlog

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"

	"github.com/go-mysql-org/go-mysql/client"
)

// The login guard: every connection the relay makes to the source goes
// through guardConn, which reads the MySQL packets before go-mysql does and
// writes the login's answers itself.
//
// The password: on a plaintext connection go-mysql logs in with a stand-in
// and the guard writes what the server gets in place of its login answers;
// loginauth.go states the rule (what of the password may leave the
// process, and in which form) and why it holds whatever the server sends.
//
// go-mysql also joins continuation packets (16 MiB each) with no limit, so
// a server that keeps claiming more makes it allocate without bound. The
// guard counts the packet headers as the bytes flow and closes the
// connection before one logical packet passes the bound: loginPacketBytes
// during the login and until the connection's bound is set (loginGuard.bound),
// then Config.MaxPacketBytes or, by default, the bound the memory budget
// allows (packetbound.go), lowered to twice the server's
// max_allowed_packet (a row event carries a row's before and after image)
// plus packetHeadroom when that is less. On a TLS connection the guard
// sees only ciphertext once the server's greeting is read; the bound is
// then applied on top of the TLS connection when the login is done
// (loginGuard.bound).

var (
	// ErrInsecureLogin: the server asked for a login that would expose the
	// password on a plaintext connection, or sent login packets the relay
	// cannot read safely.
	ErrInsecureLogin = errors.New("insecure source login refused")
	// ErrPacketBound: the server sent a packet (an event, a row of a
	// result) larger than the relay accepts.
	ErrPacketBound = errors.New("source packet over the relay's bound")
)

const (
	// loginPacketBytes bounds a packet of the login (greetings, auth
	// switches and RSA keys are at most a few KB) and the answer to the
	// query of max_allowed_packet.
	loginPacketBytes = 64 << 10
)

// cleartextPlugins send the password as it is.
var cleartextPlugins = map[string]bool{
	"mysql_clear_password": true, "dialog": true, "auth_pam": true, "pam": true,
	"authentication_pam": true, "authentication_ldap_simple": true, "authentication_ldap_simple_client": true,
}

// loginGuard makes the guarded connections to one host and remembers
// their refusals, which go-mysql reports wrapped in its own text.
type loginGuard struct {
	cfg  Config
	addr string
	// standIn is the password go-mysql gets when the guard holds the
	// real one (loginauth.go).
	standIn string

	mu    sync.Mutex
	conns []*guardConn
	broke error // a panic of go-mysql's login, as a refusal (login)
	// applied is the packet bound last applied (the stream's), for the
	// bound of what a compressed transaction inflates to (payload.go).
	applied atomic.Pointer[appliedBound]
	// loggedIn: a login went through (bound ran): what breaks from now
	// on is an answer to a query.
	loggedIn atomic.Bool
}

func newLoginGuard(cfg Config, addr string) *loginGuard {
	lg := &loginGuard{cfg: cfg, addr: addr}
	if lg.holdsPassword() {
		lg.standIn = newStandIn(cfg.Password)
	}
	return lg
}

// holdsPassword: the guard, not go-mysql, holds the password of the
// logins: plaintext connections with a password (loginauth.go).
func (lg *loginGuard) holdsPassword() bool {
	return lg.cfg.TLS == nil && lg.cfg.Password != ""
}

// clientPassword is the password to give go-mysql: a stand-in when the
// guard holds the real one.
func (lg *loginGuard) clientPassword() string {
	if lg.holdsPassword() {
		return lg.standIn
	}
	return lg.cfg.Password
}

// dial returns next wrapped by the guard. Every source connection is
// dialed through one.
func (lg *loginGuard) dial(next client.Dialer) client.Dialer {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		c, err := next(ctx, network, address)
		if err != nil {
			return nil, err
		}
		g := &guardConn{Conn: c, st: newGuardState(lg.cfg, lg.addr, modeLogin)}
		g.st.holds = lg.holdsPassword()
		lg.mu.Lock()
		lg.conns = append(lg.conns, g)
		lg.mu.Unlock()
		return g, nil
	}
}

// err returns the first refusal of the guard's connections, nil if none.
func (lg *loginGuard) err() error {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	for _, g := range lg.conns {
		if err := g.st.failed(); err != nil {
			return err
		}
	}
	return lg.broke
}

// fail records err as the guard's refusal and closes its connections.
func (lg *loginGuard) fail(err error) {
	lg.mu.Lock()
	conns := lg.conns
	if lg.broke == nil {
		lg.broke = &guardError{err: err}
	}
	lg.mu.Unlock()
	for _, g := range conns {
		_ = g.Conn.Close()
	}
}

// or returns the guard's refusal if there is one, else err.
func (lg *loginGuard) or(err error) error {
	if gerr := lg.err(); gerr != nil {
		return gerr
	}
	return err
}

// orGrown is or, except that a packet over a bound derived from the
// server's max_allowed_packet, when the server's max_allowed_packet has
// grown since (SET GLOBAL while the relay runs), is an error that passes:
// a new connection derives the larger bound (a configuration stop would
// wait for an operator although a new connection reads the packet).
func (lg *loginGuard) orGrown(ctx context.Context, err error) error {
	err = lg.or(err)
	var ge *guardError
	if !errors.As(err, &ge) || ge.derived <= 0 || !errors.Is(ge, ErrPacketBound) {
		return err
	}
	conn, cerr := Connect(ctx, lg.cfg, lg.addr)
	if cerr != nil {
		return err
	}
	defer conn.Close()
	rows, qerr := Query(conn, "SELECT @@GLOBAL.max_allowed_packet")
	var n int64
	if qerr != nil || len(rows) != 1 || len(rows[0]) != 1 {
		return err
	}
	if _, serr := fmt.Sscan(rows[0][0], &n); serr != nil || n <= ge.derived {
		return err
	}
	if grown, _, _ := lg.cfg.defaultBound(n); grown <= ge.limit {
		return err // the memory budget's bound, reached already
	}
	return fmt.Errorf("the server's max_allowed_packet grew from %d to %d since the connection to %s derived its bound from it: "+
		"reading again with the new bound (%v)", ge.derived, n, lg.addr, ge)
}

// bound learns the bound of c's packets (cfg.MaxPacketBytes, else from the
// server's max_allowed_packet) and applies it; on a TLS connection it puts
// a guard on top of the TLS layer. Call it right after the login, before
// anything else is read; it is the BinlogSyncerConfig.Option of the
// replication connections.
func (lg *loginGuard) bound(c *client.Conn) error {
	lg.loggedIn.Store(true)
	g, secure := findGuard(c.Conn.Conn)
	if g == nil {
		return fmt.Errorf("login to %s: the connection was not dialed through the login guard", lg.addr)
	}
	if secure {
		// The TLS connection hands over whole records: the guard on top
		// starts at a packet boundary, as the one below does after a login.
		g = &guardConn{Conn: c.Conn.Conn, st: newGuardState(lg.cfg, lg.addr, modeStream)}
		c.Conn.Conn = g
		lg.mu.Lock()
		lg.conns = append(lg.conns, g)
		lg.mu.Unlock()
	} else {
		g.st.loginOver()
	}
	limit, how := lg.cfg.MaxPacketBytes, "source.max_packet_bytes"
	var derived int64
	if limit <= 0 { // packetbound.go
		rows, err := query(c, "SELECT @@max_allowed_packet")
		if gerr := lg.err(); gerr != nil {
			return gerr
		}
		var n int64
		if err == nil && len(rows) == 1 && len(rows[0]) == 1 {
			if _, err := fmt.Sscan(rows[0][0], &n); err != nil {
				n = 0
			}
		}
		var fromServer bool
		if limit, how, fromServer = lg.cfg.defaultBound(n); fromServer {
			derived = n
		}
	}
	g.st.setLimit(limit, how)
	g.st.derived.Store(derived)
	lg.applied.Store(&appliedBound{limit, how})
	return nil
}

// findGuard returns the guard of nc, looking through a TLS layer
// (secure: the guard found is below TLS).
func findGuard(nc net.Conn) (g *guardConn, secure bool) {
	if t, ok := nc.(*tls.Conn); ok {
		nc, secure = t.NetConn(), true
	}
	g, _ = nc.(*guardConn)
	return g, secure
}

// guardError is a refusal of the guard; it wraps a sentinel above.
// derived is the server's max_allowed_packet the refused bound came from
// (0: source.max_packet_bytes, the memory budget, or a login packet), and
// limit the bound then.
type guardError struct {
	err     error
	derived int64
	limit   int64
}

func (e *guardError) Error() string { return e.err.Error() }
func (e *guardError) Unwrap() error { return e.err }

// Modes of a guardConn.
const (
	modeLogin  = iota // whole packets, each judged before go-mysql sees it
	modeStream        // count packet headers against the bound
	modeOff           // ciphertext below TLS: the guard above it counts
)

// guardState is a connection's parse state. Only the reading goroutine
// touches it, but for the bound and the refusal.
type guardState struct {
	addr string
	cfg  Config

	limit   atomic.Int64
	derived atomic.Int64 // the max_allowed_packet limit came from, 0 if none
	mu      sync.Mutex
	how     string // where limit comes from, for the error
	err     atomic.Pointer[guardError]

	mode int

	// login phase
	tls     bool   // the client asked for TLS: after the greeting, ciphertext
	pending []byte // a judged login packet, not yet all handed to go-mysql
	// The guard's own reading of the login, for the answers it writes
	// (loginauth.go).
	holds        bool   // the guard holds the password; go-mysql a stand-in
	greeted      bool   // the server's greeting was read
	scramble     []byte // the nonce of the current exchange
	next         int    // what the client's next login packet answers
	switchPlugin string // the plugin the server's last auth switch asked for
	last         []byte // the server's last login packet after the greeting
	wbuf         []byte // client bytes of a login packet not yet whole

	// streaming phase
	cmds     atomic.Uint64 // writes of the client (commands) in it
	ans      answerState   // the answer being read (answerbound.go)
	streamed atomic.Bool   // a call that does not keep the answer's rows
	hdr      [4]byte
	hdrN     int
	need     int64 // payload bytes of the current packet still to come
	logical  int64 // bytes of the current logical packet (continuations summed)
	cont     bool  // the last packet was 0xFFFFFF bytes: the next one continues it
}

func newGuardState(cfg Config, addr string, mode int) *guardState {
	s := &guardState{addr: addr, cfg: cfg, mode: mode, tls: cfg.TLS != nil}
	s.limit.Store(loginPacketBytes)
	return s
}

func (s *guardState) setLimit(n int64, how string) {
	s.mu.Lock()
	s.how = how
	s.mu.Unlock()
	s.limit.Store(n)
}

// loginOver ends the login phase where go-mysql's login returned, whatever
// the guard read (a server may end it without an OK go-mysql waits for):
// the guard writes no answer from now on, and counts packets.
func (s *guardState) loginOver() {
	s.holds = false
	if s.mode == modeLogin {
		s.mode = modeStream
	}
}

func (s *guardState) failed() error {
	if e := s.err.Load(); e != nil {
		return e
	}
	return nil
}

// guardConn reads through guardState; during a login the guard holds the
// password of, it writes the login's answers (loginauth.go).
type guardConn struct {
	net.Conn
	st *guardState
}

func (g *guardConn) Read(p []byte) (int, error) {
	s := g.st
	if err := s.failed(); err != nil {
		return 0, err
	}
	if len(s.pending) > 0 { // the rest of a judged login packet
		n := copy(p, s.pending)
		s.pending = s.pending[n:]
		return n, nil
	}
	switch s.mode {
	case modeLogin:
		return g.readLogin(p)
	case modeOff:
		return g.Conn.Read(p)
	}
	n, err := g.Conn.Read(p)
	if ferr := s.scan(p[:n]); ferr != nil {
		return 0, g.refuse(ferr)
	}
	return n, err
}

// refuse records err, closes the connection and returns the refusal.
func (g *guardConn) refuse(err error) error {
	g.st.err.CompareAndSwap(nil, &guardError{err: err, derived: g.st.derived.Load(), limit: g.st.limit.Load()})
	_ = g.Conn.Close()
	return g.st.err.Load()
}

// scan counts the packet headers in b.
func (s *guardState) scan(b []byte) error {
	limit := s.limit.Load()
	for len(b) > 0 {
		if s.need > 0 {
			k := min(s.need, int64(len(b)))
			if s.ans.peekN > 0 {
				if err := s.answerPeek(b[:k]); err != nil {
					return err
				}
			}
			s.need -= k
			b = b[k:]
			continue
		}
		k := copy(s.hdr[s.hdrN:], b)
		s.hdrN += k
		b = b[k:]
		if s.hdrN < 4 {
			return nil
		}
		s.hdrN = 0
		length := int64(s.hdr[0]) | int64(s.hdr[1])<<8 | int64(s.hdr[2])<<16
		if !s.cont {
			s.logical = 0
			if err := s.answerPacket(length); err != nil {
				return err
			}
		}
		s.logical += length
		s.cont = length == 0xffffff
		s.need = length
		if s.logical > limit {
			return s.tooLarge(limit)
		}
	}
	return nil
}

func (s *guardState) tooLarge(limit int64) error {
	s.mu.Lock()
	how := s.how
	s.mu.Unlock()
	if how == "" {
		how = "the bound of a login packet"
	}
	return fmt.Errorf("%w: read from %s: the server sent a packet of more than %d bytes (%s); "+
		"if the server really sends events or rows this large, raise source.max_packet_bytes (and the memory limit with it)",
		ErrPacketBound, s.addr, limit, how)
}

// readLogin hands go-mysql whole login packets, each inspected before its
// first byte is handed over.
func (g *guardConn) readLogin(p []byte) (int, error) {
	s := g.st
	if err := g.nextLoginPacket(); err != nil {
		return 0, err
	}
	n := copy(p, s.pending)
	s.pending = s.pending[n:]
	return n, nil
}

// nextLoginPacket reads one packet into s.pending and judges it.
func (g *guardConn) nextLoginPacket() error {
	s := g.st
	var hdr [4]byte
	if _, err := io.ReadFull(g.Conn, hdr[:]); err != nil {
		return err
	}
	length := int(hdr[0]) | int(hdr[1])<<8 | int(hdr[2])<<16
	if int64(length) > loginPacketBytes {
		return g.refuse(s.tooLarge(loginPacketBytes))
	}
	pkt := make([]byte, 4+length)
	copy(pkt, hdr[:])
	if _, err := io.ReadFull(g.Conn, pkt[4:]); err != nil {
		return err
	}
	s.pending = pkt
	if err := s.judge(pkt[4:]); err != nil {
		s.pending = nil
		return g.refuse(err)
	}
	return nil
}

// judge reads one login packet from the server: what the answers the
// guard writes need (the nonce, an auth switch, the last packet), and
// whether the login is over. It refuses only packets go-mysql would crash
// on; what the password may become is decided where it is written.
func (s *guardState) judge(data []byte) error {
	if len(data) == 0 {
		return fmt.Errorf("%w: login to %s: the server sent an empty login packet", ErrInsecureLogin, s.addr)
	}
	if !s.greeted { // the greeting: HandshakeV10 (or an error)
		s.greeted = true
		if data[0] != 10 { // refused, or another protocol: go-mysql reports it
			s.mode = modeStream
			return nil
		}
		scramble, ok := greetingScramble(data)
		if !ok {
			return fmt.Errorf("%w: login to %s: the server's greeting is malformed", ErrInsecureLogin, s.addr)
		}
		s.scramble = scramble
		if s.tls { // the rest is ciphertext: bound guards the TLS layer
			s.mode = modeOff
		}
		return nil
	}
	s.last = data
	switch data[0] {
	case 0x00, 0xff: // OK or ERR: the login is over
		s.mode = modeStream
	case 0xfe: // auth switch request: a plugin and its nonce
		plugin, nonce, _ := bytes.Cut(data[1:], []byte{0})
		s.switchPlugin, s.next = string(plugin), answerSwitch
		s.scramble = bytes.Clone(bytes.TrimSuffix(nonce, []byte{0}))
	}
	return nil
}

// greetingScramble returns the nonce of a HandshakeV10 packet; ok is false
// when a field go-mysql reads is missing.
func greetingScramble(data []byte) (scramble []byte, ok bool) {
	end := bytes.IndexByte(data[1:], 0)
	if end < 0 {
		return nil, false
	}
	pos := 1 + end + 1 + 4 // version, connection id
	if len(data) < pos+8+1+2 {
		return nil, false
	}
	scramble = append(scramble, data[pos:pos+8]...)
	pos += 8
	if data[pos] != 0 {
		return nil, false
	}
	pos++
	capLow := binary.LittleEndian.Uint16(data[pos:])
	pos += 2
	if len(data) == pos { // a pre-4.1 greeting: go-mysql stops here
		return scramble, true
	}
	if len(data) < pos+1+2+2+1+10 {
		return nil, false
	}
	pos += 1 + 2 // charset, status
	capability := uint32(capLow) | uint32(binary.LittleEndian.Uint16(data[pos:]))<<16
	pos += 2
	authLen := int(data[pos])
	pos += 1 + 10
	if capability&0x8000 != 0 { // CLIENT_SECURE_CONNECTION
		rest := max(authLen-8, 13)
		if len(data) < pos+rest {
			return nil, false
		}
		scramble = append(scramble, data[pos:pos+rest-1]...)
		pos += rest
	}
	if capability&clientPluginAuth != 0 && bytes.IndexByte(data[pos:], 0) < 0 {
		return nil, false
	}
	return scramble, true
}

// ParsePublicKey reads a PEM RSA public key (source.server_public_key_file)
// and returns its DER form, as the server sends it.
func ParsePublicKey(pemData []byte) ([]byte, error) {
	block, _ := pem.Decode(pemData)
	if block == nil {
		return nil, errors.New("no PEM block in it")
	}
	if _, err := x509.ParsePKIXPublicKey(block.Bytes); err != nil {
		return nil, fmt.Errorf("not a public key: %w", err)
	}
	if _, err := rsaKey(block.Bytes); err != nil {
		return nil, errors.New("not an RSA public key")
	}
	return block.Bytes, nil
}
