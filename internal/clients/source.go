package clients

import (
	"fmt"
	"os"
	"regexp"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/membudget"
	"github.com/outbox-relay/outbox-relay/router"
)

// Source is the binlog configuration of cfg: the source hosts, the login
// and its guards (TLS, the pinned server key, cleartext and key
// retrieval), the waits' bounds and what the stream accepts.
func Source(cfg config.Config) (binlog.Config, error) {
	tlsCfg, err := cfg.Source.TLS.Config()
	if err != nil {
		return binlog.Config{}, fmt.Errorf("source tls: %w", err)
	}
	pinned, err := serverPublicKey(cfg.Source.ServerPublicKeyFile)
	if err != nil {
		return binlog.Config{}, err
	}
	return binlog.Config{
		TLS:             tlsCfg,
		Hosts:           cfg.Source.Hosts,
		User:            cfg.Source.User,
		Password:        cfg.Source.Password,
		ServerID:        cfg.Source.ServerID,
		Flavor:          string(cfg.Source.Flavor),
		Tables:          cfg.Source.Tables,
		ConnectTimeout:  cfg.Source.ConnectTimeout,
		QueryTimeout:    cfg.Source.QueryTimeout,
		HeartbeatPeriod: cfg.Source.HeartbeatPeriod,
		// Typed setting: config.StatementDMLWarn or StatementDMLFail.
		AllowStatementDML: cfg.Source.StatementDML == config.StatementDMLWarn,
		// Login and packet bounds (binlog/loginguard.go).
		AllowCleartextPassword:  cfg.Source.AllowCleartextPassword,
		AllowPublicKeyRetrieval: cfg.Source.AllowPublicKeyRetrieval,
		ServerPublicKey:         pinned,
		MaxPacketBytes:          cfg.Source.MaxPacketBytes,
		MemoryBudget:            membudget.Read(),
	}, nil
}

// serverPublicKey reads source.server_public_key_file (DER), nil if unset.
func serverPublicKey(f string) ([]byte, error) {
	if f == "" {
		return nil, nil
	}
	raw, err := os.ReadFile(f)
	if err == nil {
		var der []byte
		if der, err = binlog.ParsePublicKey(raw); err == nil {
			return der, nil
		}
	}
	return nil, fmt.Errorf("read source.server_public_key_file %s: %w", f, err)
}

// TableRouter is the router of table's settings rc (cfg.Router.For(table),
// or a part of them) in pipeline cfg, as `run` routes: with the table's
// CloudEvents source and the pipeline's reserved topics
// (cfg.ReservedTopics), which no row may be routed to.
func TableRouter(cfg config.Config, rc config.RouterConfig, table string) (*router.Router, error) {
	rcfg, err := Router(rc)
	if err != nil {
		return nil, err
	}
	rcfg.CloudEventsSource = rc.CloudEventsSourceFor(cfg.Name, table)
	rcfg.Reserved = cfg.ReservedTopics()
	return router.New(rcfg)
}

// Router translates one table's router settings (config.Router.For).
func Router(c config.RouterConfig) (router.Config, error) {
	rc := router.Config{
		EventIDColumn:         c.EventIDColumn,
		AggregateTypeColumn:   c.AggregateTypeColumn,
		AggregateIDColumn:     c.AggregateIDColumn,
		EventTypeColumn:       c.EventTypeColumn,
		PayloadColumn:         c.PayloadColumn,
		TimestampColumn:       c.TimestampColumn,
		SchemaVersionColumn:   c.SchemaVersionColumn,
		TopicPrefix:           c.TopicPrefix,
		Format:                string(c.ValueFormat),
		NullPayloadError:      c.NullPayload == "error",
		TopicReplacement:      c.TopicReplacement,
		SkipMissingAdditional: c.AdditionalMissing == "skip",
		TracingColumn:         c.TracingColumn,
		CloudEventsMode:       string(c.CloudEventsMode),
	}
	if c.TopicRegex != "" {
		re, err := regexp.Compile(c.TopicRegex)
		if err != nil {
			return rc, fmt.Errorf("topic_regex: %w", err)
		}
		rc.TopicRegex = re
	}
	for _, f := range c.AdditionalFields {
		rc.Additional = append(rc.Additional, router.Field{Column: f.Column, Placement: string(f.Placement), Alias: f.Alias})
	}
	return rc, nil
}
