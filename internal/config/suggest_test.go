package config

import (
	"strings"
	"testing"
)

// TestUnknownKeySaysWhatWasMeant: an unknown key gets the nearest key of
// its mapping (a typo: one or two edits, a swap of neighbours counting as
// one, case and '-' aside), or the place of a key of that name elsewhere;
// nothing when no key is near.
func TestUnknownKeySaysWhatWasMeant(t *testing.T) {
	source := []string{"hosts", "user", "password", "server_id", "flavor", "tables", "start", "tls"}
	for _, tc := range []struct {
		key  string
		want string
	}{
		{"flavr", "flavor"},
		{"sever_id", "server_id"},
		{"tabels", "tables"},
		{"Server-ID", "server_id"},
		{"passwrod", "password"},
		{"usr", "user"},
		{"brokers", "kafka.brokers"},
		{"name", "name"},
		{"mechanism", "kafka.sasl.mechanism"},
		{"listen", "http.listen"},
		{"ca_file", "source.tls.ca_file or kafka.tls.ca_file"},
		{"zzz", ""},
		{"xx", ""},
		{"hostnames", ""},
	} {
		if got := suggestKey(tc.key, source); got != tc.want {
			t.Errorf("source.%s: suggested %q, want %q", tc.key, got, tc.want)
		}
	}
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"abc", "", 3}, {"tables", "tabels", 1}, {"flavor", "flavr", 1}, {"kitten", "sitting", 3}, {"ab", "ba", 1},
	} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
	_, err := Parse([]byte(strings.Replace(base, "  server_id: 7", "  sever_id: 7", 1)), env(map[string]string{"PW": "x"}))
	if err == nil || !strings.Contains(err.Error(), "source.sever_id (line 7): unknown key: did you mean server_id?") {
		t.Fatalf("got %v", err)
	}
}
