package source

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
)

// Nothing to prove: a checkpoint without a fingerprint, or with one of a
// scheme this build does not compute, accepts the host without asking it
// (nothing listens on its address) and says why.
func TestProveWithoutFingerprintAcceptsAndSaysSo(t *testing.T) {
	srv := &binlog.Server{Addr: "127.0.0.1:1", Flavor: "mariadb"}
	for name, fp := range map[string]*checkpoint.Fingerprint{
		"none":         nil,
		"other scheme": {GTID: "0-1-5", Before: "0-1-4", Tables: []string{"app.outbox"}, Rows: 1, Digest: "rows-sha512-v9:00"},
		// The first scheme also counted UPDATE and DELETE images, which a
		// replica logs with its own binlog_row_image.
		"first scheme":  {GTID: "0-1-5", Before: "0-1-4", Tables: []string{"app.outbox"}, Rows: 1, Digest: "rows-xxh64-v1:5d594bc836fd1336"},
		"empty digest":  {GTID: "0-1-5", Before: "0-1-4", Tables: []string{"app.outbox"}, Rows: 1},
		"scheme prefix": {GTID: "0-1-5", Before: "0-1-4", Tables: []string{"app.outbox"}, Rows: 1, Digest: binlog.DigestScheme + "x:00"},
	} {
		p, err := Prove(context.Background(), binlog.Config{}, srv, &checkpoint.Checkpoint{Flavor: "mariadb", GTIDSet: "0-1-9", Fingerprint: fp}, time.Second)
		if err != nil || p.Kind != ProofNone || p.Detail == "" {
			t.Errorf("%s: %+v, %v; want ProofNone with a reason", name, p, err)
		}
	}
}

// A host that cannot show the transaction is accepted only as the server
// the checkpoint was read from; another is unproven (purged), and the
// error names the operator's command with the checkpoint's set.
func TestUnprovenHostAcceptedOnlyAsTheSameServer(t *testing.T) {
	cp := &checkpoint.Checkpoint{GTIDSet: "0-1-9", Host: "a:3306", ServerID: "1", SourceUID: "uid-a"}
	for _, c := range []struct {
		name     string
		srv      binlog.Server
		accepted bool
	}{
		{"the same server", binlog.Server{Addr: "a:3306", ServerID: "1", UID: "uid-a"}, true},
		{"the same server at another address", binlog.Server{Addr: "vip:3306", ServerID: "1", UID: "uid-a"}, true},
		{"another uid", binlog.Server{Addr: "a:3306", ServerID: "1", UID: "uid-b"}, false},
		{"another server_id", binlog.Server{Addr: "a:3306", ServerID: "2", UID: "uid-a"}, false},
		{"no uid", binlog.Server{Addr: "a:3306", ServerID: "1"}, false},
	} {
		p, err := sameServer(&c.srv, cp, "the transaction", "purged")
		switch {
		case c.accepted && (err != nil || p.Kind != ProofSameServer):
			t.Errorf("%s: %+v, %v; want accepted as the same server", c.name, p, err)
		case !c.accepted && (!errors.Is(err, ErrUnproven) || !errors.Is(err, binlog.ErrPurged) ||
			!strings.Contains(err.Error(), "checkpoint set --gtid '0-1-9' --schema keep")):
			t.Errorf("%s: %v; want ErrUnproven naming `checkpoint set --gtid '0-1-9' --schema keep`", c.name, err)
		}
	}
	if _, err := sameServer(&binlog.Server{UID: ""}, &checkpoint.Checkpoint{}, "x", "y"); err == nil {
		t.Error("an empty uid on both sides made the host the same server")
	}
}
