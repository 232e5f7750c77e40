package zookeeper

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

// seqName is the name ZooKeeper gives a sequential child of prefix when the
// parent's cversion is seq: Java's String.format("%010d", seq), which is
// Go's.
func seqName(prefix string, seq int32) string { return fmt.Sprintf("%s%010d", prefix, seq) }

// TestSeqWrap: the parent's cversion is a signed 32-bit counter that wraps
// from 2147483647 to -2147483648 and counts up through the negatives. Names
// on both sides of the wrap are read as the server wrote them, and ordered
// by serial arithmetic: a node made later is after every live node made
// before it, whatever the signs. Before, a negative name was read as the
// magnitude after its minus sign (-2147483648..-1000000000: order reversed)
// or not as a lock node at all (-999999999..-1), so an attempt behind such
// a holder was granted.
func TestSeqWrap(t *testing.T) {
	for _, c := range []struct {
		name   string
		prefix string
		seq    int32
	}{
		{"T-0000000000", "T-", 0},
		{"T-0000000042", "T-", 42},
		{"T-2147483647", "T-", math.MaxInt32},
		{"T--2147483648", "T-", math.MinInt32},
		{"T--2147483644", "T-", -2147483644},
		{"T--1000000000", "T-", -1000000000},
		{"T--999999999", "T-", -999999999},
		{"T--000000005", "T-", -5},
		{"T--000000001", "T-", -1},
		{"~612d62-0000000007", "~612d62-", 7},
		{"~612d62--000000007", "~612d62-", -7},
		// Not lockkit's (a prefix with a '-' of its own), still ordered.
		{"a-b-0000000003", "a-b-", 3},
		{"T--0000000005", "T--", 5},
	} {
		prefix, seq, ok := parseNode(c.name)
		if !ok || prefix != c.prefix || seq != c.seq {
			t.Errorf("parseNode(%q) = %q, %d, %v; want %q, %d", c.name, prefix, seq, ok, c.prefix, c.seq)
		}
		if got := seqName(c.prefix, c.seq); got != c.name {
			t.Errorf("ZooKeeper names %q %d %q, not %q", c.prefix, c.seq, got, c.name)
		}
	}
	for _, name := range []string{
		"", "T", "T-", "T-42", "T-000000042", "T-00000000042", "T-2147483648", "T-9999999999",
		"T--2147483649", "T--00000005", "T-+000000005", "T--000000000",
		"T-00000000x1", "-0000000001", "0000000001",
	} {
		if prefix, seq, ok := parseNode(name); ok {
			t.Errorf("parseNode(%q) = %q, %d; want no lock node", name, prefix, seq)
		}
	}

	// tokenOf and isNodeOf on names from past the wrap (lost-create
	// recovery, ReadHolder's token).
	for _, tok := range []string{"5G46ATOZPROAX2SG7SRXJKHL7K", "a/b c-d", "x-0000000001", ""} {
		for _, seq := range []int32{0, 42, math.MaxInt32, math.MinInt32, -2147483644, -1000000000, -999999999, -5, -1} {
			child := seqName(tokenName(tok), seq)
			if got := tokenOf(child); got != tok {
				t.Errorf("tokenOf(%q) = %q, want %q", child, got, tok)
			}
			if !isNodeOf(child, tokenName(tok)) {
				t.Errorf("isNodeOf(%q, %q) = false", child, tokenName(tok))
			}
			if other := tokenName(tok + "Z"); isNodeOf(child, other) {
				t.Errorf("isNodeOf(%q, %q) = true", child, other)
			}
		}
	}

	// Places in the queue: own's position and predecessor, and the holder a
	// reader sees, for children listed in any order.
	for _, c := range []struct {
		own      string
		children []string
		pos      int
		pred     string
	}{
		// The reviewer's case: the holder just before the wrap, a waiter
		// after it.
		{"Q--2147483644", []string{"H-2147483645", "Q--2147483644"}, 1, "H-2147483645"},
		{"H-2147483645", []string{"H-2147483645", "Q--2147483644"}, 0, ""},
		// Both negative, small magnitudes (read as "not a lock node" before).
		{"C--000000005", []string{"C--000000005", "B--000000006"}, 1, "B--000000006"},
		{"B--000000006", []string{"C--000000005", "B--000000006"}, 0, ""},
		// Both negative, large magnitudes (read reversed before).
		{"C--2147483640", []string{"C--2147483640", "B--2147483648"}, 1, "B--2147483648"},
		{"B--2147483648", []string{"C--2147483640", "B--2147483648"}, 0, ""},
		// Negative to zero.
		{"D-0000000000", []string{"D-0000000000", "C--000000001"}, 1, "C--000000001"},
		// Across the wrap, four nodes, others' names mixed in.
		{"E--2147483647", []string{"E--2147483647", "lock", "B-2147483646", "D--2147483648", "C-2147483647", "zz"}, 3, "D--2147483648"},
		{"C-2147483647", []string{"E--2147483647", "lock", "B-2147483646", "D--2147483648", "C-2147483647", "zz"}, 1, "B-2147483646"},
		{"B-2147483646", []string{"E--2147483647", "lock", "B-2147483646", "D--2147483648", "C-2147483647", "zz"}, 0, ""},
		// Across the second sign change (-1 to 0) and far from it.
		{"G-0000000003", []string{"G-0000000003", "F--999999999", "E--000000002"}, 2, "E--000000002"},
		// No wrap at all: as before.
		{"B-0000000009", []string{"A-0000000004", "B-0000000009", "C-0000000011"}, 1, "A-0000000004"},
	} {
		for _, children := range [][]string{c.children, reversed(c.children)} {
			pos, pred := queuePlace(c.own, children)
			if pos != c.pos || pred != c.pred {
				t.Errorf("queuePlace(%q, %q) = %d, %q; want %d, %q", c.own, children, pos, pred, c.pos, c.pred)
			}
			if c.pos == 0 {
				if got := lowestNode(children); got != c.own {
					t.Errorf("lowestNode(%q) = %q, want %q", children, got, c.own)
				}
			}
		}
	}

	// A queue of 200 nodes made one after another across the wrap, listed
	// shuffled: each one's place is its rank.
	var made []string
	for i := range 200 {
		made = append(made, seqName(fmt.Sprintf("N%d-", i), int32(math.MaxInt32-100+int64(i))))
	}
	listed := slices.Clone(made)
	for i := range listed {
		j := (i * 7919) % len(listed)
		listed[i], listed[j] = listed[j], listed[i]
	}
	for i, n := range made {
		pos, pred := queuePlace(n, listed)
		want := ""
		if i > 0 {
			want = made[i-1]
		}
		if pos != i || pred != want {
			t.Errorf("queuePlace(%q) = %d, %q; want %d, %q", n, pos, pred, i, want)
		}
	}
	if got := lowestNode(listed); got != made[0] {
		t.Errorf("lowestNode = %q, want %q", got, made[0])
	}
}

func reversed(s []string) []string {
	r := slices.Clone(s)
	slices.Reverse(r)
	return r
}
