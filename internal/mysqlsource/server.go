package mysqlsource

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/go-mysql-org/go-mysql/server"
	vtmysql "vitess.io/vitess/go/mysql"
)

// netServer accepts MySQL protocol connections for a Primary.
type netServer struct {
	p         *Primary
	ln        net.Listener
	addr      string
	conf      *server.Server
	mu        sync.Mutex
	conns     map[net.Conn]bool
	done      chan struct{} // closed by close
	closeOnce sync.Once
}

var (
	rsaOnce sync.Once
	rsaKey  *rsa.PrivateKey
)

func newRSAKey() { rsaKey, _ = rsa.GenerateKey(rand.Reader, 2048) }

// PublicKeyPEM is the RSA public key the servers send for
// caching_sha2_password's full authentication (PEM): what a relay pins with
// source.server_public_key_file to log in without TLS.
func PublicKeyPEM() []byte {
	rsaOnce.Do(newRSAKey)
	der, _ := x509.MarshalPKIXPublicKey(&rsaKey.PublicKey)
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

func listen(p *Primary, addr string) (*netServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	rsaOnce.Do(newRSAKey)
	// MySQL 8's default authentication plugin; without TLS the client
	// fetches the RSA public key for the full authentication.
	conf := server.NewServer(p.opts.Version+"-log", mysql.DEFAULT_COLLATION_ID, mysql.AUTH_CACHING_SHA2_PASSWORD, rsaKey, nil)
	s := &netServer{p: p, ln: ln, addr: ln.Addr().String(), conf: conf, conns: map[net.Conn]bool{}, done: make(chan struct{})}
	go s.accept()
	return s, nil
}

func (s *netServer) accept() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns[c] = true
		s.mu.Unlock()
		go s.serve(c)
	}
}

func (s *netServer) serve(c net.Conn) {
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	h := &handler{p: s.p, srvDone: s.done}
	auth := server.NewInMemoryAuthenticationHandler()
	if err := auth.AddUser(s.p.opts.User, s.p.opts.Password); err != nil {
		return
	}
	conn, err := s.conf.NewCustomizedConn(c, auth, h)
	if err != nil {
		return
	}
	h.conn = conn
	defer s.p.unregister(h)
	for {
		if err := conn.HandleCommand(); err != nil {
			return
		}
		if conn.Closed() {
			return
		}
	}
}

func (s *netServer) dropAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.Close()
	}
}

func (s *netServer) close() {
	s.closeOnce.Do(func() { close(s.done) })
	s.ln.Close()
	s.dropAll()
}

// handler answers one connection's commands.
type handler struct {
	p         *Primary
	heartbeat time.Duration
	srvDone   chan struct{} // closed when the server closes
	conn      *server.Conn
	serverID  uint32
	// replicaUUID is the @replica_uuid (@slave_uuid) the client set.
	replicaUUID string
	// vars are the session's user variables (session.go): name in lower
	// case to value, nil for NULL.
	vars map[string]*string
	// kicked carries the error that ends this dump: a newer replica
	// registered with the same identity.
	kicked chan error
}

var _ server.ReplicationHandler = (*handler)(nil)

func (h *handler) UseDB(string) error { return nil }

func (h *handler) HandleFieldList(string, string) ([]*mysql.Field, error) {
	return nil, mysql.NewError(mysql.ER_UNKNOWN_COM_ERROR, "Unknown command")
}

func (h *handler) HandleStmtPrepare(string) (int, int, any, error) {
	return 0, 0, nil, mysql.NewError(mysql.ER_UNKNOWN_COM_ERROR, "prepared statements are not served by the double")
}

func (h *handler) HandleStmtExecute(any, string, []any) (*mysql.Result, error) {
	return nil, mysql.NewError(mysql.ER_UNKNOWN_COM_ERROR, "prepared statements are not served by the double")
}

func (h *handler) HandleStmtClose(any) error { return nil }

func (h *handler) HandleOtherCommand(cmd byte, _ []byte) error {
	return mysql.NewError(mysql.ER_UNKNOWN_COM_ERROR, fmt.Sprintf("command %d not supported", cmd))
}

func (h *handler) HandleQuery(q string) (*mysql.Result, error) {
	return h.p.query(h, q)
}

// HandleRegisterSlave needs REPLICATION SLAVE, as in MySQL. A replica
// registering with the identity of a connected one takes its place: the
// older dump ends with error 1236. MySQL 8 (rpl_source.cc,
// find_zombie_dump_thread) compares the @replica_uuid the clients set, and
// the server_id only between clients that set none: go-mysql sets a fresh
// random uuid on every connection, so two relays with one server_id both
// go on streaming.
func (h *handler) HandleRegisterSlave(data []byte) error {
	h.p.mu.Lock()
	defer h.p.mu.Unlock()
	if !h.p.allowed("REPLICATION SLAVE", "", "") {
		return deniedGlobal("REPLICATION SLAVE")
	}
	if len(data) < 4 {
		return mysql.ErrMalformPacket
	}
	h.serverID = binary.LittleEndian.Uint32(data)
	h.kicked = make(chan error, 1)
	if old := h.p.replicas[h.serverID]; old != nil && old != h && old.replicaUUID == h.replicaUUID {
		f := h.p.files[len(h.p.files)-1]
		kick := mysql.NewError(mysql.ER_MASTER_FATAL_ERROR_READING_BINLOG, fmt.Sprintf(
			"A replica with the same server_uuid/server_id as this replica has connected to the source; the first event "+
				"'%s' at 4, the last event read from './%s' at %d, the last byte read from './%s' at %d.",
			h.p.files[0].name, f.name, f.size, f.name, f.size))
		select {
		case old.kicked <- kick:
		default: // already kicked
		}
	}
	h.p.replicas[h.serverID] = h
	return nil
}

// unregister forgets h as the dump of its server_id.
func (p *Primary) unregister(h *handler) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.replicas[h.serverID] == h {
		delete(p.replicas, h.serverID)
	}
}

// kick ends the dump with err: the error packet goes to the client, then
// the connection ends.
func (h *handler) kick(err error) {
	_ = h.conn.WriteValue(err)
}

func (h *handler) HandleBinlogDump(mysql.Position) (*replication.BinlogStreamer, error) {
	h.p.mu.Lock()
	h.p.unknown = append(h.p.unknown, "COM_BINLOG_DUMP")
	h.p.mu.Unlock()
	return nil, mysql.NewError(mysql.ER_UNKNOWN_ERROR, "mysqlsource: COM_BINLOG_DUMP (file positions) is not modelled")
}

// HandleBinlogDumpGTID checks the replica's GTID set as MySQL's dump
// thread does, then streams the binlog from the first file it needs.
func (h *handler) HandleBinlogDumpGTID(set *mysql.MysqlGTIDSet) (*replication.BinlogStreamer, error) {
	got, err := ParseSet(set.String())
	if err != nil {
		return nil, mysql.NewError(mysql.ER_MASTER_FATAL_ERROR_READING_BINLOG, err.Error())
	}
	p := h.p
	p.mu.Lock()
	executed, purged, sid := p.executed.Clone(), p.purged.Clone(), p.sid
	start := 0
	for i := len(p.files) - 1; i >= 0; i-- {
		if p.files[i].prev.Minus(got).Empty() {
			start = i
			break
		}
	}
	firstFile := p.files[start].name
	p.mu.Unlock()
	// rpl_binlog_sender.cc check_start_gtid: first the server's own uuid,
	// then the purged transactions.
	if !got.OnlySID(sid).Minus(executed).Empty() {
		return nil, mysql.NewError(mysql.ER_MASTER_FATAL_ERROR_READING_BINLOG, erReplicaHasMoreGTIDs)
	}
	if missing := purged.Minus(got); !missing.Empty() {
		return nil, mysql.NewError(mysql.ER_MASTER_FATAL_ERROR_READING_BINLOG, fmt.Sprintf(erSourceHasPurged,
			got.Flat(), missing.Flat()))
	}
	// The dump runs here, in the connection's goroutine, writing packets
	// itself (so that it can end with an error packet, as MySQL does when
	// another replica takes its server_id); the streamer handed back is
	// already over and only ends the command.
	h.feed(got, firstFile)
	st := replication.NewBinlogStreamer()
	st.AddErrorToStreamer(errConnDone)
	return st, nil
}

// MySQL 8.0.26+ texts of the dump thread's refusals (error 1236).
const (
	erReplicaHasMoreGTIDs = "Replica has more GTIDs than the source has, using the source's SERVER_UUID. This may indicate that " +
		"the end of the binary log was truncated or that the last binary log file was lost, e.g., after a power or disk failure " +
		"when sync_binlog != 1. The source may or may not have rolled back transactions that were already replicated to the " +
		"replica. Suggest to replicate any transactions that source has rolled back from replica to source, and/or commit " +
		"empty transactions on source to account for transactions that have been committed on source but are not included " +
		"in GTID_EXECUTED."
	erSourceHasPurged = "Cannot replicate because the source purged required binary logs. Replicate the missing transactions " +
		"from elsewhere, or provision a new replica from backup. Consider increasing the source's binary log expiration " +
		"period. The GTID set sent by the replica is '%s', and the missing transactions are '%s'"
)

var errConnDone = errors.New("connection closed")

// feed sends the binlog from file on: an artificial rotate, then every
// event except the transactions in skip, following rotations, then waits
// for more, with heartbeats when idle.
func (h *handler) feed(skip *Set, file string) {
	p := h.p
	send := func(ev event) bool {
		select {
		case <-h.srvDone:
			return false
		case err := <-h.kicked:
			h.kick(err)
			return false
		default:
		}
		data := make([]byte, 4, 5+len(ev))
		data = append(append(data, mysql.OK_HEADER), ev...)
		return h.conn.WritePacket(data) == nil
	}
	// The replica's checksum declaration (rpl_binlog_sender.cc,
	// init_checksum_alg): the fake rotate, sent before any format
	// description, carries a CRC32 only when the replica declared CRC32;
	// the binlog's events go as the binlog holds them, which a replica
	// that declared nothing cannot read when they carry checksums.
	alg := h.replicaChecksum()
	if !send(newWriter(p.opts.Version, p.opts.ServerID, alg == "CRC32").fakeRotate(file)) {
		return
	}
	if alg == "" && p.w.checksum {
		p.mu.Lock()
		end := uint32(4)
		for _, f := range p.files {
			if f.name == file && len(f.events) > 0 {
				end = f.events[0].pos + uint32(len(f.events[0].data))
			}
		}
		p.mu.Unlock()
		h.kick(mysql.NewError(mysql.ER_MASTER_FATAL_ERROR_READING_BINLOG, fmt.Sprintf(
			"Replica can not handle replication events with the checksum that source is configured to log; the first event '' "+
				"at 4, the last event read from './%s' at %d, the last byte read from './%s' at %d.", file, end, file, end)))
		return
	}
	idx := 0
	for {
		p.mu.Lock()
		var f *binlogFile
		for _, x := range p.files {
			if x.name == file {
				f = x
			}
		}
		if f == nil {
			p.mu.Unlock()
			h.kick(mysql.NewError(mysql.ER_MASTER_FATAL_ERROR_READING_BINLOG, "could not find next log; the first event '"+
				file+"' at 4, the last event read from '"+file+"'"))
			return
		}
		batch := append([]loggedEvent(nil), f.events[idx:]...)
		closed, changed, size := f.closed, p.changed, f.size
		next := ""
		if closed {
			for i, x := range p.files {
				if x == f && i+1 < len(p.files) {
					next = p.files[i+1].name
				}
			}
		}
		p.mu.Unlock()
		for _, e := range batch {
			idx++
			if e.gtid != nil && skip.Contains(*e.gtid) {
				continue
			}
			if !send(e.data) {
				return
			}
		}
		if closed && next != "" {
			file, idx = next, 0
			continue
		}
		if len(batch) > 0 {
			continue
		}
		period := h.heartbeat
		if period <= 0 {
			period = 30 * time.Second
		}
		select {
		case <-changed:
		case <-h.srvDone:
			return
		case err := <-h.kicked:
			h.kick(err)
			return
		case <-time.After(period):
			if !send(p.w.heartbeat(file, size)) {
				return
			}
		}
	}
}

// replicaChecksum is the checksum algorithm the replica declared for its
// dump, as MySQL reads it: @source_binlog_checksum, else
// @master_binlog_checksum, CRC32 or NONE; "" when it declared none (or a
// value MySQL does not know).
func (h *handler) replicaChecksum() string {
	v := h.userVar("source_binlog_checksum", "master_binlog_checksum")
	if v == nil {
		return ""
	}
	switch strings.ToUpper(*v) {
	case "CRC32":
		return "CRC32"
	case "NONE":
		return "NONE"
	}
	return ""
}

// fakeRotate is the artificial rotate a dump starts with: timestamp and
// end position 0, flag LOG_EVENT_ARTIFICIAL_F; with w's checksum.
func (w *writer) fakeRotate(file string) event {
	return w.stamp(event(vtmysql.NewFakeRotateEvent(w.f, w.s, file).Bytes()), 0, 0)
}
