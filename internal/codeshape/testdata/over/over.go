package over

// One of every shape the limits refuse (TestTheLimitsFindEachShapeTheyRefuse).

import (
	ctxt "context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

type wide struct {
	a, b, c, d, e, f, g, h int
	i, j, k, l, m, n, o    string
	ctxt.Context
	kgo.Record
}

var _ = kerr.UnknownServerError

type held struct {
	inner []struct{ a int }
	anon  struct {
		a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, q int
	}
}

type shape struct{}

type many interface {
	a()
	b()
	c()
	d()
	e()
	f()
	g()
}

func (shape) empty() {}

func (s shape) zeroes() (int, string, error, bool, float64) { return 0, "", nil, false, 0.0 }

func (s *shape) blank() { return }

func (s shape) zeroValue() held { return held{} }

func wrap(ctx ctxt.Context) ctxt.Context {
	type key struct{}
	return ctxt.WithValue(ctx, key{}, 1)
}

func mark(ctx ctxt.Context) *kgo.Record {
	return &kgo.Record{
		Context: ctx,
	}
}

func marked(r *kgo.Record, ctx ctxt.Context) bool { return r.Context == ctx }

func remark(r *kgo.Record, ctx ctxt.Context) {
	r.Context = ctx
}
