//go:build integration

package binlog_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/devdb"
)

// fastTypes is a table of every column type decodeInsertRows decodes
// itself; slowTypes adds the ones it leaves to go-mysql.
const (
	fastTypes = `CREATE TABLE app.fast (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
	ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, siu SMALLINT UNSIGNED, mi MEDIUMINT, miu MEDIUMINT UNSIGNED,
	i INT, iu INT UNSIGNED, bi BIGINT, biu BIGINT UNSIGNED,
	c1 CHAR(1), c36 CHAR(36) CHARACTER SET latin1, c100 CHAR(100) CHARACTER SET utf8mb4, c255 CHAR(255) CHARACTER SET utf8mb4,
	b16 BINARY(16), vs VARCHAR(10) CHARACTER SET latin1, vc VARCHAR(255) CHARACTER SET utf8mb4, vb VARBINARY(300),
	tt TINYTEXT, tx TEXT, mt MEDIUMTEXT, lt LONGTEXT, tb TINYBLOB, bl BLOB, mb MEDIUMBLOB, lb LONGBLOB, js JSON,
	dt0 DATETIME, dt1 DATETIME(1), dt2 DATETIME(2), dt3 DATETIME(3), dt4 DATETIME(4), dt5 DATETIME(5), dt6 DATETIME(6),
	ts0 TIMESTAMP NULL, ts1 TIMESTAMP(1) NULL, ts2 TIMESTAMP(2) NULL, ts3 TIMESTAMP(3) NULL, ts4 TIMESTAMP(4) NULL,
	ts5 TIMESTAMP(5) NULL, ts6 TIMESTAMP(6) NULL)`
	slowTypes = `CREATE TABLE app.slow (id INT PRIMARY KEY, d DECIMAL(20,6), f FLOAT, db DOUBLE, dd DATE, tm TIME(3),
	y YEAR, bt BIT(10), e ENUM('a','b','c'), st SET('x','y','z'), dt DATETIME(3), v VARCHAR(20))`
)

// fastRows are INSERTs into app.fast: NULLs, extremes, empty and full
// strings, multi-byte text, zero and invalid dates, random values.
func fastRows(rng *rand.Rand) []string {
	cols := "ti, tiu, si, siu, mi, miu, i, iu, bi, biu, c1, c36, c100, c255, b16, vs, vc, vb, tt, tx, mt, lt, tb, bl, mb, lb, js, dt0, dt1, dt2, dt3, dt4, dt5, dt6, ts0, ts1, ts2, ts3, ts4, ts5, ts6"
	ins := func(vals ...string) string {
		return fmt.Sprintf("INSERT INTO app.fast (%s) VALUES %s", cols, strings.Join(vals, ", "))
	}
	nulls := "(" + strings.TrimSuffix(strings.Repeat("NULL, ", 41), ", ") + ")"
	str := func(s string, n int) string { return "'" + strings.Repeat(s, n) + "'" }
	minRow := "(-128, 0, -32768, 0, -8388608, 0, -2147483648, 0, -9223372036854775808, 0, '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '', '{}'," +
		strings.Repeat("'1000-01-01 00:00:00', ", 7) + strings.Repeat("'1970-01-01 00:00:01', ", 6) + "'1970-01-01 00:00:01')"
	maxRow := "(127, 255, 32767, 65535, 8388607, 16777215, 2147483647, 4294967295, 9223372036854775807, 18446744073709551615, " +
		"'é', " + str("z", 36) + ", " + str("€", 100) + ", " + str("😀", 255) + ", " + str("\\0", 16) + ", " + str("x", 10) + ", " + str("日", 255) + ", " + str("\\n", 300) + ", " +
		str("t", 255) + ", " + str("x", 70000/4) + ", " + str("m", 70000) + ", " + str("l", 300000) + ", " + str("b", 255) + ", " + str("B", 65535) + ", " + str("M", 70000) + ", " + str("L", 300000) + ", " +
		`'{"a": [1, 2.50, "ü"], "b": null}', ` +
		"'9999-12-31 23:59:59', '9999-12-31 23:59:59.9', '9999-12-31 23:59:59.99', '9999-12-31 23:59:59.999', '9999-12-31 23:59:59.9999', '9999-12-31 23:59:59.99999', '9999-12-31 23:59:59.999999', " +
		"'2038-01-19 03:14:07', '2038-01-19 03:14:07.9', '2038-01-19 03:14:07.99', '2038-01-19 03:14:07.999', '2038-01-19 03:14:07.9999', '2038-01-19 03:14:07.99999', '2038-01-19 03:14:07.999999')"
	zeroRow := "(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, ' ', 'trailing  ', 'a  ', ' ', 'a', ' ', ' ', '', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 'null', " +
		strings.Repeat("'0000-00-00 00:00:00', ", 7) + strings.Repeat("0, ", 6) + "0)"
	invalidRow := "(1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', '[]', " +
		"'2024-02-30 12:00:00', '2024-00-10 01:02:03.4', '2024-05-00 23:59:59.12', '0000-01-01 00:00:00.123', '2024-02-31 00:00:00.0001', '0000-00-00 00:00:00.00001', '2023-02-29 11:11:11.000001', " +
		"'2024-03-31 02:30:00', '2024-10-27 02:30:00.5', '2000-01-01 00:00:00.01', '1999-12-31 23:59:59.001', '2024-06-01 12:00:00.0001', '2024-06-01 12:00:00.00001', '2024-06-01 12:00:00.000001')"
	out := []string{ins(nulls), ins(minRow), ins(maxRow), ins(zeroRow), ins(invalidRow)}
	for range 20 { // multi-row INSERTs of random values, NULLs among them
		var vals []string
		for range 1 + rng.IntN(50) {
			v := make([]string, 0, 41)
			for c := range 41 {
				if rng.IntN(8) == 0 {
					v = append(v, "NULL")
					continue
				}
				switch {
				case c < 10:
					v = append(v, fmt.Sprint(rng.IntN(200)-(c%2)*0))
				case c < 27:
					v = append(v, str(string(rune('a'+rng.IntN(26))), rng.IntN(10)))
					if c == 26 {
						v[len(v)-1] = fmt.Sprintf(`'{"k": %d}'`, rng.IntN(1000))
					}
				case c < 34:
					v = append(v, fmt.Sprintf("'%04d-%02d-%02d %02d:%02d:%02d.%06d'", 1000+rng.IntN(9000), 1+rng.IntN(12), 1+rng.IntN(28),
						rng.IntN(24), rng.IntN(60), rng.IntN(60), rng.IntN(1000000)))
				default:
					v = append(v, fmt.Sprintf("FROM_UNIXTIME(%d.%06d)", 1+rng.IntN(2147483000), rng.IntN(1000000)))
				}
			}
			vals = append(vals, "("+strings.Join(v, ", ")+")")
		}
		out = append(out, ins(vals...))
	}
	return out
}

// TestDecodeInsertRowsMariaDB: MariaDB's own binlog of every column type
// the fast decoder knows (and the ones it does not), under the server
// settings that change row images (signedness metadata, minimal images,
// compressed events): every rows event decodes to the same values with and
// without it, and it takes exactly the events it should.
func TestDecodeInsertRowsMariaDB(t *testing.T) {
	variants := []struct {
		name     string
		settings map[string]string
		// fastWanted: the fast decoder takes app.fast's INSERTs.
		fastWanted bool
	}{
		{"row metadata full", nil, true},
		{"no signedness metadata", map[string]string{"binlog-row-metadata": "NO_LOG"}, true},
		{"minimal row image", map[string]string{"binlog-row-image": "MINIMAL"}, true},
		{"compressed events", map[string]string{"log-bin-compress": "ON", "log-bin-compress-min-len": "10"}, false},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			dir := t.TempDir()
			srv, err := devdb.Start(ctx, devdb.Options{Dir: dir, Settings: v.settings})
			if errors.Is(err, devdb.ErrNotInstalled) {
				t.Skip("MariaDB not installed")
			}
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Stop()
			stmts := []string{"SET SESSION sql_mode = 'ALLOW_INVALID_DATES'", "SET SESSION time_zone = '+00:00'",
				"CREATE DATABASE app", fastTypes, slowTypes}
			stmts = append(stmts, fastRows(rand.New(rand.NewPCG(5, 6)))...)
			stmts = append(stmts, "INSERT INTO app.slow VALUES (1, -12345678901234.123456, 1.5, -2.25e300, '2024-02-29', '-838:59:59.000', 2155, b'1010101010', 'b', 'x,z', '2024-01-01 00:00:00.5', 'slow'), "+
				"(2, NULL, NULL, NULL, '0000-00-00', '00:00:00', 0, NULL, NULL, '', '0000-00-00 00:00:00', NULL)",
				"UPDATE app.fast SET ti = 2 WHERE id = 2", "DELETE FROM app.fast WHERE id = 3", "FLUSH BINARY LOGS")
			if err := srv.Exec(stmts...); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "data", "binlog.000001")
			want, got := binlog.DecodeFile(t, path, false), binlog.DecodeFile(t, path, true)
			binlog.SameDecodes(t, want, got)
			fastRowsSeen, compressed := 0, 0
			for _, d := range got {
				switch d.Type {
				case replication.MARIADB_WRITE_ROWS_COMPRESSED_EVENT_V1:
					compressed++
				}
				if d.Fast && (d.Table != "app.fast" || (d.Type != replication.WRITE_ROWS_EVENTv1 && d.Type != replication.WRITE_ROWS_EVENTv2)) {
					t.Errorf("the fast decoder took a %s event of %s", d.Type, d.Table)
				}
				if d.Fast {
					fastRowsSeen += len(d.Rows)
				}
			}
			if v.fastWanted && fastRowsSeen < 100 {
				t.Fatalf("the fast decoder took %d rows of app.fast", fastRowsSeen)
			}
			if !v.fastWanted && (fastRowsSeen > 0 || compressed == 0) {
				t.Fatalf("compressed binlog (%d compressed INSERT events): the fast decoder took %d rows", compressed, fastRowsSeen)
			}
			t.Logf("%d rows events; the fast decoder took %d rows; %d compressed", len(got), fastRowsSeen, compressed)
		})
	}
}
