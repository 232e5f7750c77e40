package rediswire

import (
	"testing"
)

// Int boxes the number it is given, whatever other numbers share its slot,
// and a number used again costs no allocation.
func TestInt(t *testing.T) {
	for round := range 3 {
		for n := int64(-600); n < 5000; n += 7 {
			if got := Int(n * int64(round+1)); got != any(n*int64(round+1)) {
				t.Fatalf("Int(%d) = %v", n*int64(round+1), got)
			}
		}
	}
	const ttl = 10000
	Int(ttl)
	if a := testing.AllocsPerRun(100, func() {
		if Int(ttl) != any(int64(ttl)) {
			t.Fatal("wrong box")
		}
	}); a != 0 {
		t.Fatalf("Int(%d) again: %v allocations, want 0", ttl, a)
	}
}
