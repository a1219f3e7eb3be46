package schema

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// layout renders a table's tracked columns, "-" when unknown.
func layout(tr *Tracker, n string) string {
	db, tbl, _ := strings.Cut(n, ".")
	cols, ok := tr.Columns(db, tbl)
	if !ok {
		return "-"
	}
	return strings.Join(cols, ",")
}

func errName(err error) string {
	switch {
	case err == nil:
		return "nil"
	case errors.Is(err, ErrUnparsed):
		return "ErrUnparsed"
	case errors.Is(err, ErrIgnored):
		return "ErrIgnored"
	}
	return "other"
}

func TestApply(t *testing.T) {
	tr := New([]string{"app.outbox", "app.renamed"}, nil, nil)
	steps := []struct {
		db, sql string
		want    string // app.outbox columns after, "-" for unknown
		changed bool
	}{
		{"app", "CREATE TABLE outbox (id BIGINT PRIMARY KEY, event_id VARCHAR(64), payload JSON DEFAULT NULL)", "id,event_id,payload", true},
		{"app", "CREATE TABLE other (a INT)", "id,event_id,payload", false},
		{"", "ALTER TABLE app.outbox ADD COLUMN tenant VARCHAR(10) FIRST", "tenant,id,event_id,payload", true},
		{"app", "ALTER TABLE outbox MODIFY COLUMN tenant VARCHAR(20) AFTER event_id", "id,event_id,tenant,payload", true},
		{"app", "ALTER TABLE outbox CHANGE tenant org VARCHAR(20), ADD COLUMN (x INT, y INT)", "id,event_id,org,payload,x,y", true},
		{"app", "ALTER TABLE outbox DROP COLUMN x, RENAME COLUMN y TO z", "id,event_id,org,payload,z", true},
		{"app", "ALTER TABLE outbox ADD COLUMN w INT AFTER id", "id,w,event_id,org,payload,z", true},
		{"app", "TRUNCATE TABLE outbox", "id,w,event_id,org,payload,z", false},
		{"app", "INSERT INTO outbox (id) VALUES (1)", "id,w,event_id,org,payload,z", false},
		{"app", "RENAME TABLE outbox TO renamed", "-", true},
	}
	for _, s := range steps {
		changed, err := tr.Apply(s.db, s.sql)
		if err != nil && !errors.Is(err, ErrIgnored) {
			t.Fatalf("%s: %v", s.sql, err)
		}
		if got := layout(tr, "app.outbox"); got != s.want || changed != s.changed {
			t.Fatalf("%s: columns %s (changed %v), want %s (changed %v)", s.sql, got, changed, s.want, s.changed)
		}
	}
	if got := layout(tr, "app.renamed"); got != "id,w,event_id,org,payload,z" {
		t.Fatalf("renamed table columns %s", got)
	}
	if _, err := tr.Apply("app", "DROP TABLE renamed"); err != nil {
		t.Fatal(err)
	}
	if _, ok := tr.Columns("app", "renamed"); ok {
		t.Fatal("dropped table still tracked")
	}
	if got := layout(tr, "app.other"); got != "a" {
		t.Fatalf("a table created in the captured database is followed as a possible shadow: got %s", got)
	}
}

// base is the captured table's layout in TestStatements.
const base = "id,event_id,payload"

// TestStatements applies one statement (after setup statements) to a
// tracker that knows app.outbox as base, and checks the error class, the
// changed flag and the layouts after.
func TestStatements(t *testing.T) {
	type tc struct {
		setup   []string
		sql     string
		err     string // nil, ErrIgnored, ErrUnparsed
		changed bool
		outbox  string            // app.outbox after; "" means unchanged (base)
		more    map[string]string // other tables after ("-": unknown)
		unknown bool              // start with app.outbox unknown
	}
	cases := map[string]tc{
		// Statements that mention the captured table but change no table's columns.
		"trigger writing the outbox": {sql: "CREATE TRIGGER alarm_outbox AFTER INSERT ON alarm_record FOR EACH ROW " +
			"INSERT INTO outbox (event_id, payload) VALUES (UUID(), JSON_OBJECT('id', NEW.id))", err: "ErrIgnored"},
		"trigger with definer": {sql: "CREATE DEFINER=`root`@`localhost` TRIGGER `app`.`t1` BEFORE INSERT ON `app`.`outbox` " +
			"FOR EACH ROW SET NEW.payload = COALESCE(NEW.payload, '{}')", err: "ErrIgnored"},
		"trigger or replace":      {sql: "CREATE OR REPLACE TRIGGER t2 AFTER UPDATE ON alarm_record FOR EACH ROW BEGIN INSERT INTO app.outbox (event_id) VALUES (NEW.id); END", err: "ErrIgnored"},
		"drop trigger":            {sql: "DROP TRIGGER IF EXISTS app.alarm_outbox", err: "nil"},
		"event deleting outbox":   {sql: "CREATE EVENT prune ON SCHEDULE EVERY 1 DAY DO DELETE FROM outbox WHERE created_at < NOW() - INTERVAL 7 DAY", err: "ErrIgnored"},
		"event with ddl body":     {sql: "CREATE DEFINER=CURRENT_USER EVENT IF NOT EXISTS e2 ON SCHEDULE AT CURRENT_TIMESTAMP + INTERVAL 1 HOUR DO BEGIN ALTER TABLE outbox ADD COLUMN x INT; DROP TABLE outbox; END", err: "ErrIgnored"},
		"alter event":             {sql: "ALTER EVENT prune ON SCHEDULE EVERY 2 DAY DO DELETE FROM app.outbox WHERE id < 10", err: "ErrIgnored"},
		"drop event":              {sql: "DROP EVENT IF EXISTS prune", err: "nil"},
		"procedure inserting":     {sql: "CREATE PROCEDURE add_event(IN p JSON) BEGIN INSERT INTO outbox (event_id, payload) VALUES (UUID(), p); END", err: "ErrIgnored"},
		"procedure creating":      {sql: "CREATE DEFINER=`root`@`%` PROCEDURE mk() MODIFIES SQL DATA BEGIN CREATE TABLE IF NOT EXISTS outbox (a INT); ALTER TABLE outbox DROP COLUMN id; END", err: "ErrIgnored"},
		"function inserting":      {sql: "CREATE FUNCTION f(x INT) RETURNS INT DETERMINISTIC BEGIN INSERT INTO outbox (event_id) VALUES (x); RETURN x; END", err: "ErrIgnored"},
		"drop procedure":          {sql: "DROP PROCEDURE IF EXISTS add_event", err: "nil"},
		"view":                    {sql: "CREATE VIEW recent AS SELECT * FROM outbox WHERE id > 100", err: "ErrIgnored"},
		"view or replace definer": {sql: "CREATE OR REPLACE ALGORITHM=MERGE DEFINER=`root`@`localhost` SQL SECURITY DEFINER VIEW `outbox_v` AS SELECT `id` FROM `app`.`outbox`", err: "ErrIgnored"},
		"drop view":               {sql: "DROP VIEW IF EXISTS outbox_v", err: "nil"},
		"grant":                   {sql: "GRANT SELECT, INSERT ON app.outbox TO 'writer'@'%'", err: "ErrIgnored"},
		"revoke":                  {sql: "REVOKE INSERT ON `app`.`outbox` FROM 'writer'@'%'", err: "ErrIgnored"},
		"analyze":                 {sql: "ANALYZE TABLE outbox", err: "ErrIgnored"},
		"optimize":                {sql: "OPTIMIZE NO_WRITE_TO_BINLOG TABLE outbox", err: "ErrIgnored"},
		"check":                   {sql: "CHECK TABLE outbox", err: "ErrIgnored"},
		"repair":                  {sql: "REPAIR TABLE outbox QUICK", err: "ErrIgnored"},
		"create index":            {sql: "CREATE UNIQUE INDEX IF NOT EXISTS uk_event ON outbox (event_id)", err: "ErrIgnored"},
		"drop index":              {sql: "DROP INDEX uk_event ON app.outbox", err: "ErrIgnored"},
		"truncate":                {sql: "TRUNCATE outbox", err: "ErrIgnored"},
		"statement-logged insert": {sql: "INSERT INTO outbox (event_id, payload) VALUES ('a', '{}')", err: "ErrIgnored"},
		"comments only":           {sql: "/* nothing */ -- at all\n# here", err: "nil"},
		"savepoint":               {sql: "SAVEPOINT `s1`", err: "nil"},
		"xa":                      {sql: "XA START 'x1'", err: "nil"},
		"other database":          {sql: "ALTER TABLE other.outbox ADD COLUMN x INT", err: "nil"},
		"untracked table":         {sql: "ALTER TABLE alarm_record ADD COLUMN x INT", err: "nil"},
		"temporary create":        {sql: "CREATE TEMPORARY TABLE outbox (x INT)", err: "ErrIgnored"},
		"temporary drop":          {sql: "DROP TEMPORARY TABLE IF EXISTS outbox", err: "ErrIgnored"},
		"disable keys in comment": {sql: "/*!40000 ALTER TABLE `outbox` DISABLE KEYS */", err: "nil"},
		"index and options":       {sql: "ALTER TABLE outbox ADD INDEX i (event_id), ALGORITHM=INPLACE, LOCK=NONE", err: "nil"},
		"engine":                  {sql: "ALTER TABLE outbox ENGINE=InnoDB ROW_FORMAT=DYNAMIC", err: "nil"},
		"set default":             {sql: "ALTER TABLE outbox ALTER COLUMN payload SET DEFAULT '{}'", err: "nil"},
		"mariadb-only neutral":    {sql: "ALTER TABLE outbox ALTER COLUMN payload SET INVISIBLE, ADD VECTOR INDEX v (payload), PAGE_CHECKSUM=1", err: "nil"},
		"archive or replace": {sql: "CREATE OR REPLACE TABLE outbox_archive (id BIGINT, payload LONGTEXT, archived_at DATETIME)", err: "nil",
			more: map[string]string{"app.outbox_archive": "id,payload,archived_at"}},
		"archive like": {sql: "CREATE TABLE archive.outbox_2024 LIKE app.outbox", err: "nil",
			more: map[string]string{"archive.outbox_2024": base}},
		"archive elsewhere": {sql: "CREATE TABLE archive.outbox_archive (a INT)", err: "nil",
			more: map[string]string{"archive.outbox_archive": "-"}},

		// Column changes, MariaDB syntax included.
		"add invisible":          {sql: "ALTER TABLE outbox ADD COLUMN x INT INVISIBLE", err: "nil", changed: true, outbox: base + ",x"},
		"add if not exists":      {sql: "ALTER TABLE outbox ADD COLUMN IF NOT EXISTS x INT", err: "nil", changed: true, outbox: base + ",x"},
		"add if not exists, has": {sql: "ALTER TABLE outbox ADD COLUMN IF NOT EXISTS event_id VARCHAR(64)", err: "nil"},
		"add twice if not exists": {sql: "ALTER TABLE outbox ADD COLUMN IF NOT EXISTS x INT, ADD COLUMN IF NOT EXISTS x INT", err: "nil",
			changed: true, outbox: base + ",x"},
		"drop if exists, none": {sql: "ALTER TABLE outbox DROP COLUMN IF EXISTS nope", err: "nil"},
		"drop if exists":       {sql: "ALTER TABLE outbox DROP COLUMN IF EXISTS payload", err: "nil", changed: true, outbox: "id,event_id"},
		"online":               {sql: "ALTER ONLINE TABLE outbox ADD COLUMN x INT", err: "nil", changed: true, outbox: base + ",x"},
		"ignore":               {sql: "ALTER IGNORE TABLE outbox ADD x INT", err: "nil", changed: true, outbox: base + ",x"},
		"if exists":            {sql: "ALTER TABLE IF EXISTS outbox ADD COLUMN x INT", err: "nil", changed: true, outbox: base + ",x"},
		"wait":                 {sql: "ALTER TABLE outbox WAIT 5 ADD COLUMN x INT FIRST", err: "nil", changed: true, outbox: "x," + base},
		"nowait inet6":         {sql: "ALTER TABLE `app`.`outbox` NOWAIT ADD COLUMN x INET6 AFTER id", err: "nil", changed: true, outbox: "id,x,event_id,payload"},
		"uuid compressed": {sql: "ALTER TABLE outbox ADD COLUMN u UUID, ADD COLUMN b BLOB COMPRESSED AFTER id, ALGORITHM=INSTANT", err: "nil",
			changed: true, outbox: "id,b,event_id,payload,u"},
		"persistent":           {sql: "ALTER TABLE outbox ADD COLUMN s BIGINT AS (id + 1) PERSISTENT", err: "nil", changed: true, outbox: base + ",s"},
		"modify if exists":     {sql: "ALTER TABLE outbox MODIFY COLUMN IF EXISTS payload LONGTEXT INVISIBLE FIRST", err: "nil", changed: true, outbox: "payload,id,event_id"},
		"change if exists":     {sql: "ALTER TABLE outbox CHANGE COLUMN IF EXISTS nope x INT", err: "nil"},
		"rename column":        {sql: "ALTER TABLE outbox RENAME COLUMN payload TO body", err: "nil", changed: true, outbox: "id,event_id,body"},
		"position by new name": {sql: "ALTER TABLE outbox MODIFY id BIGINT AFTER body, CHANGE payload body LONGTEXT", err: "nil", changed: true, outbox: "event_id,body,id"},
		// Several positions in one ALTER: each clause places its column in
		// the list as the clauses before it left it (the server's order).
		"moves in statement order": {sql: "ALTER TABLE outbox MODIFY id BIGINT AFTER event_id, MODIFY event_id VARCHAR(64) FIRST", err: "nil",
			changed: true, outbox: "event_id,id,payload"},
		"move after a later move": {sql: "ALTER TABLE outbox MODIFY id BIGINT AFTER payload, MODIFY payload TEXT AFTER event_id", err: "nil",
			changed: true, outbox: "event_id,payload,id"},
		"add after a moved column": {sql: "ALTER TABLE outbox ADD x INT AFTER id, MODIFY id BIGINT AFTER payload", err: "nil",
			changed: true, outbox: "x,event_id,payload,id"},
		"add after a dropped column": {sql: "ALTER TABLE outbox ADD x INT AFTER id, DROP id", err: "ErrUnparsed", changed: true, outbox: "-"},
		"change a dropped column":    {sql: "ALTER TABLE outbox DROP id, CHANGE id id2 INT", err: "ErrUnparsed", changed: true, outbox: "-"},
		"modify a column just added": {sql: "ALTER TABLE outbox ADD x INT FIRST, MODIFY X BIGINT AFTER id", err: "nil",
			changed: true, outbox: "id,X,event_id,payload"},
		"drop if exists twice": {sql: "ALTER TABLE outbox DROP id, DROP COLUMN IF EXISTS id", err: "nil", changed: true, outbox: "event_id,payload"},
		"add if not exists a changed name": {sql: "ALTER TABLE outbox CHANGE id x INT, ADD COLUMN IF NOT EXISTS x INT", err: "nil",
			changed: true, outbox: "x,event_id,payload"},
		"case-only rename":     {sql: "ALTER TABLE outbox MODIFY COLUMN EVENT_ID VARCHAR(64)", err: "nil", changed: true, outbox: "id,EVENT_ID,payload"},
		"executable comment":   {sql: "/*M!100301 ALTER TABLE outbox ADD COLUMN z INT */", err: "nil", changed: true, outbox: base + ",z"},
		"gh-ost casing":        {sql: "alter /* gh-ost */ table `app`.`outbox` add column `x` int not null default 0", err: "nil", changed: true, outbox: base + ",x"},
		"ansi quotes":          {sql: `ALTER TABLE "outbox" ADD COLUMN "x" INT`, err: "nil", changed: true, outbox: base + ",x"},
		"drop unknown column":  {sql: "ALTER TABLE outbox DROP COLUMN nope", err: "ErrUnparsed", changed: true, outbox: "-"},
		"add existing column":  {sql: "ALTER TABLE outbox ADD COLUMN event_id INT", err: "ErrUnparsed", changed: true, outbox: "-"},
		"after unknown column": {sql: "ALTER TABLE outbox ADD COLUMN x INT AFTER nope", err: "ErrUnparsed", changed: true, outbox: "-"},
		"unreadable spec":      {sql: "ALTER TABLE outbox FROBNICATE x", err: "ErrUnparsed", changed: true, outbox: "-"},
		"system versioning":    {sql: "ALTER TABLE outbox ADD SYSTEM VERSIONING", err: "ErrUnparsed", changed: true, outbox: "-"},
		"letter case":          {sql: "ALTER TABLE OUTBOX ADD COLUMN x INT", err: "ErrUnparsed", changed: true, outbox: "-"},
		"unreadable names":     {sql: "RENAME TABLE outbox TO", err: "ErrUnparsed", changed: true, outbox: "-"},
		"alter unknown":        {unknown: true, sql: "ALTER TABLE outbox ADD COLUMN x INT", err: "ErrIgnored", outbox: "-"},
		"rename via alter": {sql: "ALTER TABLE app.outbox RENAME TO app.outbox_old", err: "nil", changed: true, outbox: "-",
			more: map[string]string{"app.outbox_old": base}},
		"rename via alter with change": {sql: "ALTER TABLE outbox ADD COLUMN x INT, RENAME AS outbox_old", err: "nil", changed: true, outbox: "-",
			more: map[string]string{"app.outbox_old": base + ",x"}},

		// Creating and dropping the captured table.
		"or replace":             {sql: "CREATE OR REPLACE TABLE outbox (a INT, b INT)", err: "nil", changed: true, outbox: "a,b"},
		"if not exists, exists":  {sql: "CREATE TABLE IF NOT EXISTS outbox (a INT)", err: "nil"},
		"if not exists, unknown": {unknown: true, sql: "CREATE TABLE IF NOT EXISTS outbox (a INT)", err: "nil", changed: true, outbox: "a"},
		"if not exists like, unknown": {unknown: true, setup: []string{"CREATE TABLE o2 (a INT)"},
			sql: "CREATE TABLE IF NOT EXISTS outbox LIKE o2", err: "ErrUnparsed", outbox: "-"},
		"if not exists after drop": {unknown: true, setup: []string{"DROP TABLE IF EXISTS outbox"},
			sql: "CREATE TABLE IF NOT EXISTS outbox (a INT)", err: "nil", changed: true, outbox: "a"},
		"create unknown": {unknown: true, sql: "CREATE TABLE outbox (a INT, `b c` TEXT, PRIMARY KEY (a))", err: "nil", changed: true, outbox: "a,b c"},
		"drop wait":      {sql: "DROP TABLE outbox WAIT 5", err: "nil", changed: true, outbox: "-"},
		"drop by server": {sql: "DROP TABLE IF EXISTS `outbox` /* generated by server */", err: "nil", changed: true, outbox: "-"},
		"drop several":   {sql: "DROP TABLE alarm_record, app.outbox NOWAIT", err: "nil", changed: true, outbox: "-"},
		"versioned implicit": {setup: []string{"DROP TABLE outbox"}, sql: "CREATE TABLE outbox (id INT) WITH SYSTEM VERSIONING",
			err: "ErrUnparsed", outbox: "-"},
		"versioned explicit": {setup: []string{"DROP TABLE outbox"}, sql: "CREATE TABLE outbox (id INT, s TIMESTAMP(6) GENERATED ALWAYS AS ROW START INVISIBLE, " +
			"e TIMESTAMP(6) GENERATED ALWAYS AS ROW END INVISIBLE, PERIOD FOR SYSTEM_TIME(s, e)) WITH SYSTEM VERSIONING",
			err: "nil", changed: true, outbox: "id,s,e"},
		"create select": {setup: []string{"DROP TABLE outbox"}, sql: "CREATE TABLE outbox (a INT) SELECT 1 AS b", err: "ErrUnparsed", outbox: "-"},
		"create mariadb types": {setup: []string{"DROP TABLE outbox"}, sql: "CREATE TABLE outbox (id INET6 NOT NULL, p JSON COMPRESSED, " +
			"t TEXT INVISIBLE, PRIMARY KEY (id), KEY k (p(10)), CONSTRAINT c CHECK (json_valid(p))) ENGINE=Aria PAGE_CHECKSUM=1 TRANSACTIONAL=1",
			err: "nil", changed: true, outbox: "id,p,t"},
		"create like unknown": {setup: []string{"DROP TABLE outbox"}, sql: "CREATE TABLE outbox LIKE legacy", err: "ErrUnparsed", outbox: "-"},
		"create like tracked": {setup: []string{"DROP TABLE outbox", "CREATE TABLE tmpl (a INT, b INT)"}, sql: "CREATE TABLE outbox (LIKE tmpl)",
			err: "nil", changed: true, outbox: "a,b", more: map[string]string{"app.tmpl": "a,b"}},
		"drop database": {setup: []string{"CREATE TABLE shadow (a INT)"}, sql: "DROP DATABASE app", err: "nil", changed: true, outbox: "-",
			more: map[string]string{"app.shadow": "-"}},

		// Renames.
		"rename away": {sql: "RENAME TABLES outbox TO outbox_old", err: "nil", changed: true, outbox: "-",
			more: map[string]string{"app.outbox_old": base}},
		"rename if exists, none": {sql: "RENAME TABLE IF EXISTS nope TO nope2", err: "nil"},
		"rename round trip": {sql: "RENAME TABLE outbox WAIT 3 TO x, x NOWAIT TO outbox", err: "nil",
			more: map[string]string{"app.x": "-"}},
		"rename from unknown": {sql: "RENAME TABLE outbox TO outbox_old, legacy TO outbox", err: "ErrUnparsed", changed: true, outbox: "-",
			more: map[string]string{"app.outbox_old": base}},
		"rename from other db": {sql: "RENAME TABLE app.outbox TO app.o1, staging.outbox TO app.outbox", err: "ErrUnparsed", changed: true, outbox: "-"},
		"alter rename from unknown": {setup: []string{"DROP TABLE outbox"}, sql: "ALTER TABLE legacy ADD COLUMN x INT, RENAME TO outbox",
			err: "ErrUnparsed", outbox: "-"},
		"rename three-way swap": {setup: []string{"CREATE TABLE outbox_v2 (a INT)"},
			sql: "RENAME TABLE outbox TO tmp, outbox_v2 TO outbox, tmp TO outbox_v2", err: "nil", changed: true, outbox: "a",
			more: map[string]string{"app.outbox_v2": base, "app.tmp": "-"}},
		"rename unknown shadow": {setup: []string{"CREATE TABLE o2 (a INT)", "ALTER TABLE o2 ADD SYSTEM VERSIONING"},
			sql: "RENAME TABLE outbox TO o1, o2 TO outbox", err: "ErrUnparsed", changed: true, outbox: "-",
			more: map[string]string{"app.o2": "-", "app.o1": base}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			init := Tables{"app.outbox": strings.Split(base, ",")}
			if c.unknown {
				init = nil
			}
			tr := New([]string{"app.outbox"}, init, nil)
			for _, s := range c.setup {
				if _, err := tr.Apply("app", s); err != nil && !errors.Is(err, ErrIgnored) {
					t.Fatalf("setup %s: %v", s, err)
				}
			}
			before := layout(tr, "app.outbox")
			changed, err := tr.Apply("app", c.sql)
			if got := errName(err); got != c.err {
				t.Fatalf("error %v (%s), want %s", err, got, c.err)
			}
			want := c.outbox
			if want == "" {
				want = before
			}
			if got := layout(tr, "app.outbox"); got != want || changed != c.changed {
				t.Fatalf("app.outbox %s (changed %v), want %s (changed %v); error %v", got, changed, want, c.changed, err)
			}
			for n, w := range c.more {
				if got := layout(tr, n); got != w {
					t.Fatalf("%s: %s, want %s", n, got, w)
				}
			}
			if err != nil && c.err == "ErrUnparsed" && !strings.Contains(err.Error(), "app.outbox") {
				t.Fatalf("error %q does not name the table", err)
			}
			if c.err == "ErrUnparsed" && !strings.Contains(err.Error(), "checkpoint set") {
				t.Fatalf("error %q does not say how to go on", err)
			}
		})
	}
}

// TestOnlineSchemaChange runs the statements of online schema change tools
// and checks that the cut-over carries the shadow's layout onto the captured
// name, with a restart (a new tracker from the persisted Tables) after each
// statement as well as straight through.
func TestOnlineSchemaChange(t *testing.T) {
	newLayout := "tenant,id,event_id,payload"
	tools := map[string][]string{
		"gh-ost": {
			"create /* gh-ost */ table `app`.`_outbox_gho` like `app`.`outbox`",
			"alter /* gh-ost */ table `app`.`_outbox_gho` add column tenant varchar(16) not null default 'acme' first",
			"create /* gh-ost */ table `app`.`_outbox_ghc` (id bigint auto_increment, last_update timestamp not null DEFAULT CURRENT_TIMESTAMP " +
				"ON UPDATE CURRENT_TIMESTAMP, hint varchar(64) charset ascii not null, value varchar(4096) charset ascii not null, primary key(id), " +
				"unique key hint_uidx(hint)) auto_increment=256 comment='gh-ost changelog'",
			"create /* gh-ost */ table `app`.`_outbox_del` (id int auto_increment primary key) engine=InnoDB comment='ghost-cut-over-sentry'",
			"drop /* gh-ost */ table if exists `app`.`_outbox_del`",
			"rename /* gh-ost */ table `app`.`outbox` to `app`.`_outbox_del`, `app`.`_outbox_gho` to `app`.`outbox`",
			"drop /* gh-ost */ table if exists `app`.`_outbox_ghc`",
			"drop /* gh-ost */ table if exists `app`.`_outbox_del`",
		},
		"pt-online-schema-change": {
			"CREATE TABLE `app`.`_outbox_new` (\n  `id` bigint(20) NOT NULL AUTO_INCREMENT,\n  `event_id` varchar(64) NOT NULL,\n" +
				"  `payload` longtext CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL CHECK (json_valid(`payload`)),\n  PRIMARY KEY (`id`)\n" +
				") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci",
			"ALTER TABLE `app`.`_outbox_new` ADD COLUMN tenant VARCHAR(16) NOT NULL DEFAULT 'acme' FIRST",
			"CREATE TRIGGER `pt_osc_app_outbox_ins` AFTER INSERT ON `app`.`outbox` FOR EACH ROW BEGIN DECLARE CONTINUE HANDLER FOR 1146 begin end; " +
				"REPLACE INTO `app`.`_outbox_new` (`id`, `event_id`, `payload`) VALUES (NEW.`id`, NEW.`event_id`, NEW.`payload`);END",
			"RENAME TABLE `app`.`outbox` TO `app`.`_outbox_old`, `app`.`_outbox_new` TO `app`.`outbox`",
			"DROP TABLE IF EXISTS `app`.`_outbox_old`",
			"DROP TRIGGER IF EXISTS `app`.`pt_osc_app_outbox_ins`",
		},
		"by hand": {
			"CREATE TABLE outbox_v2 (tenant VARCHAR(16) NOT NULL, id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, event_id VARCHAR(64), payload JSON)",
			"INSERT INTO outbox_v2 SELECT 'acme', id, event_id, payload FROM outbox",
			"RENAME TABLE outbox TO outbox_v1, outbox_v2 TO outbox",
			"DROP TABLE outbox_v1",
		},
	}
	for name, stmts := range tools {
		for _, restart := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s restart=%v", name, restart), func(t *testing.T) {
				captured := []string{"app.outbox"}
				tr := New(captured, Tables{"app.outbox": strings.Split(base, ",")}, nil)
				for i, s := range stmts {
					changed, err := tr.Apply("app", s)
					if err != nil && !errors.Is(err, ErrIgnored) {
						t.Fatalf("%s: %v", s, err)
					}
					cut := strings.HasPrefix(strings.ToUpper(s), "RENAME")
					want := base
					if cut || layout(tr, "app.outbox") == newLayout {
						want = newLayout
					}
					if got := layout(tr, "app.outbox"); got != want || changed != cut {
						t.Fatalf("step %d %s: outbox %s (changed %v), want %s (changed %v)", i, s, got, changed, want, cut)
					}
					if restart {
						tr = New(captured, tr.Tables(), tr.Unsigned())
					}
				}
				if got := fmt.Sprint(tr.Tables()); got != "map[app.outbox:["+strings.ReplaceAll(newLayout, ",", " ")+"]]" {
					t.Fatalf("tables after the migration: %s, want only the captured table", got)
				}
			})
		}
	}
}

func TestShadowLimit(t *testing.T) {
	tr := New([]string{"app.outbox"}, Tables{"app.outbox": {"a"}}, nil)
	for i := 0; i <= maxShadows; i++ {
		if _, err := tr.Apply("app", fmt.Sprintf("CREATE TABLE t%d (a INT, b INT)", i)); err != nil {
			t.Fatal(err)
		}
	}
	if len(tr.Tables()) != maxShadows+1 {
		t.Fatalf("%d tables tracked, want %d", len(tr.Tables()), maxShadows+1)
	}
	_, err := tr.Apply("app", fmt.Sprintf("RENAME TABLE outbox TO old, t%d TO outbox", maxShadows))
	if !errors.Is(err, ErrUnparsed) || !strings.Contains(err.Error(), "tracked already") {
		t.Fatalf("rename of an untracked table beyond the limit: %v, want ErrUnparsed saying why", err)
	}
	if got := New([]string{"app.outbox"}, Tables{"app.outbox": {"a"}, "x.1": nil, "x.2": nil}, nil); len(got.Tables()) != 3 {
		t.Fatal("shadows of the initial layout dropped")
	}
}

func TestSnapshotsAreImmutable(t *testing.T) {
	tr := New([]string{"app.outbox"}, Tables{"app.outbox": {"a", "b"}, "app._outbox_gho": {"x"}}, nil)
	if got := layout(tr, "app._outbox_gho"); got != "x" {
		t.Fatalf("a shadow table of the initial layout (a checkpoint taken mid-migration) was dropped: %s", got)
	}
	before := tr.Tables()
	if _, err := tr.Apply("app", "ALTER TABLE outbox ADD COLUMN c INT"); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Apply("app", "ALTER TABLE _outbox_gho ADD COLUMN y INT"); err != nil {
		t.Fatal(err)
	}
	if strings.Join(before["app.outbox"], ",") != "a,b" || strings.Join(before["app._outbox_gho"], ",") != "x" ||
		layout(tr, "app.outbox") != "a,b,c" || layout(tr, "app._outbox_gho") != "x,y" {
		t.Fatalf("snapshot changed: before %v, now %v", before, tr.Tables())
	}
}

func TestUnparsed(t *testing.T) {
	tr := New([]string{"app.outbox"}, Tables{"app.outbox": {"a"}}, nil)
	if _, err := tr.Apply("app", "ALTER TABLE outbox FROBNICATE"); !errors.Is(err, ErrUnparsed) {
		t.Fatalf("unparsable DDL on a captured table: %v, want ErrUnparsed", err)
	}
	if _, ok := tr.Columns("app", "outbox"); ok {
		t.Fatal("the layout is kept after a statement the tracker could not follow")
	}
	if _, err := tr.Apply("app", "ALTER TABLE elsewhere FROBNICATE"); err != nil {
		t.Fatalf("unparsable DDL elsewhere: %v, want nil", err)
	}
	tr = New([]string{"app.outbox"}, Tables{"app.outbox": {"a"}}, nil)
	if _, err := tr.Apply("app", "ALTER TABLE outbox DROP COLUMN nope"); !errors.Is(err, ErrUnparsed) {
		t.Fatalf("dropping an unknown column: %v, want ErrUnparsed", err)
	}
}

func TestLex(t *testing.T) {
	toks := lex("/*!50100 ALTER */ TABLE `a``b`.\"c\\\"d\" -- x\n'e''f' # g\n/* h */ 1.5", true, true)
	var got []string
	for _, tok := range toks {
		got = append(got, tok.val)
	}
	if s := strings.Join(got, "|"); s != "ALTER|TABLE|a`b|.|c\"d|e'f|1|.|5" {
		t.Fatalf("tokens %s", s)
	}
	if s := join(toks); s != "ALTER TABLE `a``b`.\"c\\\"d\" 'e''f' 1.5" {
		t.Fatalf("joined %s", s)
	}
}
