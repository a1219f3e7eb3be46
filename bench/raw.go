package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outbox-relay/outbox-relay/internal/devdb"
)

// rawMain is the physical limit the report compares the relay against:
// read the binlog from a GTID set as a replica does, in go-mysql's raw mode
// (no event decoded beyond its header; nothing produced), until the end of
// a load. Whatever the relay adds to this (decoding, framing, routing,
// producing, committing) is its own cost.
func rawMain(args []string) error {
	fs := flag.NewFlagSet("raw", flag.ContinueOnError)
	rf := replicaFlags(fs)
	file := fs.String("file", "", "binlog file of the end position")
	end := fs.Uint("end", 0, "binlog position to read up to (the end of the load)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	syncer, stream, err := rf.start(replication.BinlogSyncerConfig{ServerID: 9998, RawModeEnabled: true, DisableRetrySync: true})
	if err != nil {
		return err
	}
	defer syncer.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	var cur string
	for {
		ev, err := stream.GetEvent(ctx)
		if err != nil {
			return err
		}
		if r, ok := ev.Event.(*replication.RotateEvent); ok {
			cur = string(r.NextLogName)
			continue
		}
		if cur == *file && uint(ev.Header.LogPos) >= *end {
			return nil
		}
	}
}

// replica is the source a contender reads as a replica (replicaFlags).
type replica struct{ addr, user, pass, from *string }

// replicaFlags adds the flags naming the source and the position a
// contender reads from to fs.
func replicaFlags(fs *flag.FlagSet) replica {
	return replica{addr: fs.String("source", "", "host:port"), user: fs.String("user", "root", ""),
		pass: fs.String("password", "", ""), from: fs.String("from", "", "MariaDB GTID position to start after")}
}

// start starts reading the source's binlog after from with a MariaDB
// syncer of cfg (its source and credentials filled in). Close the syncer.
func (r replica) start(cfg replication.BinlogSyncerConfig) (*replication.BinlogSyncer, *replication.BinlogStreamer, error) {
	host, portStr, _ := net.SplitHostPort(*r.addr)
	port, _ := strconv.Atoi(portStr)
	cfg.Flavor, cfg.Host, cfg.Port, cfg.User, cfg.Password = mysql.MariaDBFlavor, host, uint16(port), *r.user, *r.pass
	set, err := mysql.ParseMariadbGTIDSet(*r.from)
	if err != nil {
		return nil, nil, err
	}
	syncer := replication.NewBinlogSyncer(cfg)
	stream, err := syncer.StartSyncGTID(set)
	if err != nil {
		syncer.Close()
		return nil, nil, err
	}
	return syncer, stream, nil
}

// raw runs rawMain's process over db's rows (from, to the end of its load).
func (h *harness) raw(self, db, from string) (catchUp, error) {
	end, ok := h.loadEnd[db]
	if !ok {
		return catchUp{}, fmt.Errorf("raw: no end position for %s", db)
	}
	cmd := exec.Command(self, "raw", "-source", h.db.Addr, "-password", devdb.RootPassword, "-from", from,
		"-file", end.file, "-end", strconv.FormatUint(uint64(end.pos), 10))
	cmd.Stderr = os.Stderr
	host := readHostTicks()
	began := time.Now()
	if err := cmd.Run(); err != nil {
		return catchUp{}, fmt.Errorf("raw: %w", err)
	}
	return catchUp{elapsed: time.Since(began), cpu: cpuTime(cmd.ProcessState), hostBusy: host.busySince(readHostTicks())}, nil
}

// binlogEnd is the server's binlog file and position now.
func (h *harness) binlogEnd() (binlogPos, error) {
	rows, err := h.db.Query("SHOW MASTER STATUS")
	if err != nil {
		return binlogPos{}, fmt.Errorf("read binlog position: %w", err)
	}
	if len(rows) == 0 || len(rows[0]) < 2 {
		return binlogPos{}, fmt.Errorf("read binlog position: binary logging is off")
	}
	pos, err := strconv.ParseUint(rows[0][1], 10, 32)
	if err != nil {
		return binlogPos{}, fmt.Errorf("read binlog position: %q: %w", rows[0][1], err)
	}
	return binlogPos{rows[0][0], uint32(pos)}, nil
}
