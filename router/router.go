// Package router turns one outbox row into one Kafka record, in the style of
// the Debezium Outbox Event Router: topic per aggregate type, key = aggregate
// id, value = payload bytes exactly as stored, header "id" = event id.
//
// It is pure: no I/O, no clocks, no globals. Route either returns a record or
// an error wrapping ErrBadRow that names the offending column; it never drops
// a row silently.
package router

import (
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrBadRow is wrapped by every error Route returns: the row cannot become a
// record under this configuration. Callers branch on it to stop (or, later,
// dead-letter) without advancing the checkpoint.
var ErrBadRow = errors.New("bad outbox row")

// Config names the outbox columns and the topic prefix.
type Config struct {
	EventIDColumn       string
	AggregateTypeColumn string
	AggregateIDColumn   string
	EventTypeColumn     string // optional: becomes header "type" when set and present
	PayloadColumn       string
	TopicPrefix         string
}

// Header is one record header; an alias so records pass to the Kafka client
// without copying.
type Header = kgo.RecordHeader

// Record is what the relay produces for one row.
type Record struct {
	Topic     string
	Key       []byte
	Value     []byte // nil for a NULL payload
	Headers   []Header
	Timestamp time.Time
	EventID   string // for error messages and logs
}

// Row is one inserted outbox row: column names and values, in table order,
// plus the commit time of its source transaction.
type Row struct {
	Columns    []string
	Values     []any
	CommitTime time.Time
}

// Router routes rows. It keeps no state between calls and is safe for
// concurrent use.
type Router struct {
	cfg Config
}

// New returns a Router; cfg columns must be non-empty except EventTypeColumn.
func New(cfg Config) (*Router, error) {
	if cfg.EventIDColumn == "" || cfg.AggregateTypeColumn == "" || cfg.AggregateIDColumn == "" || cfg.PayloadColumn == "" {
		return nil, errors.New("new router: event id, aggregate type, aggregate id and payload columns are required")
	}
	return &Router{cfg: cfg}, nil
}

// Route builds the record for row.
func (r *Router) Route(row Row) (Record, error) {
	var (
		idIdx, typeIdx, aggIdx, evIdx, payIdx = -1, -1, -1, -1, -1
	)
	for i, c := range row.Columns {
		switch c {
		case r.cfg.EventIDColumn:
			idIdx = i
		case r.cfg.AggregateTypeColumn:
			typeIdx = i
		case r.cfg.AggregateIDColumn:
			aggIdx = i
		case r.cfg.PayloadColumn:
			payIdx = i
		}
		if r.cfg.EventTypeColumn != "" && c == r.cfg.EventTypeColumn {
			evIdx = i
		}
	}
	eventID, err := r.text(row, idIdx, r.cfg.EventIDColumn, true)
	if err != nil {
		return Record{}, err
	}
	aggType, err := r.text(row, typeIdx, r.cfg.AggregateTypeColumn, true)
	if err != nil {
		return Record{EventID: eventID}, err
	}
	aggID, err := r.text(row, aggIdx, r.cfg.AggregateIDColumn, true)
	if err != nil {
		return Record{EventID: eventID}, err
	}
	if payIdx < 0 || payIdx >= len(row.Values) {
		return Record{EventID: eventID}, fmt.Errorf("%w: column %q is missing", ErrBadRow, r.cfg.PayloadColumn)
	}
	payload, err := asBytes(row.Values[payIdx])
	if err != nil {
		return Record{EventID: eventID}, fmt.Errorf("%w: column %q: %v", ErrBadRow, r.cfg.PayloadColumn, err)
	}
	topic := r.cfg.TopicPrefix + aggType
	if err := ValidTopic(topic); err != nil {
		return Record{EventID: eventID}, fmt.Errorf("%w: column %q: %v", ErrBadRow, r.cfg.AggregateTypeColumn, err)
	}
	headers := make([]Header, 1, 2)
	headers[0] = Header{Key: "id", Value: []byte(eventID)}
	if evIdx >= 0 {
		if v, err := r.text(row, evIdx, r.cfg.EventTypeColumn, false); err == nil && v != "" {
			headers = append(headers, Header{Key: "type", Value: []byte(v)})
		}
	}
	return Record{
		Topic:     topic,
		Key:       []byte(aggID),
		Value:     payload,
		Headers:   headers,
		Timestamp: row.CommitTime,
		EventID:   eventID,
	}, nil
}

// text renders column idx as text; required columns must be present and
// neither NULL nor empty.
func (r *Router) text(row Row, idx int, name string, required bool) (string, error) {
	if idx < 0 || idx >= len(row.Values) {
		return "", fmt.Errorf("%w: column %q is missing", ErrBadRow, name)
	}
	v := row.Values[idx]
	var s string
	switch t := v.(type) {
	case nil:
		if required {
			return "", fmt.Errorf("%w: column %q is NULL", ErrBadRow, name)
		}
		return "", nil
	case string:
		s = t
	case []byte:
		s = string(t)
	case int64:
		s = strconv.FormatInt(t, 10)
	case int32:
		s = strconv.FormatInt(int64(t), 10)
	case int16:
		s = strconv.FormatInt(int64(t), 10)
	case int8:
		s = strconv.FormatInt(int64(t), 10)
	case uint64:
		s = strconv.FormatUint(t, 10)
	case uint32:
		s = strconv.FormatUint(uint64(t), 10)
	case uint16:
		s = strconv.FormatUint(uint64(t), 10)
	case uint8:
		s = strconv.FormatUint(uint64(t), 10)
	default:
		return "", fmt.Errorf("%w: column %q has unsupported type %T", ErrBadRow, name, v)
	}
	if required && s == "" {
		return "", fmt.Errorf("%w: column %q is empty", ErrBadRow, name)
	}
	if !utf8.ValidString(s) {
		return "", fmt.Errorf("%w: column %q is not valid UTF-8", ErrBadRow, name)
	}
	return s, nil
}

// asBytes returns the payload exactly as stored; NULL is nil.
func asBytes(v any) ([]byte, error) {
	switch t := v.(type) {
	case nil:
		return nil, nil
	case []byte:
		return t, nil
	case string:
		return []byte(t), nil
	default:
		return nil, fmt.Errorf("unsupported payload type %T", v)
	}
}

// ValidTopic reports whether Kafka accepts name as a topic name: 1 to 249
// characters of ASCII letters, digits, '.', '_' and '-', and not "." or "..".
func ValidTopic(name string) error {
	if name == "" {
		return errors.New("topic name is empty")
	}
	if len(name) > 249 {
		return fmt.Errorf("topic name %q is longer than 249 characters", name)
	}
	if name == "." || name == ".." {
		return fmt.Errorf("topic name %q is not allowed", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("topic name %q has character %q; Kafka allows letters, digits, '.', '_' and '-'", name, c)
		}
	}
	return nil
}
