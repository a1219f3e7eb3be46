package over

// The same shapes within the limits: none of them is reported.

import (
	"context"
	"net/http"
)

type sixteen struct {
	a, b, c, d, e, f, g, h int
	i, j, k, l, m, n, o    string
	context.Context
}

type six interface {
	a()
	b()
	c()
	d()
	e()
	f()
}

type kept struct{ n int }

func (k kept) count() int { return k.n }

func (k kept) one() (int, error) { return 1, nil }

func (k *kept) name() string { return "kept" }

func (k *kept) reset() { k.n = 0 }

func (k kept) request(r *http.Request) context.Context { return r.Context() }

func background() context.Context { return context.Background() }
