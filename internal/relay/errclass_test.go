package relay

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/errclass"
	"github.com/outbox-relay/outbox-relay/internal/ha"
	"github.com/outbox-relay/outbox-relay/router"
	"github.com/outbox-relay/outbox-relay/schema"
	"github.com/outbox-relay/outbox-relay/source"
)

// policyPackages are the packages whose errors the relay can end with:
// directory (from internal/relay) and the name their errors are known by
// in sentinelValues and errorTypeValues.
var policyPackages = map[string]string{
	"../../binlog":     "binlog",
	"../../source":     "source",
	"../../checkpoint": "checkpoint",
	"../../schema":     "schema",
	"../config":        "config",
	"../../router":     "router",
	"../ha":            "ha",
	"../errclass":      "errclass",
	".":                "relay",
}

// sentinelValues are the sentinels of policyPackages by name: the exported
// ones of every package, and this package's own.
func sentinelValues() map[string]error {
	return map[string]error{
		"source.ErrRDSRetentionDenied":     source.ErrRDSRetentionDenied,
		"source.ErrNotInBinlogs":           source.ErrNotInBinlogs,
		"source.ErrNoBinlogFile":           source.ErrNoBinlogFile,
		"source.ErrForeignHistory":         source.ErrForeignHistory,
		"source.ErrUnproven":               source.ErrUnproven,
		"binlog.ErrInsecureLogin":          binlog.ErrInsecureLogin,
		"binlog.ErrPacketBound":            binlog.ErrPacketBound,
		"binlog.ErrPayloadBound":           binlog.ErrPayloadBound,
		"binlog.ErrPayloadCorrupt":         binlog.ErrPayloadCorrupt,
		"binlog.ErrChecksumMismatch":       binlog.ErrChecksumMismatch,
		"binlog.ErrAnswerBound":            binlog.ErrAnswerBound,
		"binlog.ErrBrokenAnswer":           binlog.ErrBrokenAnswer,
		"binlog.ErrMalformedEvent":         binlog.ErrMalformedEvent,
		"binlog.ErrStatementLogged":        binlog.ErrStatementLogged,
		"binlog.ErrUnframed":               binlog.ErrUnframed,
		"binlog.ErrRolledBackRows":         binlog.ErrRolledBackRows,
		"binlog.ErrMalformedRows":          binlog.ErrMalformedRows,
		"binlog.ErrNoColumnNames":          binlog.ErrNoColumnNames,
		"binlog.ErrPartialRowImage":        binlog.ErrPartialRowImage,
		"binlog.ErrSchemaMismatch":         binlog.ErrSchemaMismatch,
		"binlog.ErrDuplicateServerID":      binlog.ErrDuplicateServerID,
		"binlog.ErrPacketTooLarge":         binlog.ErrPacketTooLarge,
		"binlog.ErrPositionAhead":          binlog.ErrPositionAhead,
		"binlog.ErrPositionDiverged":       binlog.ErrPositionDiverged,
		"binlog.ErrNoSignedness":           binlog.ErrNoSignedness,
		"source.ErrUnreachable":            source.ErrUnreachable,
		"binlog.ErrAccessDenied":           binlog.ErrAccessDenied,
		"source.ErrServerConfig":           source.ErrServerConfig,
		"source.ErrGrants":                 source.ErrGrants,
		"binlog.ErrPurged":                 binlog.ErrPurged,
		"binlog.ErrBadPosition":            binlog.ErrBadPosition,
		"checkpoint.ErrNotTransactional":   checkpoint.ErrNotTransactional,
		"checkpoint.ErrTopicLayout":        checkpoint.ErrTopicLayout,
		"checkpoint.ErrCheckpointHeldBack": checkpoint.ErrCheckpointHeldBack,
		"checkpoint.ErrNotVisible":         checkpoint.ErrNotVisible,
		"checkpoint.ErrCommitNotProved":    checkpoint.ErrCommitNotProved,
		"checkpoint.ErrLost":               checkpoint.ErrLost,
		"checkpoint.ErrTablesChanged":      checkpoint.ErrTablesChanged,
		"checkpoint.ErrCorrupt":            checkpoint.ErrCorrupt,
		"checkpoint.ErrNewerFormat":        checkpoint.ErrNewerFormat,
		"schema.ErrUnparsed":               schema.ErrUnparsed,
		"schema.ErrIgnored":                schema.ErrIgnored,
		"schema.ErrProvisional":            schema.ErrProvisional,
		"config.ErrInvalid":                config.ErrInvalid,
		"router.ErrBadRow":                 router.ErrBadRow,
		"ha.ErrLeaseLost":                  ha.ErrLeaseLost,
		"ha.ErrRelayLive":                  ha.ErrRelayLive,
		"relay.ErrBadRow":                  ErrBadRow,
		"relay.ErrKafkaUnreachable":        ErrKafkaUnreachable,
		"errclass.ErrKafkaUnreachable":     errclass.ErrKafkaUnreachable,
		"errclass.ErrFenced":               errclass.ErrFenced,
		"errclass.ErrRejected":             errclass.ErrRejected,
		"errclass.ErrRecordRefused":        errclass.ErrRecordRefused,
		"relay.ErrFlavorMismatch":          ErrFlavorMismatch,
		"relay.ErrInvalidOp":               ErrInvalidOp,
		"relay.ErrUnknownXA":               ErrUnknownXA,
		"relay.ErrPartitionsChanged":       ErrPartitionsChanged,
		"relay.ErrRecordRefused":           ErrRecordRefused,
		"relay.ErrFenced":                  ErrFenced,
		"relay.ErrTxnTimedOut":             ErrTxnTimedOut,
		"relay.ErrRejected":                ErrRejected,
		"relay.errRevoked":                 errRevoked,
		"relay.errAckTimeout":              errAckTimeout,
		"relay.errNotProved":               errNotProved,
		"relay.errHostRefused":             errHostRefused,
		"relay.errHostStale":               errHostStale,
		"relay.errSourceStream":            errSourceStream,
	}
}

// errorTypeValues are a value of each exported error type of
// policyPackages, by name.
func errorTypeValues() map[string]error {
	return map[string]error{
		"binlog.NoAnswerError":             &binlog.NoAnswerError{Phase: "connect to", Addr: "db:3306"},
		"binlog.PartialImageError":         &binlog.PartialImageError{GTID: "0-1-1", Table: "app.outbox", Absent: []string{"payload"}},
		"checkpoint.NotTransactionalError": &checkpoint.NotTransactionalError{Name: "p"},
		"checkpoint.HeldBackError":         &checkpoint.HeldBackError{Topic: "t"},
		"config.ValidationError":           &config.ValidationError{Problems: []string{"name: required"}},
	}
}

// declaredErrors parses the non-test Go files of policyPackages and returns
// their sentinels (package-level variables named Err..., and in this
// package also err... made by errors.New or errclass.New) and exported error
// types (a type with an Error() string method), as "pkg.Name".
func declaredErrors(t *testing.T) (sentinels, types []string) {
	t.Helper()
	for dir, pkg := range policyPackages {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("list %s: %v (%d files)", dir, err, len(files))
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			file, err := parser.ParseFile(token.NewFileSet(), f, src, parser.SkipObjectResolution)
			if err != nil {
				t.Fatalf("parse %s: %v", f, err)
			}
			for _, d := range file.Decls {
				switch d := d.(type) {
				case *ast.GenDecl:
					if d.Tok != token.VAR {
						continue
					}
					for _, s := range d.Specs {
						vs := s.(*ast.ValueSpec)
						for i, n := range vs.Names {
							own := pkg == "relay" && strings.HasPrefix(n.Name, "err") && i < len(vs.Values) && madeAsError(vs.Values[i])
							if strings.HasPrefix(n.Name, "Err") || own {
								sentinels = append(sentinels, pkg+"."+n.Name)
							}
						}
					}
				case *ast.FuncDecl:
					if d.Recv == nil || d.Name.Name != "Error" || d.Type.Params.NumFields() != 0 || d.Type.Results.NumFields() != 1 {
						continue
					}
					recv := d.Recv.List[0].Type
					if st, ok := recv.(*ast.StarExpr); ok {
						recv = st.X
					}
					if id, ok := recv.(*ast.Ident); ok && id.IsExported() {
						types = append(types, pkg+"."+id.Name)
					}
				}
			}
		}
	}
	sort.Strings(sentinels)
	sort.Strings(types)
	return sentinels, types
}

// madeAsError reports whether e is a call of errors.New or errclass.New.
func madeAsError(e ast.Expr) bool {
	call, ok := e.(*ast.CallExpr)
	if !ok {
		return false
	}
	fn, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	x, ok := fn.X.(*ast.Ident)
	return ok && (x.Name == "errors" || x.Name == "errclass") && fn.Sel.Name == "New"
}

// TestEverySentinelHasAClass fails on a sentinel or error type of the
// packages the relay can stop with that the error policy does not
// classify: such an error would be retried forever, counted as "kafka"
// and exit 75, whatever it means.
func TestEverySentinelHasAClass(t *testing.T) {
	sentinels, types := declaredErrors(t)
	if len(sentinels) < 40 || len(types) < 4 {
		t.Fatalf("parsed %d sentinels and %d error types: the parse misses declarations", len(sentinels), len(types))
	}
	check := func(what string, declared []string, values map[string]error) {
		for _, name := range declared {
			v, ok := values[name]
			if !ok {
				t.Errorf("%s %s is not in this test's list: add it, and classify it in internal/errclass", what, name)
				continue
			}
			delete(values, name)
			c, k, ok := errclass.Of(fmt.Errorf("wrapped: %w", v))
			if !ok || c == errclass.Unclassified || k == "" {
				t.Errorf("%s %s has no class in internal/errclass (got %d %q)", what, name, c, k)
			}
			// The relay's and errclass's own sentinels carry their class
			// (errclass.New).
			if (strings.HasPrefix(name, "relay.") || strings.HasPrefix(name, "errclass.")) && v != router.ErrBadRow && !errclass.Carries(v) {
				t.Errorf("%s %s: make it with errclass.New, so that it carries its class", what, name)
			}
		}
		for name := range values {
			t.Errorf("%s %s is in this test's list but not declared any more: remove it", what, name)
		}
	}
	check("sentinel", sentinels, sentinelValues())
	check("error type", types, errorTypeValues())
}

// TestClassDecisions is the policy each class stands for.
func TestClassDecisions(t *testing.T) {
	for _, c := range []struct {
		class errclass.Class
		fatal bool
		stop  bool // at the source transaction
		exit  int
	}{
		{errclass.Unclassified, false, false, ExitTransient},
		{errclass.Transient, false, false, ExitTransient},
		{errclass.DataStop, true, true, ExitData},
		{errclass.Purged, true, true, ExitPurged},
		{errclass.ConfigStop, true, true, ExitConfig},
		{errclass.Refused, true, false, ExitConfig},
		{errclass.RecordRefused, true, false, ExitData},
		{errclass.Fenced, true, false, ExitError},
	} {
		if got := c.class.Fatal(); got != c.fatal {
			t.Errorf("class %d: Fatal() = %v, want %v", c.class, got, c.fatal)
		}
		if got := c.class.StopsAtTransaction(); got != c.stop {
			t.Errorf("class %d: StopsAtTransaction() = %v, want %v", c.class, got, c.stop)
		}
		if got := c.class.ExitCode(); got != c.exit {
			t.Errorf("class %d: ExitCode() = %d, want %d", c.class, got, c.exit)
		}
	}
}

// TestErrorDecisionsFollowTheClass checks the relay's decisions about an
// error (fatal, stop at the transaction, exit code, kind) for a sentinel of
// each class, wrapped as the relay wraps them, and for errors that wrap
// several sentinels: the highest class decides all four.
func TestErrorDecisionsFollowTheClass(t *testing.T) {
	wrap := func(e error) error { return fmt.Errorf("attempt: %w", e) }
	for _, c := range []struct {
		name  string
		err   error
		fatal bool
		stop  bool
		exit  int
		kind  string
	}{
		{"unknown", errors.New("connection reset"), false, false, ExitTransient, "kafka"},
		{"deadline", wrap(context.DeadlineExceeded), false, false, ExitTransient, "kafka"},
		{"kafka unreachable", wrap(ErrKafkaUnreachable), false, false, ExitTransient, "kafka_unreachable"},
		{"source unreachable", wrap(source.ErrUnreachable), false, false, ExitTransient, "source_unreachable"},
		{"held back", wrap(&checkpoint.HeldBackError{Topic: "t"}), false, false, ExitTransient, "checkpoint_held_back"},
		{"bad row", wrap(ErrBadRow), true, true, ExitData, "bad_row"},
		{"schema", wrap(fmt.Errorf("%w: %w", binlog.ErrSchemaMismatch, schema.ErrProvisional)), true, true, ExitData, "schema"},
		{"not transactional", wrap(&checkpoint.NotTransactionalError{Name: "p"}), true, true, ExitData, "checkpoint"},
		{"purged", wrap(binlog.ErrPurged), true, true, ExitPurged, "purged"},
		{"another history", wrap(fmt.Errorf("%w: %w: h", source.ErrForeignHistory, binlog.ErrPositionDiverged)), true, true, ExitData, "source_position"},
		{"unproven", wrap(fmt.Errorf("%w: %w: h", source.ErrUnproven, binlog.ErrPurged)), true, true, ExitPurged, "purged"},
		{"invalid config", wrap(&config.ValidationError{Problems: []string{"x"}}), true, true, ExitConfig, "config"},
		{"grants", wrap(source.ErrGrants), true, true, ExitConfig, "source_config"},
		{"partial row image", wrap(binlog.ErrPartialRowImage), true, true, ExitConfig, "source_config"},
		{"rejected", wrap(ErrRejected), true, false, ExitConfig, "rejected"},
		{"record refused", wrap(fmt.Errorf("%w: %w: x", ErrRejected, ErrRecordRefused)), true, false, ExitData, "record_refused"},
		{"fenced", wrap(ErrFenced), true, false, ExitError, "fenced"},
		{"commit not proved", wrap(fmt.Errorf("%w: %w", errNotProved, checkpoint.ErrCommitNotProved)), false, false, ExitTransient, "kafka"},
		{"host refused, diverged", wrap(fmt.Errorf("%w: h: %v", errHostRefused, binlog.ErrPositionDiverged)), false, false, ExitTransient, "source_position"},
		{"commit failed after a stop", fmt.Errorf("commit before the stop: %w (stop: %v)", ErrKafkaUnreachable, ErrBadRow), false, false, ExitTransient, "kafka_unreachable"},
		{"joined: fenced over a data stop", errors.Join(ErrBadRow, ErrFenced), true, false, ExitError, "fenced"},
		{"joined: fenced over a refused record", errors.Join(fmt.Errorf("%w: %w", ErrRejected, ErrRecordRefused), ErrFenced), true, false, ExitError, "fenced"},
		{"joined: a stop over a transient", errors.Join(ErrTxnTimedOut, binlog.ErrStatementLogged), true, true, ExitData, "transaction_shape"},
		{"joined: refused over a data stop", errors.Join(ErrInvalidOp, ErrRejected), true, false, ExitConfig, "rejected"},
	} {
		if got := errclass.Fatal(c.err); got != c.fatal {
			t.Errorf("%s: fatal = %v, want %v", c.name, got, c.fatal)
		}
		if got := errclass.StopsAtTransaction(c.err); got != c.stop {
			t.Errorf("%s: stopsAtTransaction = %v, want %v", c.name, got, c.stop)
		}
		if got := ExitCode(c.err); got != c.exit {
			t.Errorf("%s: ExitCode = %d, want %d", c.name, got, c.exit)
		}
		if got := errclass.Kind(c.err); got != c.kind {
			t.Errorf("%s: kind = %q, want %q", c.name, got, c.kind)
		}
	}
}

// TestErrorKindsKeepTheirLabels: the kind labels of relay_errors_total and
// relay_restarts_total that dashboards and alerts select on.
func TestErrorKindsKeepTheirLabels(t *testing.T) {
	for want, errs := range map[string][]error{
		"fenced":               {ErrFenced},
		"bad_row":              {ErrBadRow},
		"partitions_changed":   {ErrPartitionsChanged},
		"rejected":             {ErrRejected},
		"invalid_op":           {ErrInvalidOp},
		"transaction_shape":    {binlog.ErrStatementLogged, binlog.ErrUnframed, binlog.ErrRolledBackRows, binlog.ErrMalformedRows, ErrUnknownXA, binlog.ErrPayloadCorrupt, binlog.ErrChecksumMismatch},
		"purged":               {binlog.ErrPurged, source.ErrUnproven},
		"source_unreachable":   {source.ErrUnreachable},
		"source_config":        {binlog.ErrDuplicateServerID, binlog.ErrPacketTooLarge, binlog.ErrPacketBound, binlog.ErrPayloadBound, binlog.ErrAnswerBound, binlog.ErrBrokenAnswer, binlog.ErrInsecureLogin, binlog.ErrAccessDenied, source.ErrServerConfig, source.ErrGrants, binlog.ErrNoColumnNames, binlog.ErrPartialRowImage, binlog.ErrBadPosition, ErrFlavorMismatch},
		"source_position":      {binlog.ErrPositionAhead, binlog.ErrPositionDiverged, errHostRefused, source.ErrForeignHistory},
		"kafka_txn_timeout":    {ErrTxnTimedOut},
		"checkpoint_held_back": {checkpoint.ErrCheckpointHeldBack},
		"schema":               {binlog.ErrSchemaMismatch, binlog.ErrNoSignedness, schema.ErrUnparsed},
		"binlog":               {errSourceStream},
		"kafka_unreachable":    {ErrKafkaUnreachable},
		"checkpoint":           {checkpoint.ErrCorrupt, checkpoint.ErrTopicLayout, checkpoint.ErrLost, checkpoint.ErrTablesChanged},
		"kafka":                {errAckTimeout, errNotProved, checkpoint.ErrCommitNotProved, errors.New("x")},
		"lease_lost":           {ha.ErrLeaseLost},
		"lease_revoked":        {errRevoked},
		"relay_live":           {ha.ErrRelayLive},
	} {
		for _, e := range errs {
			if got := errclass.Kind(fmt.Errorf("x: %w", e)); got != want {
				t.Errorf("errclass.Kind(%v) = %q, want %q", e, got, want)
			}
		}
	}
}
