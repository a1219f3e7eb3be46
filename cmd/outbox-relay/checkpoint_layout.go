package main

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/source"
)

// xaSigns is x with the signedness of signs for the tables whose layout
// at the prepared XA transactions' resume position is the one checkpoint
// set stores (their definitions have not changed in between, as the
// operator says of the new layout), where x did not know it: the relay
// reads from there with x's layout, so a signedness recorded only at the
// checkpoint's position would not help it past them.
func xaSigns(x *checkpoint.XA, layout, signs map[string][]string) *checkpoint.XA {
	if x == nil || x.Schema == nil || x.Resume == nil {
		return x
	}
	out := *x
	out.Unsigned = maps.Clone(x.Unsigned)
	for t, cols := range x.Schema {
		u, ok := signs[t]
		if _, known := out.Unsigned[t]; known || !ok || !slices.Equal(cols, layout[t]) {
			continue
		}
		if out.Unsigned == nil {
			out.Unsigned = map[string][]string{}
		}
		out.Unsigned[t] = u
		fmt.Fprintf(os.Stderr, "layout: %s: the same signedness at the prepared XA transactions' resume position %s (its layout there is the same)\n", t, *x.Resume)
	}
	return &out
}

// checkpointLayout is the column layout checkpoint set stores with pos: the
// relay decodes rows with it when the binlog carries no column names, so
// dropping it would leave the relay unable to read the outbox there. mode
// "keep" takes the previous checkpoint's (shadow tables of an online schema
// change included); "server" the captured tables' current definitions;
// "" picks server for --to now (the head matches today's definitions) and
// keep when there is a previous layout, else server. Captured tables the
// kept layout lacks come from the server. Neither source is certain for a
// position in the past: stderr says which was taken and when it is right.
// signs are the UNSIGNED columns of the tables whose signedness is known
// (the server's always; a kept layout's if its checkpoint recorded them).
func checkpointLayout(ctx context.Context, src binlog.Config, srv *binlog.Server, cur *checkpoint.Checkpoint, mode string, now bool, pos string) (layout, signs map[string][]string, err error) {
	if mode == "" {
		mode = "server"
		if !now && cur != nil && cur.Schema != nil {
			mode = "keep"
		}
	}
	note := ""
	if srv.ColumnNames {
		note = " (the server logs column names, binlog_row_metadata=FULL: rows are decoded with those; the layout is a fallback)"
	}
	out, signs := map[string][]string{}, map[string][]string{}
	missing := src.Tables
	if mode == "keep" {
		if cur == nil || cur.Schema == nil {
			return nil, nil, fmt.Errorf("%w: --schema keep: there is no previous checkpoint with a layout to keep", errUsage)
		}
		missing = nil
		for t, cols := range cur.Schema {
			out[t] = cols
			if u, ok := cur.Unsigned[t]; ok {
				signs[t] = u
			}
		}
		for _, t := range src.Tables {
			if _, ok := out[t]; !ok {
				missing = append(missing, t)
			}
		}
		fmt.Fprintf(os.Stderr, "layout: kept the previous checkpoint's (at %s): right only if no DDL changed the captured tables between %s and %s%s\n",
			cur.GTIDSet, cur.GTIDSet, pos, note)
	}
	if len(missing) > 0 {
		current, currentSigns, err := source.CurrentColumns(ctx, src, srv.Addr)
		if err != nil && !srv.ColumnNames {
			return nil, nil, err
		}
		if err != nil { // rows carry their column names: the layout is only a fallback
			fmt.Fprintf(os.Stderr, "layout: not stored: %v%s\n", err, note)
			missing = nil
		}
		var took []string
		for _, t := range missing {
			cols, ok := current[t]
			if !ok {
				fmt.Fprintf(os.Stderr, "layout: %s not found on %s (missing, or no SELECT granted on it): its layout is unknown, "+
					"its rows need column names in the binlog (binlog_row_metadata=FULL)\n", t, srv.Addr)
				continue
			}
			out[t], signs[t] = cols, currentSigns[t]
			took = append(took, t)
		}
		if len(took) > 0 {
			fmt.Fprintf(os.Stderr, "layout: took the current definition of %s from %s: right only if no DDL changed it after %s%s\n",
				strings.Join(took, ", "), srv.Addr, pos, note)
		}
	}
	for _, t := range src.Tables {
		cols, ok := out[t]
		if !ok {
			continue
		}
		sign := "signedness unknown (the kept checkpoint did not record it)"
		if u, ok := signs[t]; ok {
			sign = "unsigned: " + cmp.Or(strings.Join(u, ", "), "none")
		}
		fmt.Fprintf(os.Stderr, "layout: %s: %s; %s\n", t, strings.Join(cols, ", "), sign)
	}
	if len(out) == 0 {
		return nil, nil, nil
	}
	if len(signs) == 0 {
		signs = nil
	}
	return out, signs, nil
}

// keptProvisional is the previous checkpoint's marks of layouts taken from
// CREATE TABLE IF NOT EXISTS and not yet checked against a table map
// (schema.Provisional), for the tables whose kept layout is the one stored:
// the relay still checks them. A layout from the server's definitions is
// certain.
func keptProvisional(cur *checkpoint.Checkpoint, layout map[string][]string) map[string][]string {
	if cur == nil {
		return nil
	}
	var out map[string][]string
	for t, classes := range cur.Provisional {
		if cols, ok := layout[t]; ok && slices.Equal(cols, cur.Schema[t]) {
			if out == nil {
				out = map[string][]string{}
			}
			out[t] = classes
		}
	}
	return out
}
