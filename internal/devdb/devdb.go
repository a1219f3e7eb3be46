// Package devdb starts a scratch MariaDB server for demos and tests: its own
// data directory and port on 127.0.0.1, the binary log on with the settings
// the relay needs (ROW, FULL image, FULL row metadata, GTID), and a root
// account with a password. The server process belongs to the caller: Stop,
// Kill and Start manage it; nothing is left running after Stop.
package devdb

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outbox-relay/outbox-relay/binlog"
)

// RootPassword is the scratch server's root password.
const RootPassword = "relay-dev"

// Options configures a scratch server.
type Options struct {
	Dir  string // data, socket and log live here; created if missing
	Port int    // 0 picks a free port
	// Settings are extra mariadbd options (name -> value), overriding the
	// defaults; a value of "" passes --name alone, "-" removes the option.
	Settings map[string]string
	// ServerID is the server's server_id (default 1).
	ServerID int
}

// Server is a running scratch MariaDB.
type Server struct {
	opts Options
	cmd  *exec.Cmd
	done chan struct{}
	Addr string
}

// ErrNotInstalled: mariadbd is not on this machine.
var ErrNotInstalled = errors.New("mariadb server is not installed (apt-get install mariadb-server)")

func binary(name string) (string, error) {
	for _, dir := range []string{"", "/usr/sbin/", "/usr/bin/", "/usr/local/mysql/bin/"} {
		if dir == "" {
			if p, err := exec.LookPath(name); err == nil {
				return p, nil
			}
			continue
		}
		if _, err := os.Stat(dir + name); err == nil {
			return dir + name, nil
		}
	}
	return "", ErrNotInstalled
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago. It
// is picked below the kernel's ephemeral range where it can: a port from
// that range (what listening on port 0 hands out) is also the source port
// of the next outgoing connection of any process, and a busy host's
// connections took one between this call and a server's bind.
func FreePort() (int, error) {
	lo, hi := 10000, min(ephemeralLow(), kafkaPorts)-1
	for try := 0; try < 50 && hi > lo; try++ {
		p := lo + rand.IntN(hi-lo+1)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue // taken: another
		}
		l.Close()
		return p, nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// kafkaPorts is where the development and CI Kafka brokers listen
// (deploy/dev/kafka.sh: 29092 and up, helpers' brokers up to 32900): a
// broker restarted there must find its port free.
const kafkaPorts = 29000

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// default where it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 1024 {
				return n
			}
		}
	}
	return 32768
}

// Start initialises opts.Dir if it is new, starts mariadbd and waits until
// it accepts connections.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.Port != 0 {
		return start(ctx, opts)
	}
	// A port picked here may be taken by another process before mariadbd
	// binds it: pick another.
	for try := 0; ; try++ {
		s, err := start(ctx, opts)
		if !errors.Is(err, errPortTaken) || try == 4 {
			return s, err
		}
	}
}

func start(ctx context.Context, opts Options) (*Server, error) {
	if opts.Port == 0 {
		p, err := FreePort()
		if err != nil {
			return nil, fmt.Errorf("pick port: %w", err)
		}
		opts.Port = p
	}
	if opts.ServerID == 0 {
		opts.ServerID = 1
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	opts.Dir = dir
	s := &Server{opts: opts, Addr: fmt.Sprintf("127.0.0.1:%d", opts.Port)}
	if _, err := os.Stat(filepath.Join(dir, "data", "mysql")); err != nil {
		if err := s.install(ctx); err != nil {
			return nil, err
		}
	}
	if err := s.Start(ctx); err != nil {
		return nil, err
	}
	// Secured once (a marker of its own: a first start that met a taken
	// port installed the directory but never secured it).
	secured := filepath.Join(dir, "secured")
	if _, err := os.Stat(secured); err != nil {
		if err := s.secure(); err != nil {
			s.Stop()
			return nil, err
		}
		if err := os.WriteFile(secured, nil, 0o644); err != nil {
			s.Stop()
			return nil, err
		}
	}
	return s, nil
}

func (s *Server) install(ctx context.Context) error {
	bin, err := binary("mariadb-install-db")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(s.opts.Dir, "data"), 0o755); err != nil {
		return err
	}
	// A temporary directory of its own: in the shared /tmp, servers started
	// at once by other processes have collided on temporary table names.
	if err := os.MkdirAll(filepath.Join(s.opts.Dir, "tmp"), 0o755); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, bin, "--no-defaults", "--user=root", "--auth-root-authentication-method=normal",
		"--skip-test-db", "--datadir="+filepath.Join(s.opts.Dir, "data"), "--tmpdir="+filepath.Join(s.opts.Dir, "tmp"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("initialise mariadb data directory: %w: %s", err, out)
	}
	return nil
}

// args are the mariadbd options: relay-ready defaults plus opts.Settings.
func (s *Server) args() []string {
	d := s.opts.Dir
	set := map[string]string{
		"datadir":                        filepath.Join(d, "data"),
		"socket":                         filepath.Join(d, "mysqld.sock"),
		"pid-file":                       filepath.Join(d, "mysqld.pid"),
		"log-error":                      filepath.Join(d, "error.log"),
		"tmpdir":                         filepath.Join(d, "tmp"),
		"port":                           strconv.Itoa(s.opts.Port),
		"bind-address":                   "127.0.0.1",
		"user":                           "root",
		"server-id":                      strconv.Itoa(s.opts.ServerID),
		"log-bin":                        filepath.Join(d, "data", "binlog"),
		"binlog-format":                  "ROW",
		"binlog-row-image":               "FULL",
		"binlog-row-metadata":            "FULL",
		"gtid-strict-mode":               "ON",
		"innodb-buffer-pool-size":        "64M",
		"innodb-log-file-size":           "48M",
		"innodb-flush-log-at-trx-commit": "2",
		"sync-binlog":                    "0",
		"skip-name-resolve":              "",
		"max-connections":                "200",
		"character-set-server":           "utf8mb4",
		"collation-server":               "utf8mb4_general_ci",
	}
	for k, v := range s.opts.Settings {
		if v == "-" {
			delete(set, k)
			continue
		}
		set[k] = v
	}
	args := []string{"--no-defaults"}
	for k, v := range set {
		if v == "" {
			args = append(args, "--"+k)
		} else {
			args = append(args, "--"+k+"="+v)
		}
	}
	return args
}

// Start starts the server process (after Stop or Kill) and waits until it
// answers.
func (s *Server) Start(ctx context.Context) error {
	bin, err := binary("mariadbd")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(s.opts.Dir, "tmp"), 0o755); err != nil {
		return err
	}
	logStart := s.logSize()
	cmd := exec.Command(bin, s.args()...)
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start mariadbd: %w", err)
	}
	s.cmd = cmd
	s.done = make(chan struct{})
	go func() { _ = cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := s.connect("root", RootPassword)
		if me := (*mysql.MyError)(nil); errors.As(err, &me) {
			c, err = s.connect("root", "") // fresh, not yet secured
		}
		if err == nil {
			err = s.ours(c)
			c.Close()
			if err != nil {
				s.Kill()
				return err
			}
			return nil
		}
		select {
		case <-s.done:
			tail := s.logSince(logStart)
			if bindFailed(tail) {
				return fmt.Errorf("%w: mariadbd could not bind %s: %s", errPortTaken, s.Addr, tail)
			}
			return fmt.Errorf("mariadbd exited during start-up: %s", tail)
		case <-ctx.Done():
			s.Kill()
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Kill()
			return fmt.Errorf("mariadbd did not answer within 60s: %s", s.logSince(logStart))
		}
	}
}

// errPortTaken: the server that answered on the port is not the one just
// started (another process's server took the port between FreePort and
// the bind; ours then exits on "Address already in use").
var errPortTaken = errors.New("port taken by another server")

// ours checks that the server answering on c is this one: its data
// directory.
func (s *Server) ours(c *client.Conn) error {
	// A server that cannot say (another kind of server on the port: the
	// tests' MySQL emulator) is not this one either.
	res, err := c.Execute("SELECT @@datadir")
	if err != nil {
		return fmt.Errorf("%w: %s cannot tell its data directory: %v", errPortTaken, s.Addr, err)
	}
	defer res.Close()
	got, err := res.GetString(0, 0)
	if err != nil {
		return fmt.Errorf("%w: %s cannot tell its data directory: %v", errPortTaken, s.Addr, err)
	}
	want := filepath.Join(s.opts.Dir, "data")
	if filepath.Clean(got) != want {
		return fmt.Errorf("%w: %s answers with data directory %s, not %s", errPortTaken, s.Addr, got, want)
	}
	return nil
}

// bindFailed tells whether a start-up's log says its TCP port was in use
// (the port was taken by a process that is not a MySQL server, or that
// does not answer).
func bindFailed(log string) bool {
	return strings.Contains(log, "Can't start server: Bind on TCP/IP port") &&
		(strings.Contains(log, "error: 98") || strings.Contains(log, "Address already in use"))
}

func (s *Server) logSize() int64 {
	fi, err := os.Stat(filepath.Join(s.opts.Dir, "error.log"))
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logSince is what the server logged from offset on, its last 2,000 bytes.
func (s *Server) logSince(offset int64) string {
	b, _ := os.ReadFile(filepath.Join(s.opts.Dir, "error.log"))
	if offset > int64(len(b)) {
		offset = 0
	}
	b = b[offset:]
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// loginTimeout bounds a login to a scratch server, the dial and the
// handshake together, for Start's wait, Root, Exec and Query alike: long
// enough for a server that is only slow (a loaded 2-core CI host runs three
// test shards, each with its own server and relays, beside other test
// processes: the relay's own source.connect_timeout is 5 s too), short
// enough that a process that accepts and never speaks is given up on.
const loginTimeout = 5 * time.Second

// connect logs in within loginTimeout: the dial and the handshake (a
// process that accepts and never speaks holds a connection without a
// deadline forever). The connection has no deadline after.
func (s *Server) connect(user, pass string) (*client.Conn, error) {
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		end := time.Now().Add(loginTimeout)
		c, err := (&net.Dialer{Deadline: end}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return c, c.SetDeadline(end)
	}
	c, err := client.ConnectWithDialer(context.Background(), "tcp", s.Addr, user, pass, "", dial)
	if err != nil {
		return nil, err
	}
	if err := c.SetDeadline(time.Time{}); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (s *Server) secure() error {
	if c, err := s.connect("root", RootPassword); err == nil {
		c.Close() // secured before the marker existed
		return nil
	}
	c, err := s.connect("root", "")
	if err != nil {
		return err
	}
	defer c.Close()
	var stmts []string
	for _, host := range []string{"localhost", "127.0.0.1", "::1", "%"} {
		u := "'root'@'" + host + "'"
		stmts = append(stmts,
			"CREATE USER IF NOT EXISTS "+u,
			"ALTER USER "+u+" IDENTIFIED BY '"+RootPassword+"'",
			"GRANT ALL PRIVILEGES ON *.* TO "+u+" WITH GRANT OPTION")
	}
	for _, q := range append(stmts, "FLUSH PRIVILEGES") {
		if _, err := c.Execute(q); err != nil {
			return fmt.Errorf("secure scratch server: %s: %w", q, err)
		}
	}
	return nil
}

// Root opens a connection as root.
func (s *Server) Root() (*client.Conn, error) {
	return s.connect("root", RootPassword)
}

// Exec runs statements as root, in order, on one connection.
func (s *Server) Exec(stmts ...string) error {
	c, err := s.Root()
	if err != nil {
		return err
	}
	defer c.Close()
	for _, q := range stmts {
		if _, err := c.Execute(q); err != nil {
			return fmt.Errorf("%s: %w", abbreviate(q), err)
		}
	}
	return nil
}

// Query runs one query as root and returns its rows as strings.
func (s *Server) Query(q string) ([][]string, error) {
	c, err := binlog.Connect(context.Background(), binlog.Config{User: "root", Password: RootPassword, ConnectTimeout: loginTimeout}, s.Addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return binlog.Query(c, q)
}

func abbreviate(q string) string {
	q = strings.Join(strings.Fields(q), " ")
	if len(q) > 80 {
		return q[:80] + "..."
	}
	return q
}

// Stop shuts the server down cleanly and waits for it.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(60 * time.Second):
		s.Kill()
	}
	s.cmd = nil
}

// Kill ends the server with SIGKILL, as a crash would.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
	s.cmd = nil
}

// Port is the server's TCP port.
func (s *Server) Port() int { return s.opts.Port }

// Replicate makes s a GTID replica of primary from the start of the
// primary's binlog: RESET MASTER and an empty gtid_slave_pos drop what s
// logged itself (its set-up statements; with gtid_strict_mode their GTIDs
// would stop replication), then CHANGE MASTER TO the primary's address with
// user and password, MASTER_USE_GTID=slave_pos, and START SLAVE. Start s with log_slave_updates (Settings
// "log-slave-updates": "") so replicated transactions reach its own binlog
// under their original GTIDs.
func (s *Server) Replicate(primary *Server, user, password string) error {
	host, port, err := net.SplitHostPort(primary.Addr)
	if err != nil {
		return err
	}
	return s.Exec(
		"STOP SLAVE",
		"RESET MASTER",
		"SET GLOBAL gtid_slave_pos = ''",
		fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='%s', MASTER_PORT=%s, MASTER_USER='%s', MASTER_PASSWORD='%s', "+
			"MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1", host, port, user, password),
		"START SLAVE")
}
