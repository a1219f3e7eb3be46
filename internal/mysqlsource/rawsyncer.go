package mysqlsource

import (
	"io"
	"log/slog"
	"net"
	"strconv"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// RawSyncer is go-mysql's syncer of p's binlog in raw mode (events handed
// on undecoded, as the relay's reader takes them), as replica serverID,
// logging nothing: for tests that read the double's stream as it comes.
// StartSyncGTID starts it; Close ends it.
func (p *Primary) RawSyncer(serverID uint32) *replication.BinlogSyncer {
	host, port, _ := net.SplitHostPort(p.Addr())
	portN, _ := strconv.Atoi(port)
	return replication.NewBinlogSyncer(replication.BinlogSyncerConfig{ServerID: serverID, Flavor: mysql.MySQLFlavor, Host: host,
		Port: uint16(portN), User: p.opts.User, Password: p.opts.Password, RawModeEnabled: true, DisableRetrySync: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
}
