package itest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// A source host that accepts TCP and never answers (a SIGSTOPped or
// overloaded mysqld, a half-open load balancer), at the point of the
// conversation a test chooses. HungSource is a TCP proxy in front of a real
// server that passes the MySQL protocol packet by packet and stops passing
// them where its mode says; Freeze stops it everywhere at once, as SIGSTOP
// does to mysqld (the kernel still accepts new connections).

// Hang points of a HungSource.
type HangAt int

// Hang points.
const (
	// HangNever passes everything until Freeze.
	HangNever HangAt = iota
	// HangAtAccept accepts connections and sends nothing: the client waits
	// for the server's greeting.
	HangAtAccept
	// HangAtLogin sends the server's greeting and passes nothing after it:
	// the client waits for the answer to its login.
	HangAtLogin
	// HangAtFirstQuery passes the login and hangs the first command (the
	// first client packet with sequence number 0).
	HangAtFirstQuery
	// HangAtRegister passes everything but a replica's registration
	// (COM_REGISTER_SLAVE): the server answers the relay's queries, and
	// never starts a binlog stream.
	HangAtRegister
	// HangAtStream passes everything until the client asks for the binlog
	// (COM_BINLOG_DUMP, COM_BINLOG_DUMP_GTID), then nothing the server
	// sends: the stream starts and never shows an event. A connection that
	// asks for the binlog and reads nothing (the privilege try) passes.
	HangAtStream
)

const (
	comRegisterSlave  = 0x15
	comBinlogDump     = 0x12
	comBinlogDumpGTID = 0x1e
)

// HungSource is the proxy; Addr is where clients connect.
type HungSource struct {
	Addr   string
	target string
	at     HangAt
	ln     net.Listener

	mu       sync.Mutex
	frozen   chan struct{} // closed by Freeze
	done     chan struct{} // closed by Close
	closed   bool
	conns    []net.Conn
	accepted int
	held     int // registrations held (HangAtRegister)
}

// StartHungSource starts a proxy to target that hangs at at.
func StartHungSource(t testing.TB, target string, at HangAt) *HungSource {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &HungSource{Addr: ln.Addr().String(), target: target, at: at, ln: ln,
		frozen: make(chan struct{}), done: make(chan struct{})}
	go p.serve()
	t.Cleanup(p.Close)
	return p
}

// Freeze stops every connection, open and new, from passing anything more.
func (p *HungSource) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.frozen:
	default:
		close(p.frozen)
	}
}

// Thaw lets new connections pass again (as SIGCONT would, except that the
// connections open while frozen stay hung until closed).
func (p *HungSource) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frozen = make(chan struct{})
}

// Registrations is how many replica registrations HangAtRegister holds.
func (p *HungSource) Registrations() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}

// Accepted is how many connections the proxy has accepted.
func (p *HungSource) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

func (p *HungSource) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns = append(p.conns, c)
	return true
}

func (p *HungSource) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.accepted++
		frozen := p.frozen
		p.mu.Unlock()
		if !p.track(c) {
			return
		}
		select {
		case <-frozen:
			continue // accepted by the kernel, never answered
		default:
		}
		if p.at == HangAtAccept {
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		if !p.track(s) {
			return
		}
		dumped := make(chan struct{}) // closed when the client asks for the binlog (HangAtStream)
		go func() { p.pass(s, c, frozen, false, dumped); s.Close(); c.Close() }()
		go func() { p.pass(c, s, frozen, true, dumped); s.Close(); c.Close() }()
	}
}

// pass copies MySQL packets from src to dst until either ends, stopping
// for good (until Close) at the mode's hang point or once frozen.
func (p *HungSource) pass(dst io.Writer, src io.Reader, frozen chan struct{}, fromServer bool, dumped chan struct{}) {
	hdr := make([]byte, 4)
	var buf []byte
	for n := 0; ; n++ {
		if _, err := io.ReadFull(src, hdr); err != nil {
			return
		}
		size := int(hdr[0]) | int(hdr[1])<<8 | int(hdr[2])<<16
		if cap(buf) < 4+size {
			buf = make([]byte, 4+size)
		}
		buf = buf[:4+size]
		copy(buf, hdr)
		if _, err := io.ReadFull(src, buf[4:]); err != nil {
			return
		}
		hang := false
		switch {
		case p.at == HangAtLogin && (!fromServer || n > 0):
			hang = true // the greeting passes, nothing after it
		case p.at == HangAtFirstQuery && !fromServer && hdr[3] == 0:
			hang = true
		case p.at == HangAtRegister && !fromServer && hdr[3] == 0 && size > 0 && buf[4] == comRegisterSlave:
			hang = true
			p.mu.Lock()
			p.held++
			p.mu.Unlock()
		case p.at == HangAtStream && !fromServer && hdr[3] == 0 && size > 0 && (buf[4] == comBinlogDump || buf[4] == comBinlogDumpGTID):
			select {
			case <-dumped:
			default:
				close(dumped)
			}
		case p.at == HangAtStream && fromServer:
			select {
			case <-dumped:
				hang = true
			default:
			}
		}
		select {
		case <-frozen:
			hang = true
		default:
		}
		if hang {
			<-p.done
			return
		}
		if _, err := dst.Write(buf); err != nil {
			return
		}
	}
}

// Close stops the proxy and closes its connections.
func (p *HungSource) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	close(p.done)
	p.ln.Close()
	for _, c := range p.conns {
		c.Close()
	}
}
