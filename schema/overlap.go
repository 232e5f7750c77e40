package schema

import (
	"sync"

	"github.com/lockkit/lockkit/internal/policy"
)

// Keys are checked exactly, with automata. A domain's key suffix is its
// pattern with every parameter replaced by its encoding, so the set of
// suffixes a pattern can produce is a regular language over bytes:
//
//	literal byte  itself
//	string        [^:{}]*   (the runtime escapes ':', '{', '}' and more)
//	int, int64..  -?[0-9]+
//	uint, uint64  [0-9]+
//
// These languages contain every real encoding (they are a little larger: no
// encoder writes "007" or a bare "%"), so the checks never miss a collision;
// they may only reject a literal that no encoder could produce anyway.
//
// Each pattern becomes a Glushkov automaton: one state per character position
// of the expression (a literal byte, or the character class of a parameter),
// no ε-moves, and every state belongs to exactly one segment of the pattern.
// Two checks search the product of two such automata breadth-first:
//
//   - overlap: do two patterns share a key? The product of the two automata
//     accepts exactly the common keys, so it is a reachability question.
//   - ambiguity: can one key of a pattern be split into parameter values in two
//     ways? Two runs of the automaton over the same key are different splits
//     exactly when they are, at some step, in different states (a state names
//     the segment its byte belongs to). So search the product of the automaton
//     with itself for an accepting path that passes through a pair of
//     different states.
//
// Both searches are exact (no heuristics) and cost O(n·m) states for patterns
// of n and m positions. Breadth-first search also yields the shortest example
// key, which the error message shows.

// byteSet is a set of bytes, one bit each.
type byteSet [4]uint64

func (s *byteSet) add(c byte)     { s[c>>6] |= 1 << (c & 63) }
func (s byteSet) has(c byte) bool { return s[c>>6]&(1<<(c&63)) != 0 }
func (s byteSet) and(t byteSet) byteSet {
	return byteSet{s[0] & t[0], s[1] & t[1], s[2] & t[2], s[3] & t[3]}
}
func (s byteSet) isEmpty() bool { return s[0]|s[1]|s[2]|s[3] == 0 }

func setOf(bytes string) byteSet {
	var s byteSet
	for i := 0; i < len(bytes); i++ {
		s.add(bytes[i])
	}
	return s
}

// pickOrder is the order in which example keys prefer their bytes: readable ones first.
var pickOrder = func() []byte {
	order := []byte("abcdefghijklmnopqrstuvwxyz1234567890-_.ABCDEFGHIJKLMNOPQRSTUVWXYZ")
	var seen byteSet
	for _, c := range order {
		seen.add(c)
	}
	for c := 0x20; c < 0x100; c++ {
		if !seen.has(byte(c)) {
			order = append(order, byte(c))
		}
	}
	for c := 0; c < 0x20; c++ {
		order = append(order, byte(c))
	}
	return order
}()

// pick returns a byte of a non-empty set, the most readable one.
func (s byteSet) pick() byte {
	for _, c := range pickOrder {
		if s.has(c) {
			return c
		}
	}
	return 0
}

var (
	stringClass = func() byteSet {
		var s byteSet
		for c := 0; c < 0x100; c++ {
			if c != ':' && c != '{' && c != '}' {
				s.add(byte(c))
			}
		}
		return s
	}()
	digitClass = setOf("0123456789")
	minusClass = setOf("-")
)

// automaton is the Glushkov automaton of a pattern. State 0 is the start;
// every other state is a character position with its class and segment.
type automaton struct {
	class  []byteSet // the bytes that enter each state; class[0] is unused
	seg    []int     // the pattern segment of each state; -1 for the start
	follow [][]int32 // the states that may come next
	final  []bool    // states in which a key may end
}

// buildAutomaton builds the automaton of segs. With nonEmptyStrings, string
// parameters need at least one byte: a sub-language, used only to find a
// more readable example key.
func buildAutomaton(segs []Segment, nonEmptyStrings bool) *automaton {
	a := &automaton{class: []byteSet{{}}, seg: []int{-1}, follow: [][]int32{nil}}
	last := []int32{0} // states that can have read the last byte so far
	add := func(class byteSet, seg int, from []int32) int32 {
		p := int32(len(a.class))
		a.class = append(a.class, class)
		a.seg = append(a.seg, seg)
		a.follow = append(a.follow, nil)
		for _, x := range from {
			a.follow[x] = append(a.follow[x], p)
		}
		return p
	}
	loop := func(p int32) { a.follow[p] = append(a.follow[p], p) }
	for i, s := range segs {
		if !s.IsParam() {
			for j := 0; j < len(s.Literal); j++ {
				var c byteSet
				c.add(s.Literal[j])
				last = []int32{add(c, i, last)}
			}
			continue
		}
		switch policy.EncodingOf(string(s.Type)) {
		case policy.EncString:
			p := add(stringClass, i, last)
			loop(p)
			if nonEmptyStrings {
				last = []int32{p}
			} else { // may be empty: whatever could end before it still can
				last = append(append([]int32(nil), last...), p)
			}
		case policy.EncInt:
			m := add(minusClass, i, last)
			d := add(digitClass, i, last)
			a.follow[m] = append(a.follow[m], d)
			loop(d)
			last = []int32{d}
		case policy.EncUint:
			d := add(digitClass, i, last)
			loop(d)
			last = []int32{d}
		}
	}
	a.final = make([]bool, len(a.class))
	for _, x := range last {
		a.final[x] = true
	}
	return a
}

// search finds a shortest key accepted by both a and b. With distinct (a and
// b are then the same automaton), the two runs must differ somewhere: the key
// has two splits. It returns the key and, per byte, the state of each run.
func search(a, b *automaton, distinct bool) (key []byte, runA, runB []int32, found bool) {
	na, nb := int32(len(a.class)), int32(len(b.class))
	// A product state (pa, pb, diverged) is one index; parent links each
	// reached state to the one it was reached from. The byte read to enter a
	// state is fixed by the state itself: one in class[pa] ∩ class[pb].
	index := func(pa, pb int32, div bool) int32 {
		i := (pa*nb + pb) * 2
		if div {
			i++
		}
		return i
	}
	scratch := scratchPool.Get().(*searchScratch)
	defer scratchPool.Put(scratch)
	n := int(na * nb * 2)
	if cap(scratch.parent) < n {
		scratch.parent = make([]int32, n)
	}
	parent := scratch.parent[:n]
	for i := range parent {
		parent[i] = -1
	}
	start := index(0, 0, false)
	parent[start] = start
	queue := append(scratch.queue[:0], start)
	defer func() { scratch.queue = queue[:0] }()
	for head := 0; head < len(queue); head++ {
		cur := queue[head]
		div := cur%2 == 1
		pa, pb := cur/2/nb, cur/2%nb
		if a.final[pa] && b.final[pb] && (div || !distinct) {
			for s := cur; s != start; s = parent[s] {
				sa, sb := s/2/nb, s/2%nb
				key = append(key, a.class[sa].and(b.class[sb]).pick())
				runA = append(runA, sa)
				runB = append(runB, sb)
			}
			reverse(key)
			reverse(runA)
			reverse(runB)
			return key, runA, runB, true
		}
		for _, xa := range a.follow[pa] {
			for _, xb := range b.follow[pb] {
				if a.class[xa].and(b.class[xb]).isEmpty() {
					continue
				}
				next := index(xa, xb, div || (distinct && xa != xb))
				if parent[next] >= 0 {
					continue
				}
				parent[next] = cur
				queue = append(queue, next)
			}
		}
	}
	return nil, nil, nil, false
}

// searchScratch is the memory of one search, reused by the next.
type searchScratch struct {
	parent, queue []int32
}

var scratchPool = sync.Pool{New: func() any { return new(searchScratch) }}

func reverse[T any](s []T) {
	for i, j := 0, len(s)-1; i < j; i, j = i+1, j-1 {
		s[i], s[j] = s[j], s[i]
	}
}

// adjacentParams returns the first two parameters with nothing between them.
// Such a pair is always ambiguous ("12" is 1,2 or 12,"" or ...), and the
// search below would be slow on a long run of them, so it is caught first.
func adjacentParams(segs []Segment) (first, second string, found bool) {
	for i := 1; i < len(segs); i++ {
		if segs[i-1].IsParam() && segs[i].IsParam() {
			return segs[i-1].Param, segs[i].Param, true
		}
	}
	return "", "", false
}

// ambiguity reports whether some key of the pattern splits into parameter
// values in two ways. It returns such a key and the parameters whose values
// differ between the two splits, in pattern order.
func ambiguity(segs []Segment) (key string, params []string, ambiguous bool) {
	a := buildAutomaton(segs, false)
	k, ra, rb, found := search(a, a, true)
	if !found {
		return "", nil, false
	}
	// Prefer an example without empty strings, if there is one.
	p := buildAutomaton(segs, true)
	if pk, pa, pb, ok := search(p, p, true); ok {
		a, k, ra, rb = p, pk, pa, pb
	}
	return string(k), differingParams(segs, a, k, ra, rb), true
}

// differingParams replays two runs over key and names the parameters that
// got different values.
func differingParams(segs []Segment, a *automaton, key []byte, runA, runB []int32) []string {
	values := func(run []int32) map[int]string {
		v := map[int]string{}
		for i, st := range run {
			if s := a.seg[st]; segs[s].IsParam() {
				v[s] += string(key[i])
			}
		}
		return v
	}
	va, vb := values(runA), values(runB)
	var names []string
	for i, s := range segs {
		if s.IsParam() && va[i] != vb[i] {
			names = append(names, s.Param)
		}
	}
	return names
}

// overlap reports whether two patterns can produce the same key, and returns
// the shortest such key (preferring one without empty string parameters).
func overlap(x, y []Segment) (key string, found bool) {
	return newCompiled(x).overlap(newCompiled(y))
}

// compiled is a pattern with its automata, built once for all the pairs it
// is checked in.
type compiled struct {
	segs     []Segment
	full     *automaton // the key language
	nonEmpty *automaton // its sub-language without empty strings; built when needed
}

func newCompiled(segs []Segment) *compiled {
	return &compiled{segs: segs, full: buildAutomaton(segs, false)}
}

func (c *compiled) pretty() *automaton {
	if c.nonEmpty == nil {
		c.nonEmpty = buildAutomaton(c.segs, true)
	}
	return c.nonEmpty
}

func (c *compiled) overlap(o *compiled) (key string, found bool) {
	if !edgesAgree(c.segs, o.segs) {
		return "", false
	}
	k, _, _, found := search(c.full, o.full, false)
	if !found {
		return "", false
	}
	// Prefer an example without empty strings, if there is one.
	if pk, _, _, ok := search(c.pretty(), o.pretty(), false); ok {
		k = pk
	}
	return string(k), true
}

// edgesAgree is a quick filter: patterns whose leading literals (or trailing
// literals) differ within their common length cannot share a key.
func edgesAgree(x, y []Segment) bool {
	lead := func(s []Segment) string {
		if len(s) > 0 && !s[0].IsParam() {
			return s[0].Literal
		}
		return ""
	}
	trail := func(s []Segment) string {
		if n := len(s); n > 0 && !s[n-1].IsParam() {
			return s[n-1].Literal
		}
		return ""
	}
	// A pattern that is one literal is both; compare whole keys then.
	lx, ly := lead(x), lead(y)
	n := min(len(lx), len(ly))
	if lx[:n] != ly[:n] {
		return false
	}
	tx, ty := trail(x), trail(y)
	n = min(len(tx), len(ty))
	return tx[len(tx)-n:] == ty[len(ty)-n:]
}
