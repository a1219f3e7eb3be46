package main

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
)

// pendingDeadLetters are the event ids of the dead-letter records of cfg's
// topics that its replay group has not committed (not replayed yet), by
// source table. prune keeps their rows: a dead-letter record too large
// for its topic is sent without the row's columns ("truncated"), so the
// row is the only copy dead-letter replay can rebuild the event from.
type pendingDeadLetters struct {
	cfg   config.Config
	kafka clients.Kafka
	read  map[string]map[int32]int64 // next offset to read, per partition
	ids   map[string]map[string]bool // table -> event id
}

// refresh reads the dead-letter records written since the last refresh
// (read_committed: those of committed relay transactions).
func (p *pendingDeadLetters) refresh(ctx context.Context) error {
	committed, ends, err := deadLetterOffsets(ctx, p.cfg, p.kafka)
	if err != nil {
		return fmt.Errorf("read pending dead letters: %w", err)
	}
	from := map[string]map[int32]int64{}
	for t, ps := range ends {
		from[t] = map[int32]int64{}
		for part := range ps {
			from[t][part] = max(committed[t][part], p.read[t][part], 0)
		}
	}
	if p.ids == nil {
		p.ids = map[string]map[string]bool{}
	}
	err = clients.ReadRange(ctx, p.kafka, ends, from, func(r *kgo.Record) {
		table, id := headerValue(r, "source.table"), headerValue(r, "id")
		if id == "" {
			return // a row without an event id: prune keeps those anyway
		}
		if p.ids[table] == nil {
			p.ids[table] = map[string]bool{}
		}
		p.ids[table][id] = true
	})
	if err != nil {
		return fmt.Errorf("read pending dead letters: %w", err)
	}
	p.read = ends
	return nil
}

// of lists the pending event ids of table t, as query arguments.
func (p *pendingDeadLetters) of(t string) []any {
	out := make([]any, 0, len(p.ids[t]))
	for id := range p.ids[t] {
		out = append(out, id)
	}
	return out
}

// filter drops the keys whose event id (ids[i] for keys[i]) is pending.
func (p *pendingDeadLetters) filter(t string, keys [][]any, ids []string) [][]any {
	out := keys[:0]
	for i, k := range keys {
		if p.ids[t][ids[i]] {
			continue
		}
		out = append(out, k)
	}
	return out
}

// count is the number of pending dead-lettered events.
func (p *pendingDeadLetters) count() int {
	n := 0
	for _, ids := range p.ids {
		n += len(ids)
	}
	return n
}

// note is the progress line's mention of rows kept for dead letters.
func (p *pendingDeadLetters) note() string {
	n := p.count()
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", rows of %d pending dead-lettered events kept", n)
}
