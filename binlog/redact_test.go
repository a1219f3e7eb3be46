package binlog

import (
	"fmt"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/replication"
)

// TestRedactStatementHidesCredentials: each statement holds a credential
// (in some spelling, behind comments, quotes and white space of every
// kind, or read otherwise by a server in another sql_mode or character
// set); the redacted text holds none of it and keeps what is no literal.
func TestRedactStatementHidesCredentials(t *testing.T) {
	for _, c := range []struct{ q, secret, keep string }{
		{"GRANT ALL ON *.* TO 'u'@'%' IDENTIFIED BY 'S3cr3t!'", "S3cr3t!", "GRANT ALL ON *.* TO '<redacted>'@'<redacted>' IDENTIFIED BY"},
		{"grant select on app.* to u@localhost identified by \"S3cr3t!\" with grant option", "S3cr3t!", "with grant option"},
		{"CREATE USER 'u'@'%' IDENTIFIED BY 'it''s a \\'secret\\''", "secret", "CREATE USER '<redacted>'@'<redacted>' IDENTIFIED BY"},
		{`CREATE USER u IDENTIFIED BY "say \"hi\" secret"`, "secret", "CREATE USER u"},
		{"CREATE USER 'a'@'%' IDENTIFIED BY 'first-secret', 'b'@'%' IDENTIFIED BY 'second-secret'", "secret", ", '<redacted>'@"},
		{"ALTER USER 'u'@'%' IDENTIFIED BY 'new-secret' REPLACE 'old-secret'", "secret", "REPLACE '<redacted>'"},
		{"CREATE USER u IDENTIFIED WITH caching_sha2_password BY 'secret'", "secret", "caching_sha2_password"},
		{"CREATE USER u IDENTIFIED VIA ed25519 USING PASSWORD('secret') OR unix_socket", "secret", "OR unix_socket"},
		{"GRANT USAGE ON *.* TO u IDENTIFIED BY PASSWORD '*SECRETHASH'", "SECRETHASH", "BY PASSWORD"},
		{"SET PASSWORD FOR 'u'@'%' = PASSWORD('secret')", "secret", "= PASSWORD('<redacted>')"},
		{"set password for u@'%' = \"secret\"", "secret", "set password for u@"},
		{"SELECT OLD_PASSWORD( 'secret' )", "secret", "SELECT OLD_PASSWORD("},
		{"CHANGE MASTER TO MASTER_HOST='db1', MASTER_PASSWORD='secret', MASTER_USE_GTID=slave_pos", "secret", "MASTER_USE_GTID=slave_pos"},
		{"CHANGE REPLICATION SOURCE TO SOURCE_PASSWORD = \"secret\"", "secret", "SOURCE_PASSWORD ="},
		{"CREATE SERVER s FOREIGN DATA WRAPPER mysql OPTIONS (USER 'r', PASSWORD 'secret', HOST 'h')", "secret", "HOST '<redacted>')"},
		{"CREATE USER u IDENTIFIED BY _utf8mb4'secret'", "secret", "CREATE USER u IDENTIFIED BY _utf8mb4"},
		{"CREATE USER u IDENTIFIED BY 'cut short secret", "secret", "CREATE USER u"},
		{"CREATE USER `we'ird`@'%' IDENTIFIED BY 'secret'", "secret", "`we'ird`"},
		{"CREATE TABLE app.fed (id INT) ENGINE=FEDERATED CONNECTION='mysql://relay:secret@db2:3306/app/outbox'", "secret", "ENGINE=FEDERATED"},
		{"CREATE TABLE t (id INT) ENGINE=CONNECT TABLE_TYPE=MYSQL OPTION_LIST='user=u,password=secret'", "secret", "TABLE_TYPE=MYSQL"},
		// What a keyword list misses: a comment between the words, a
		// keyword it does not know, a comment's text, an executable comment.
		{"CREATE USER u IDENTIFIED /* x */ BY 'secret'", "secret", "IDENTIFIED /*<redacted>*/ BY"},
		{"CREATE USER u IDENTIFIED -- x\n BY 'secret'", "secret", "IDENTIFIED -- <redacted>\n BY"},
		{"CREATE USER u IDENTIFIED #\r\n BY\t\f'secret'", "secret", "CREATE USER u IDENTIFIED #"},
		{"/*!80000 ALTER USER u IDENTIFIED BY 'secret' */", "secret", "/*!80000 ALTER USER u IDENTIFIED BY"},
		{"/*M!100100 ALTER USER u IDENTIFIED BY 'secret' */", "secret", "/*M!100100 ALTER USER u"},
		{"CREATE USER u IDENTIFIED BY 'x' /* the old one was secret */", "secret", "CREATE USER u"},
		{"CREATE USER u IDENTIFIED BY 'x' -- secret", "secret", "CREATE USER u"},
		{"SELECT AES_ENCRYPT(payload, 'secret-key') FROM t", "secret", "FROM t"},
		{"INSERT INTO t VALUES (AES_ENCRYPT('x', \"secret\"), ENCRYPT('y', 'secret'), DES_ENCRYPT('z', 'secret'))", "secret", "INSERT INTO t VALUES (AES_ENCRYPT("},
		{"SET @k = 0x736563726574", "736563726574", "SET @k ="},
		{"ALTER TABLE t ENCRYPTION_KEY_ID = 2, COMMENT = 'secret'", "secret", "ENCRYPTION_KEY_ID = 2"},
		{"SET PASSWORD FOR comment = 'secret'", "secret", "SET PASSWORD FOR comment ="},
		// NO_BACKSLASH_ESCAPES: 'a\' ends the first literal, and the
		// password is the second; read with escapes it would be outside one.
		{"CREATE USER a IDENTIFIED BY 'a\\', b IDENTIFIED BY 'secret'", "secret", "CREATE USER a IDENTIFIED BY"},
		{"CREATE USER a IDENTIFIED BY \"a\\\", b IDENTIFIED BY \"secret\"", "secret", "CREATE USER a IDENTIFIED BY"},
		// gbk: 0x81 0x5c is one character, the 0x5c no escape.
		{"CREATE USER a IDENTIFIED BY 'x\x81\\', b IDENTIFIED BY 'secret'", "secret", "CREATE USER a IDENTIFIED BY"},
		{"CREATE USER `x\x81`, b IDENTIFIED BY 'secret' -- `", "secret", "CREATE USER"},
		// An executable comment a server older than its version reads as a
		// comment, ending at the first */.
		{"/*!99999 SELECT '*/ CREATE USER b IDENTIFIED BY ' */ 'secret' -- '", "secret", "/*!99999 SELECT"},
		{"/*!99999 SELECT 1 -- */ CREATE USER b IDENTIFIED BY 'secret'\n */", "secret", "/*!99999 SELECT 1"},
		// -- is a comment before any white space or control character.
		{"CREATE USER b IDENTIFIED BY 'x' --\x01' IDENTIFIED BY 'secret'", "secret", "CREATE USER b"},
		{"CREATE USER b IDENTIFIED BY 'x' --\x7f' IDENTIFIED BY secret '", "secret", "CREATE USER b"},
		{"CREATE USER b IDENTIFIED BY 'x' --\xa0' IDENTIFIED BY secret", "secret", "CREATE USER b"},
		// A line comment ends at a NUL too.
		{"CREATE USER b IDENTIFIED BY 'x' # \x00' \nIDENTIFIED BY secret '", "secret", "CREATE USER b"},
		// A server reads 5 or 6 digits of an executable comment's version,
		// or none when fewer: the rest is code, here a hexadecimal or bit
		// literal.
		{"SELECT AES_ENCRYPT(c, /*!0x736563726574*/) FROM t", "736563726574", "SELECT AES_ENCRYPT(c, /*!"},
		{"SELECT AES_ENCRYPT(c, /*M!0b0111001101100101*/) FROM t", "0111001101100101", "*/) FROM t"},
		{"SELECT AES_ENCRYPT(c, /*!1000000x736563726574 */) FROM t", "736563726574", "SELECT AES_ENCRYPT(c, /*!"},
		{"SELECT AES_ENCRYPT(c, /*!123450x736563726574 */) FROM t", "736563726574", "SELECT AES_ENCRYPT(c, /*!"},
		// A comment or a default is a credential's place too: Spider's
		// table and partition comments carry its connection's password, a
		// stored routine's variable a key.
		{"CREATE TABLE t (id INT) ENGINE=SPIDER COMMENT='wrapper \"mysql\", host \"db2\", user \"relay\", password \"secret\"'", "secret", "ENGINE=SPIDER COMMENT="},
		{"CREATE TABLE t (id INT) ENGINE=SPIDER PARTITION BY HASH (id) (PARTITION p0 COMMENT 'srv \"s\", password \"secret\"')", "secret", "PARTITION p0 COMMENT"},
		{"CREATE PROCEDURE p() BEGIN DECLARE k VARCHAR(32) DEFAULT 'secret'; UPDATE t SET c = AES_ENCRYPT(c, k); END", "secret", "DECLARE k VARCHAR(32) DEFAULT"},
		{"ALTER TABLE t ALTER COLUMN token SET DEFAULT 'secret'", "secret", "SET DEFAULT"},
	} {
		got := RedactStatement(c.q)
		if strings.Contains(got, c.secret) {
			t.Errorf("RedactStatement(%q) = %q: the credential is still there", c.q, got)
		}
		if !strings.Contains(got, c.keep) || !strings.Contains(got, "<redacted>") {
			t.Errorf("RedactStatement(%q) = %q: want %q kept and a <redacted> marker", c.q, got, c.keep)
		}
		for _, msg := range []string{
			"track CREATE USER: near \"" + c.q + "\" (statement: " + got + ")",
			fmt.Sprintf("cannot read %q", c.q),
			fmt.Sprintf("cannot read %q", c.q[len(c.q)/3:]),
		} {
			if r := RedactIn(msg, c.q); strings.Contains(r, c.secret) && len(c.secret) >= 8 {
				t.Errorf("RedactIn(%q) = %q: the credential is still there", msg, r)
			}
		}
		if r := RedactIn("near \""+c.q+"\"", c.q); strings.Contains(r, c.secret) {
			t.Errorf("RedactIn of the whole statement = %q: the credential is still there", r)
		}
	}
	// What is proven no credential is left alone: words, numbers, quoted
	// names.
	for _, q := range []string{
		"ALTER TABLE app.outbox ADD COLUMN note VARCHAR(20) DEFAULT NULL",
		"CREATE TABLE t (a DECIMAL(10,2) NOT NULL DEFAULT 0)",
		"/*!50100 PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (10)) */",
		"/*!1000000 SELECT 0xyz */",
		"CREATE USER u IDENTIFIED VIA unix_socket",
		"GRANT SELECT ON `app`.`outbox` TO u@localhost",
		"/*!40101 SET NAMES utf8mb4 */",
		"DROP TABLE `we'ird`",
	} {
		if got := RedactStatement(q); got != q {
			t.Errorf("RedactStatement(%q) = %q, want it unchanged", q, got)
		}
	}
}

// The framer's messages about a statement it cannot place (outside a GTID
// transaction, an XA statement it cannot read, a statement-logged change
// the parser cannot read) quote it redacted and quote nothing of it from
// the parser's error: a credential in it never reaches the error, the rest
// does.
func TestFramerQueryErrorsQuoteTheStatementRedacted(t *testing.T) {
	for _, c := range []struct {
		state groupState
		q     string
	}{
		{stateIdle, "CREATE USER 'u'@'%' IDENTIFIED BY 'S3cr3t!'"},
		{stateOpened, "XA START 'x', IDENTIFIED BY 'S3cr3t!'"},
		{stateOpened, "XA START 'x', IDENTIFIED BY 'S3\\\\cr3t!'"},
		{stateOpened, "XA COMMIT 'x' ONE PHASE IDENTIFIED BY 'S3cr3t!'"},
		// Logged under NO_BACKSLASH_ESCAPES: the parser, reading escapes,
		// stops inside the second literal and quotes what follows.
		{stateOpened, "INSERT INTO t VALUES ('a\\', 'S3cr3t!')) junk"},
		{stateOpened, "UPDATE t SET k = 'a\\', v = AES_ENCRYPT(v, 'S3cr3t!') WHERE"},
	} {
		f := framer{state: c.state, gtid: "0-1-7"}
		_, _, err := f.query(&replication.QueryEvent{Query: []byte(c.q)})
		if err == nil {
			t.Fatalf("%q: no error", c.q)
		}
		if msg := err.Error(); strings.Contains(msg, "cr3t!") || !strings.Contains(msg, "<redacted>") {
			t.Errorf("%q: error %q", c.q, msg)
		}
	}
}

// A statement MariaDB runs under SET STATEMENT ... FOR is redacted whole,
// as the server may have read it, before its FOR is looked for: logged
// under NO_BACKSLASH_ESCAPES, 'x\' ends where a reader with escapes goes
// on, and the FOR it then finds is inside the server's second literal,
// whose secret would start the statement shown.
func TestStatementLoggedChangeUnderSetStatementShowsNoLiteral(t *testing.T) {
	for _, q := range []string{
		`SET STATEMENT v='x\', w=' FOR INSERT INTO t VALUES (S3cr3tPw)' FOR INSERT INTO t VALUES (2)`,
		`SET STATEMENT v="x\", w=" FOR INSERT INTO t VALUES (S3cr3tPw)" FOR INSERT INTO t VALUES (2)`,
		`SET STATEMENT v='x\', w=' FOR UPDATE t SET c = S3cr3tPw' FOR UPDATE t SET c = 1`,
		`SET STATEMENT v='x\', w=' FOR INSERT INTO t VALUES (S3cr3tPw) -- ' FOR INSERT INTO t VALUES (2)`,
	} {
		for _, allow := range []bool{false, true} {
			f := framer{state: stateOpened, gtid: "0-1-7", allowStatements: allow,
				captured: func(db, table []byte) bool { return string(table) == "outbox" }}
			_, _, err := f.query(&replication.QueryEvent{Query: []byte(q)})
			if msg := fmt.Sprint(err) + f.warning; strings.Contains(msg, "S3cr3t") || !strings.Contains(msg, "<redacted>") {
				t.Errorf("%q (statement_dml allowed %v): error %v, warning %q", q, allow, err, f.warning)
			}
		}
	}
}

// The tables a statement-logged change names are those the SQL parser read,
// with backslash escapes: logged under NO_BACKSLASH_ESCAPES or in gbk, what
// it reads as a second statement's table can be inside the server's
// literal, and is not named.
func TestStatementLoggedChangeNamesNoTableFromALiteral(t *testing.T) {
	for _, q := range []string{
		`DELETE FROM t WHERE a = 'x\' OR a = ' ; DELETE FROM Pw9 -- '`,
		`DELETE FROM t WHERE a = 'x\' OR a = ' ; DELETE FROM Pw9.x -- '`,
		"DELETE FROM t WHERE a = 'x\x81\\' OR a = ' ; DELETE FROM Pw9 -- '",
	} {
		for _, allow := range []bool{false, true} {
			f := framer{state: stateOpened, gtid: "0-1-7", allowStatements: allow,
				captured: func(db, table []byte) bool { return string(table) == "outbox" }}
			_, _, err := f.query(&replication.QueryEvent{Schema: []byte("app"), Query: []byte(q)})
			if msg := fmt.Sprint(err) + f.warning; strings.Contains(msg, "Pw9") || !strings.Contains(msg, "app.t") {
				t.Errorf("%q (statement_dml allowed %v): error %v, warning %q", q, allow, err, f.warning)
			}
		}
	}
}
