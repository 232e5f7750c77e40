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
	"github.com/lockkit/lockkit/internal/testserver"
)

func TestClusterColdClientBreakerOpenFailsFast(t *testing.T) {
	cl := testserver.StartCluster(t, 3)
	for _, n := range cl.Nodes() {
		n.Pause(t)
	}
	rec := &transitionLog{}
	c := newClientOver(t, cl.Client(t), WithCommandTimeout(200*time.Millisecond),
		WithBreaker(breaker.Settings{ConsecutiveFailures: 3, OpenTimeout: time.Minute, OnStateChange: rec.record}))
	d := testDomain(t, c, Policy{TTL: 2 * time.Second})
	for i := range 3 { // trip it
		_, err := lockOn(d, "k").TryAcquire(t.Context())
		t.Logf("tripping %d: %v", i, err)
	}
	if rec.current() != breaker.StateOpen {
		t.Fatalf("breaker not open: %s", rec.String())
	}
	start := time.Now()
	_, err := lockOn(d, "k").TryAcquire(t.Context())
	took := time.Since(start)
	if !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("breaker open: %v", err)
	}
	if took > 200*time.Millisecond {
		t.Fatalf("refused by the open breaker only after %v (command timeout 200ms): the slot lookup runs before the breaker", took)
	}
}
