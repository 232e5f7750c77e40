package main

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/lockkit/lockkit/examples/internal/exampletest"
)

var resultRE = regexp.MustCompile(`(?m)^partner: (\d+) calls served, (\d+) refused; at most (\d+) in flight at once$`)

// On the embedded default: every call is served, none refused, never more
// than the three permits in flight, and the permits were used together (more
// than one in flight), so the semaphore is not a mutex.
func TestPartnerEmbedded(t *testing.T) {
	out := exampletest.Embedded(t, "lockkit-example-partner", run)
	exampletest.CheckEmbeddedNotice(t, out)
	m := resultRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no result line:\n%s", out)
	}
	served, refused, most := atoi(t, m[1]), atoi(t, m[2]), atoi(t, m[3])
	if served != 36 || refused != 0 {
		t.Errorf("served %d, refused %d; want 36 and 0:\n%s", served, refused, out)
	}
	if most > 3 || most < 2 {
		t.Errorf("at most %d in flight; want 2 or 3 (never over the 3 permits, and more than one at once):\n%s", most, out)
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
