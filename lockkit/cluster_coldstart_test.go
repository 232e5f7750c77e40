package lockkit

// A Cluster client that has never loaded the slot map (started while the
// cluster hangs) must still be refused at once by an open breaker: the slot
// lookup is bounded by the command timeout and skipped while the
// whole-cluster breaker is open.

import (
	"errors"
	"testing"
	"time"

	"github.com/lockkit/lockkit/breaker"
	"github.com/lockkit/lockkit/internal/circuit"
	"github.com/lockkit/lockkit/internal/testserver"
)

func TestClusterColdClientBreakerOpenFailsFast(t *testing.T) {
	cl := testserver.StartCluster(t, 3)
	for _, n := range cl.Nodes() {
		n.Pause(t)
	}
	// A command timeout long enough that no stall of this process under a
	// loaded machine passes for one: a lookup that ran takes at least that.
	const cmdTimeout = time.Second
	const trip = 3
	rec := &transitionLog{}
	c := newClientOver(t, cl.Client(t), WithCommandTimeout(cmdTimeout),
		WithBreaker(breaker.Settings{ConsecutiveFailures: trip, OpenTimeout: time.Minute, OnStateChange: rec.record}))
	d := testDomain(t, c, Policy{TTL: 2 * time.Second})
	// Trip it. A timeout the breaker ignored as this process's own
	// starvation (a loaded machine) is not one of the failures that trip
	// it: each one takes one more attempt.
	starved0 := circuit.StarvedTimeouts()
	for i := 0; rec.current() != breaker.StateOpen; i++ {
		if ignored := int(circuit.StarvedTimeouts() - starved0); i >= trip+ignored {
			t.Fatalf("breaker not open after %d failures (%d ignored as starvation): %s", i, ignored, rec.String())
		}
		_, err := lockOn(d, "k").TryAcquire(t.Context())
		if !errors.Is(err, ErrUnavailable) || errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("tripping %d: %v, want a backend failure", i, err)
		}
		t.Logf("tripping %d: %v", i, err)
	}
	start := time.Now()
	_, err := lockOn(d, "k").TryAcquire(t.Context())
	took := time.Since(start)
	if !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("breaker open: %v", err)
	}
	if took >= cmdTimeout {
		t.Fatalf("refused by the open breaker only after %v (command timeout %v): the slot lookup runs before the breaker", took, cmdTimeout)
	}
}
