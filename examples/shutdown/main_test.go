package main

import (
	"strings"
	"testing"

	"github.com/lockkit/lockkit/examples/internal/exampletest"
)

// Against a real redis-server: the three bookings in flight at SIGTERM
// finish, the job's lease is released by Close, nothing is left held. run
// returns an error (failing the test) when any of those facts is false.
func TestShutdownOnRedis(t *testing.T) {
	out := exampletest.OnRedis(t, "lockkit-example-shutdown", run)
	exampletest.CheckRealRedis(t, out)
	checkShutdown(t, out)
}

func TestShutdownEmbedded(t *testing.T) {
	out := exampletest.Embedded(t, "lockkit-example-shutdown", run)
	exampletest.CheckEmbeddedNotice(t, out)
	checkShutdown(t, out)
}

func checkShutdown(t *testing.T, out string) {
	t.Helper()
	// The order of the recipe, as it ran.
	order := []string{
		"signal    SIGTERM while 3 bookings are in flight",
		"booked, releasing",
		"shutdown  1. http.Server.Shutdown returned",
		"shutdown  2. background jobs stopped",
		"shutdown  3. lockkit Client closed",
		"result: 3 of 3 bookings in flight finished",
	}
	at := 0
	for _, s := range order {
		i := strings.Index(out[at:], s)
		if i < 0 {
			t.Fatalf("%q missing or out of order in:\n%s", s, out)
		}
		at += i
	}
	if n := strings.Count(out, "booked, releasing"); n != 3 {
		t.Errorf("%d bookings finished, want 3", n)
	}
}
