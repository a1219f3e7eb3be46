package binlog

import (
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/replication"
)

// TestRedactStatementHidesCredentials: each statement holds the
// credential "pw" (in some spelling); the redacted text holds none of it
// and keeps the rest.
func TestRedactStatementHidesCredentials(t *testing.T) {
	for _, c := range []struct{ q, secret, keep string }{
		{"GRANT ALL ON *.* TO 'u'@'%' IDENTIFIED BY 'S3cr3t!'", "S3cr3t!", "TO 'u'@'%'"},
		{"grant select on app.* to u@localhost identified by \"S3cr3t!\" with grant option", "S3cr3t!", "with grant option"},
		{"CREATE USER 'u'@'%' IDENTIFIED BY 'it''s a \\'secret\\''", "secret", "CREATE USER 'u'@'%'"},
		{`CREATE USER u IDENTIFIED BY "say \"hi\" secret"`, "secret", "CREATE USER u"},
		{"CREATE USER 'a'@'%' IDENTIFIED BY 'first-secret', 'b'@'%' IDENTIFIED BY 'second-secret'", "secret", "'b'@'%'"},
		{"ALTER USER 'u'@'%' IDENTIFIED BY 'new-secret' REPLACE 'old-secret'", "secret", "ALTER USER"},
		{"CREATE USER u IDENTIFIED WITH caching_sha2_password BY 'secret'", "secret", "caching_sha2_password"},
		{"CREATE USER u IDENTIFIED WITH 'mysql_native_password' AS '*SECRETHASH'", "SECRETHASH", "mysql_native_password"},
		{"CREATE USER u IDENTIFIED VIA ed25519 USING PASSWORD('secret') OR unix_socket", "secret", "OR unix_socket"},
		{"CREATE USER u IDENTIFIED VIA mysql_native_password USING '*SECRETHASH'", "SECRETHASH", "USING"},
		{"GRANT USAGE ON *.* TO u IDENTIFIED BY PASSWORD '*SECRETHASH'", "SECRETHASH", "BY PASSWORD"},
		{"SET PASSWORD FOR 'u'@'%' = PASSWORD('secret')", "secret", "SET PASSWORD FOR 'u'@'%'"},
		{"SET PASSWORD = 'secret'", "secret", "SET PASSWORD"},
		{"set password for u@'%' = \"secret\"", "secret", "set password"},
		{"SELECT OLD_PASSWORD( 'secret' )", "secret", "SELECT"},
		{"CHANGE MASTER TO MASTER_HOST='db1', MASTER_USER='repl', MASTER_PASSWORD='secret', MASTER_USE_GTID=slave_pos", "secret", "MASTER_HOST='db1'"},
		{"CHANGE REPLICATION SOURCE TO SOURCE_PASSWORD = \"secret\"", "secret", "SOURCE_PASSWORD"},
		{"CREATE SERVER s FOREIGN DATA WRAPPER mysql OPTIONS (USER 'r', PASSWORD 'secret', HOST 'h')", "secret", "HOST 'h'"},
		{"CREATE USER u IDENTIFIED BY _utf8mb4'secret'", "secret", "CREATE USER u"},
		{"CREATE USER u /* IDENTIFIED BY 'comment' */ IDENTIFIED -- x\n BY 'secret'", "secret", "CREATE USER u"},
		{"CREATE USER u IDENTIFIED BY 'cut short secret", "secret", "CREATE USER u"},
		{"CREATE USER u IDENTIFIED BY 'a\\\\' , v IDENTIFIED BY 'secret'", "secret", ", v IDENTIFIED"},
		{"/*!80000 CREATE USER u IDENTIFIED BY 'secret' */", "secret", "CREATE USER u"},
		{"CREATE USER `we'ird`@'%' IDENTIFIED BY 'secret'", "secret", "`we'ird`"},
		// The DSN of a FEDERATED or CONNECT table, and CONNECT's option list.
		{"CREATE TABLE app.fed (id INT) ENGINE=FEDERATED CONNECTION='mysql://relay:secret@db2:3306/app/outbox'", "secret", "ENGINE=FEDERATED"},
		{"ALTER TABLE app.outbox ENGINE=CONNECT TABLE_TYPE=MYSQL connection = \"mysql://u:secret@h/db/t\"", "secret", "TABLE_TYPE=MYSQL"},
		{"CREATE TABLE t (id INT) ENGINE=CONNECT TABLE_TYPE=ODBC CONNECTION 'DSN=x;UID=u;PWD=secret'", "secret", "TABLE_TYPE=ODBC"},
		{"CREATE TABLE t (id INT) ENGINE=CONNECT TABLE_TYPE=MYSQL OPTION_LIST='user=u,password=secret'", "secret", "TABLE_TYPE=MYSQL"},
	} {
		got := RedactStatement(c.q)
		if strings.Contains(got, c.secret) || strings.Contains(got, "pw") && strings.Contains(c.q, "'pw'") {
			t.Errorf("RedactStatement(%q) = %q: the credential is still there", c.q, got)
		}
		if !strings.Contains(got, c.keep) || !strings.Contains(got, "<redacted>") {
			t.Errorf("RedactStatement(%q) = %q: want %q kept and a <redacted> marker", c.q, got, c.keep)
		}
		msg := "track CREATE USER: near \"" + c.q[len(c.q)/2:] + "\" (statement: " + got + ")"
		if r := RedactIn(msg, c.q); strings.Contains(r, c.secret) {
			t.Errorf("RedactIn(%q) = %q: the credential is still there", msg, r)
		}
	}
	// Statements without credentials are left alone.
	for _, q := range []string{
		"ALTER TABLE app.outbox ADD COLUMN note VARCHAR(20) DEFAULT 'by'",
		"CREATE TABLE t (a INT) COMMENT 'identified by nothing'",
		"CREATE USER u IDENTIFIED VIA unix_socket",
		"GRANT SELECT ON app.* TO 'u'@'%'",
		"INSERT INTO t VALUES ('password', 'x')",
	} {
		if got := RedactStatement(q); got != q {
			t.Errorf("RedactStatement(%q) = %q, want it unchanged", q, got)
		}
	}
}

// The framer's messages about a statement it cannot place (outside a GTID
// transaction, an XA statement it cannot read) quote it redacted: a
// credential in it never reaches the error, the rest does.
func TestFramerQueryErrorsQuoteTheStatementRedacted(t *testing.T) {
	for _, c := range []struct {
		state groupState
		q     string
	}{
		{stateIdle, "CREATE USER 'u'@'%' IDENTIFIED BY 'S3cr3t!'"},
		{stateOpened, "XA START 'x', IDENTIFIED BY 'S3cr3t!'"},
		{stateOpened, "XA COMMIT 'x' ONE PHASE IDENTIFIED BY 'S3cr3t!'"},
	} {
		f := framer{state: c.state, gtid: "0-1-7"}
		_, _, err := f.query(&replication.QueryEvent{Query: []byte(c.q)})
		if err == nil {
			t.Fatalf("%q: no error", c.q)
		}
		if msg := err.Error(); strings.Contains(msg, "S3cr3t!") || !strings.Contains(msg, "<redacted>") {
			t.Errorf("%q: error %q", c.q, msg)
		}
	}
}
