package ha

import (
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

// The lock group's capture fingerprint tells instances of one name that
// capture other tables, or map them to other topics, apart; the order of
// source.tables does not matter, and a member of an older build (no tag in
// its client id) is not compared.
func TestCaptureTagNamesWhatAPipelinePublishes(t *testing.T) {
	tag := func(edit func(*config.Config)) string {
		cfg := config.Default()
		cfg.Name = "p"
		cfg.Source.Tables = []string{"app.outbox", "app.audit"}
		edit(&cfg)
		return (&Elector{cfg: cfg}).captureTag()
	}
	base := tag(func(*config.Config) {})
	if got := tag(func(c *config.Config) { c.Source.Tables = []string{"app.audit", "app.outbox"} }); got != base {
		t.Fatalf("reordered source.tables: tag %s, want %s", got, base)
	}
	for name, edit := range map[string]func(*config.Config){
		"fewer tables":  func(c *config.Config) { c.Source.Tables = []string{"app.outbox"} },
		"other table":   func(c *config.Config) { c.Source.Tables = []string{"app.outbox", "app.audit2"} },
		"topic prefix":  func(c *config.Config) { c.Router.TopicPrefix = "other." },
		"aggregate key": func(c *config.Config) { c.Router.AggregateIDColumn = "tenant_id" },
	} {
		if got := tag(edit); got == base {
			t.Errorf("%s: the same tag %s", name, got)
		}
	}
	prefix := "outbox-relay-abc-"
	if got := memberCapture(prefix+base+".xyz", prefix); got != base {
		t.Fatalf("memberCapture of a tagged client id: %q, want %q", got, base)
	}
	if got := memberCapture(prefix+"xyz", prefix); got != "" {
		t.Fatalf("memberCapture of an older build's client id: %q, want none", got)
	}
}
