package etcd_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/lockkit/lockkit/etcd"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/lockkit"
)

// TestPausedFollowerKeepsLeases: one follower of three stopped (SIGSTOP: it
// accepts connections and answers nothing, as a member stalled on its disk
// or paused with its VM) costs no lease. The cluster keeps its quorum and
// its leader, so every renewal can be served; but the client's connection to
// the stopped member stays READY, so gRPC's round-robin balancer goes on
// handing it a share of the requests, and the keep-alive stream opened on it
// stays open. A renewal whose keep-alive or key check went there waited out
// its whole command timeout, and a lease of etcd's shortest TTL (2s) could
// lose its deadline before a retry reached a live member.
//
// The keep-alive stream is put on the member to be stopped: the client
// knows only that member while the leases take their first renewal.
func TestPausedFollowerKeepsLeases(t *testing.T) {
	t.Parallel() // idle: it waits out renewals
	c := testserver.StartEtcd(t, 3)
	x := (c.Leader(t, 10*time.Second) + 1) % 3
	cli := newCliOn(t, c.Members[x].Endpoint())
	cl, err := lockkit.New(etcd.New(cli), testOptions(t)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close(ctxT(t, 10*time.Second)) })
	ctx := ctxT(t, time.Minute)
	p := lockkit.Policy{TTL: ttl}
	leases := make([]*lockkit.Lease, 3)
	for i := range leases {
		if leases[i], err = lockOf(cl, "paused", p, strconv.Itoa(i)).Acquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(ttl / 2) // each renewed once (at ttl/3), on the stream to x
	for i, l := range leases {
		if !l.Valid() {
			t.Fatalf("lease %d lost before any fault: %v", i, l.Err())
		}
	}
	cli.SetEndpoints(c.Endpoints()...)
	time.Sleep(time.Second) // the balancer connects to the other two

	s := newStoppable(t, c.Members[x])
	s.pause()
	time.Sleep(5 * ttl) // seven renewals each
	for i, l := range leases {
		if !l.Valid() {
			t.Errorf("lease %d lost while one follower of three was stopped: %v", i, l.Err())
		}
	}
	s.resume()
	for _, l := range leases {
		//lockkit-vet:ignore test: a lost lease's Release reports the loss, checked above
		_ = l.Release(ctx)
	}
}
