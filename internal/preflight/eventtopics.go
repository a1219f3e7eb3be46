package preflight

import (
	"regexp"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

// eventTopics returns, sorted, the existing topics the relay may publish
// events to: per captured table (router.tables.<t> applied), the topics
// that start with its topic_prefix, or, with topic_replacement set, those
// the replacement can produce. The checkpoint and lock topics, the
// dead-letter topics and Kafka's internal topics (__*) never count: the
// relay writes no event there.
func eventTopics(cfg config.Config, existing kadm.TopicDetails) []string {
	var match []func(string) bool
	for _, t := range cfg.Source.Tables {
		match = append(match, topicMatcher(cfg.Router.For(t)))
	}
	skip := append([]string{cfg.Kafka.CheckpointTopic, cfg.HA.LockTopic}, deadLetterTopics(cfg)...)
	var out []string
	for name := range existing {
		if slices.Contains(skip, name) || strings.HasPrefix(name, "__") {
			continue
		}
		if slices.ContainsFunc(match, func(m func(string) bool) bool { return m(name) }) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// replacementGroup matches a group reference in a topic_replacement, as
// regexp.Expand reads them: $1, ${1}, $name, ${name}.
var replacementGroup = regexp.MustCompile(`\$(?:\{[A-Za-z0-9_]+\}|[A-Za-z0-9_]+)`)

// topicMatcher reports whether the router rc can name a topic: its
// topic_prefix followed by anything, or with topic_replacement the
// replacement with each group reference standing for any text (and any
// text around it when topic_regex is not anchored at both ends, as
// regexp.ReplaceAllString keeps what the regex does not match).
func topicMatcher(rc config.RouterConfig) func(string) bool {
	if rc.TopicReplacement == "" {
		return func(name string) bool { return strings.HasPrefix(name, rc.TopicPrefix) }
	}
	var b strings.Builder
	rest := rc.TopicReplacement
	for rest != "" {
		i := strings.IndexByte(rest, '$')
		if i < 0 {
			b.WriteString(regexp.QuoteMeta(rest))
			break
		}
		b.WriteString(regexp.QuoteMeta(rest[:i]))
		rest = rest[i:]
		if strings.HasPrefix(rest, "$$") {
			b.WriteString(`\$`)
			rest = rest[2:]
			continue
		}
		if loc := replacementGroup.FindStringIndex(rest); loc != nil && loc[0] == 0 {
			b.WriteString(`.*`)
			rest = rest[loc[1]:]
			continue
		}
		b.WriteString(`\$`)
		rest = rest[1:]
	}
	pattern := b.String()
	anchored := rc.TopicRegex == "" || strings.HasPrefix(rc.TopicRegex, "^") && strings.HasSuffix(rc.TopicRegex, "$")
	if !anchored {
		pattern = `.*` + pattern + `.*`
	}
	re, err := regexp.Compile(`^(?:` + pattern + `)$`)
	if err != nil {
		return func(string) bool { return false }
	}
	return re.MatchString
}
