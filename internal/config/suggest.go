package config

import (
	"reflect"
	"strings"
)

// suggestKey is what an unknown key was likely meant to be: the key of
// the same mapping nearest to it (names, keys the mapping allows) within
// a small edit distance, else the path of a key of that name elsewhere in
// the file (source.brokers: kafka.brokers); "" when nothing is close.
func suggestKey(key string, names []string) string {
	want := normalKey(key)
	best, bestDist := "", maxSuggestDistance(want)+1
	for _, n := range names {
		if d := editDistance(want, normalKey(n)); d < bestDist {
			best, bestDist = n, d
		}
	}
	if best != "" {
		return best
	}
	var elsewhere []string
	for _, p := range keyPaths(reflect.TypeFor[Config](), "") {
		if p == want || strings.HasSuffix(p, "."+want) {
			elsewhere = append(elsewhere, p)
		}
	}
	return strings.Join(elsewhere, " or ")
}

// normalKey compares keys as written by hand: case, and '-' for '_'.
func normalKey(k string) string { return strings.ReplaceAll(strings.ToLower(k), "-", "_") }

// maxSuggestDistance is how many edits apart a key and a suggestion may be:
// one for a short key, two from five characters on.
func maxSuggestDistance(k string) int {
	if len(k) < 5 {
		return 1
	}
	return 2
}

// keyPaths lists the dotted path of every key of struct t (maps and lists
// of mappings are not entered), each prefixed with prefix.
func keyPaths(t reflect.Type, prefix string) []string {
	var out []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		out = append(out, prefix+name)
		if ft := t.Field(i).Type; ft.Kind() == reflect.Struct && !reflect.PointerTo(ft).Implements(textUnmarshalerType) && ft != durationType {
			out = append(out, keyPaths(ft, prefix+name+".")...)
		}
	}
	return out
}

// editDistance is the optimal string alignment distance of a and b: the
// insertions, deletions, substitutions and swaps of two neighbours (the
// usual typos: tabels, sever_id) that turn a into b.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}
