package goredis

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockkit/lockkit/breaker"
	"github.com/lockkit/lockkit/internal/testserver"
)

// A node that is stopped (SIGSTOP) while an acquisition is sent to it
// receives the acquire on its socket and runs it when it wakes, after the
// acquire timed out and after the give-back sent while it slept timed out
// too. The key of a lease released meanwhile (or of a failed attempt) must
// not stay there for the rest of its TTL: it is given back on that node
// until the node confirms (docs/deployments.md, Redlock: "on a node that had
// not answered yet as soon as its answer arrives"). Close waits for it, and
// names the key when its ctx ends first (docs/semantics.md, guarantee 4).
//
// The TTL is a minute, so a key that goes away within the test's bounds was
// given back, not expired. Nothing here asserts a duration: the checks wait
// for states, with generous bounds.
func TestRedlockGiveBackOnWokenNode(t *testing.T) {
	const (
		cmd     = 300 * time.Millisecond
		ttl     = time.Minute
		stopped = 2 // the node that is stopped
	)
	for _, br := range []struct {
		name     string
		failures uint32
	}{
		{"breaker opens at the first failure", 1}, // the give-back passes an open breaker
		{"breaker stays closed", 1000},
	} {
		// rig is a client over 3 nodes with warm pools (as a running
		// service's: the acquire is written on an open connection), node
		// stopped paused, and a domain on it.
		rig := func(t *testing.T) (nodes []*testserver.Redis, c *Client, l func(string) (key string, acquire func() (*Lease, error))) {
			nodes = redlockNodes(t, 3)
			c = redlockClient(t, nodes, WithCommandTimeout(cmd), WithBreaker(breaker.Settings{ConsecutiveFailures: br.failures, OpenTimeout: time.Minute}))
			d := testDomain(t, c, Policy{TTL: ttl, Renew: -1})
			for i := range 3 {
				lease, err := lockOn(d, "warm"+string(rune('a'+i))).TryAcquire(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				if err := lease.Release(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			nodes[stopped].Pause(t) // testserver resumes it at cleanup
			return nodes, c, func(id string) (string, func() (*Lease, error)) {
				lk := lockOn(d, id)
				return lk.Key(), func() (*Lease, error) { return lk.TryAcquire(t.Context()) }
			}
		}
		// take is a lease granted on the 2 nodes that run.
		take := func(t *testing.T, acquire func() (*Lease, error)) *Lease {
			t.Helper()
			lease, err := acquire()
			if err != nil {
				t.Fatalf("2 of 3 nodes up: %v", err)
			}
			return lease
		}
		// wake lets the stopped node run after its acquire and the first
		// give-back timed out (the case under test; not a bound).
		wake := func(t *testing.T, nodes []*testserver.Redis) {
			time.Sleep(3 * cmd)
			nodes[stopped].Resume(t)
		}

		t.Run(br.name+"/released lease", func(t *testing.T) {
			nodes, _, l := rig(t)
			key, acquire := l("k")
			lease := take(t, acquire)
			if err := lease.Release(t.Context()); err != nil {
				t.Fatalf("release: %v", err)
			}
			wake(t, nodes)
			waitGivenBack(t, nodes, key, lease.Token())
		})

		t.Run(br.name+"/failed attempt", func(t *testing.T) {
			nodes, _, l := rig(t)
			key, acquire := l("k")
			for _, i := range []int{0, 1} {
				rdb := nodes[i].Client(t)
				if err := rdb.Set(t.Context(), key, "other-owner", ttl).Err(); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := acquire(); !errors.Is(err, ErrNotAcquired) {
				t.Fatalf("held on 2 of 3: %v, want ErrNotAcquired", err)
			}
			wake(t, nodes)
			// The stopped node takes the key when it wakes (nobody holds it
			// there): the failed attempt's token must not keep it.
			waitGivenBack(t, nodes, key, "", "other-owner")
		})

		t.Run(br.name+"/Close waits", func(t *testing.T) {
			nodes, c, l := rig(t)
			key, acquire := l("k")
			lease := take(t, acquire)
			tok := lease.Token()
			closed := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				closed <- c.Close(ctx)
			}()
			wake(t, nodes)
			var cerr error
			select {
			case cerr = <-closed:
			case <-time.After(40 * time.Second):
				t.Fatal("Close with a 30s ctx has not returned after 40s")
			}
			if cerr != nil {
				t.Fatalf("Close = %v, want nil: the node woke well within its ctx", cerr)
			}
			// Close returned nil: no node may hold the key for the lease's
			// token, now or once the woken node has run what it received.
			if h := redlockHolders(t, nodes, key); countHolding(h, tok) > 0 {
				t.Fatalf("Close returned nil while the key is held by the closed client's token: %q", h)
			}
			time.Sleep(time.Second)
			if h := redlockHolders(t, nodes, key); countHolding(h, tok) > 0 {
				t.Fatalf("after Close returned nil, the woken node took the key for the closed client's token: %q", h)
			}
		})

		t.Run(br.name+"/Close names the key when its ctx ends", func(t *testing.T) {
			nodes, c, l := rig(t)
			key, acquire := l("k")
			lease := take(t, acquire)
			tok := lease.Token()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			cerr := c.Close(ctx) // the node stays stopped until it returns
			cancel()
			wake(t, nodes)
			if cerr == nil {
				time.Sleep(time.Second)
				t.Fatalf("Close returned nil with the stopped node's acquire not given back; holders after it woke: %q (token %s)", redlockHolders(t, nodes, key), tok)
			}
			if !strings.Contains(cerr.Error(), `"`+key+`"`) {
				t.Fatalf("Close = %v, want an error naming %q", cerr, key)
			}
		})
	}
}

// waitGivenBack waits (up to 15s, a quarter of the TTL) until no node holds
// key for token, and fails if one still does: the key was left on a node for
// its TTL. With token "", it waits until every node holds key for nobody but
// the allowed owners.
func waitGivenBack(t *testing.T, nodes []*testserver.Redis, key, token string, allowed ...string) {
	t.Helper()
	var h []string
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		h = redlockHolders(t, nodes, key)
		bad := false
		for _, v := range h {
			switch {
			case v == "<down>":
				bad = true // not answered yet: look again
			case token != "" && v == token:
				bad = true
			case token == "" && v != "" && !slices.Contains(allowed, v):
				bad = true
			}
		}
		if !bad {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is still held on a node 15s after it woke (TTL %v): %q; the token's key was not given back", key, time.Minute, h)
		}
	}
}
