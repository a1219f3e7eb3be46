package schema

import (
	"strings"
	"testing"
)

// The tracker's errors about a definition it cannot read quote its tokens
// with every literal redacted: a password or key in a default, a comment or
// a connection string never reaches the relay's log through them, however
// it is quoted (a backslash %q would double, a double quote it would
// escape).
func TestUnreadableDefinitionErrorsQuoteNoLiteral(t *testing.T) {
	for _, q := range []string{
		`CREATE TABLE app.outbox (id INT, 'k\\ey-secret' INT DEFAULT 'x')`,
		`CREATE TABLE app.outbox (id INT, 'say "secret"' INT)`,
		`CREATE TABLE app.outbox (id INT, 0x736563726574)`,
		`CREATE TABLE app.outbox (id INT, /*!0x736563726574*/)`,
		`CREATE TABLE app.outbox (id INT, /*M!1000000x736563726574 */)`,
		`ALTER TABLE app.outbox WHATEVER = /*!1000000b0111001101100101*/`,
		`ALTER TABLE app.outbox ADD 'k\\ey-secret' INT`,
		`ALTER TABLE app.outbox WHATEVER = "a\"secret"`,
	} {
		tr := New([]string{"app.outbox"}, nil, nil)
		if _, err := tr.Apply("app", "CREATE TABLE app.outbox (id INT)"); err != nil {
			t.Fatal(err)
		}
		_, err := tr.Apply("app", q)
		if err == nil || !strings.Contains(err.Error(), "cannot read") {
			t.Fatalf("%s: %v, want an error quoting what it cannot read", q, err)
		}
		if msg := err.Error(); strings.Contains(msg, "secret") || strings.Contains(msg, "736563726574") || strings.Contains(msg, "0111001101100101") || !strings.Contains(msg, "<redacted>") {
			t.Errorf("%s: %s", q, msg)
		}
	}
}
