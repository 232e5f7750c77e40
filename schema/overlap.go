package schema

import "github.com/lockkit/lockkit/internal/keylang"

// The key language of a pattern, its overlap and ambiguity checks live in
// internal/keylang, which the runtime uses too (to refuse two generated
// packages whose domains share keys). These are the schema's views of it.

// lang is segs in keylang's terms.
func lang(segs []Segment) []keylang.Segment {
	out := make([]keylang.Segment, len(segs))
	for i, s := range segs {
		out[i] = keylang.Segment{Literal: s.Literal, Param: s.Param, Enc: keylang.Enc(string(s.Type))}
	}
	return out
}

type compiled = keylang.Compiled

func newCompiled(segs []Segment) *compiled { return keylang.Compile(lang(segs)) }

// overlap reports whether two patterns can produce the same key, and returns
// the shortest such key.
func overlap(x, y []Segment) (key string, found bool) { return keylang.Overlap(lang(x), lang(y)) }

// ambiguity reports whether some key of the pattern splits into parameter
// values in two ways, with such a key and the parameters that differ.
func ambiguity(segs []Segment) (key string, params []string, ambiguous bool) {
	return keylang.Ambiguity(lang(segs))
}

// adjacentParams returns the first two parameters with nothing between them.
func adjacentParams(segs []Segment) (first, second string, found bool) {
	return keylang.AdjacentParams(lang(segs))
}
