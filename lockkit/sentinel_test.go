package lockkit

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockkit/lockkit/breaker"
	"github.com/lockkit/lockkit/internal/holder"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/redis/go-redis/v9"
)

// failoverStream is a steady stream of Do calls on a few shared keys, from
// several clients, that counts what happens to each.
type failoverStream struct {
	granted, doubles, contended, unavailable, lost atomic.Int64
	other                                          sync.Map // error text -> count, for anything unexpected

	holders []atomic.Int32 // per key: leases inside fn right now
	// replicas are read at the end of every hold: missing[i] counts the
	// leases replica i did not have then. For the replica that gets
	// promoted, those are the leases the new primary never knew about.
	replicas   []*redis.Client
	missing    []atomic.Int64
	unreadable []atomic.Int64 // the read failed: not counted as missing
	stop       chan struct{}
	once       sync.Once
	wg         sync.WaitGroup
}

// startFailoverStream runs workers goroutines, spread over the clients, each
// doing Do on one of keys ids with a 20ms hold, until halt.
func startFailoverStream(t *testing.T, domains []*Domain, replicas []*redis.Client, workers, keys int) *failoverStream {
	s := &failoverStream{holders: make([]atomic.Int32, keys), replicas: replicas, missing: make([]atomic.Int64, len(replicas)), unreadable: make([]atomic.Int64, len(replicas)), stop: make(chan struct{})}
	for w := range workers {
		d := domains[w%len(domains)]
		s.wg.Go(func() {
			for i := w; ; i++ {
				select {
				case <-s.stop:
					return
				default:
				}
				k := i % keys
				err := lockOn(d, "k"+strconv.Itoa(k)).Do(context.Background(), func(ctx context.Context, lease *Lease) error {
					// A lease granted while another live lease on the same
					// key is inside its fn is a double grant.
					if s.holders[k].Add(1) > 1 {
						s.doubles.Add(1)
					}
					defer s.holders[k].Add(-1)
					s.granted.Add(1)
					select {
					case <-time.After(20 * time.Millisecond):
					case <-ctx.Done():
					}
					for i, r := range s.replicas {
						rctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
						switch v, err := r.Get(rctx, lease.Key()).Result(); {
						case err == redis.Nil, err == nil && !holder.Owns(v, lease.Token()):
							s.missing[i].Add(1)
						case err != nil:
							s.unreadable[i].Add(1)
						}
						cancel()
					}
					return nil
				})
				switch {
				case err == nil:
				case errors.Is(err, ErrLockLost):
					s.lost.Add(1)
				case errors.Is(err, ErrNotAcquired):
					s.contended.Add(1)
				case errors.Is(err, ErrUnavailable):
					s.unavailable.Add(1)
				default:
					v, _ := s.other.LoadOrStore(err.Error(), new(atomic.Int64))
					v.(*atomic.Int64).Add(1)
				}
				if err != nil {
					time.Sleep(5 * time.Millisecond) // do not spin on a sick backend
				}
			}
		})
	}
	return s
}

func (s *failoverStream) halt() {
	s.once.Do(func() { close(s.stop) })
	s.wg.Wait()
}

// waitGranted waits until n more leases were granted, or fails after limit.
func (s *failoverStream) waitGranted(t *testing.T, n int64, limit time.Duration, what string) {
	t.Helper()
	want := s.granted.Load() + n
	deadline := time.Now().Add(limit)
	for s.granted.Load() < want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: only %d of %d more leases granted within %v (unavailable %d, contended %d)",
				what, n-(want-s.granted.Load()), n, limit, s.unavailable.Load(), s.contended.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sentinelCase is one failover scenario.
type sentinelCase struct {
	name      string
	wait      int // Policy.Replicas
	replicas  int // replicas in the topology
	recoverBy time.Duration
}

// A SENTINEL FAILOVER in the middle of a steady stream of acquisitions (4
// clients × 2 goroutines on 4 keys, 20ms holds), without WAIT and with WAIT
// for one replica, on a primary with two replicas. Every error is
// ErrUnavailable or ErrNotAcquired (or ErrLockLost for a lease lost during
// its hold, counted apart); the clients move to the new primary by
// themselves; and the test reports how many leases were granted twice, and
// how many the new primary never knew about. Those figures are measured, not
// asserted: they depend on timing (see .notes/README_deployments.md).
func TestSentinelFailover(t *testing.T) {
	for _, tc := range []sentinelCase{
		{"no WAIT, 2 replicas", 0, 2, 10 * time.Second},
		{"WAIT 1, 2 replicas", 1, 2, 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) { runSentinelFailover(t, tc) })
	}
}

// The same with a single replica and WAIT 1: the new primary has no replica
// until sentinel turns the old primary into one, on its next INFO round
// (every 10s), so WAIT 1 cannot be met until then: about 10s without a lease.
func TestSentinelFailoverSingleReplicaWait(t *testing.T) {
	runSentinelFailover(t, sentinelCase{"WAIT 1, 1 replica", 1, 1, 15 * time.Second})
}

func runSentinelFailover(t *testing.T, tc sentinelCase) {
	primary := testserver.StartRedis(t)
	var replicas []*testserver.Redis
	var readers []*redis.Client
	for range tc.replicas {
		r := testserver.StartReplica(t, primary)
		replicas = append(replicas, r)
		readers = append(readers, r.Client(t))
	}
	replicasInSync(t, primary, tc.replicas)
	sentinel := testserver.StartSentinel(t, primary, "locks", 1)

	policy := Policy{
		TTL:            2 * time.Second,
		Replicas:       tc.wait,
		ReplicaTimeout: 50 * time.Millisecond,
		Retry:          Retry{Attempts: 20, Initial: 2 * time.Millisecond, Max: 20 * time.Millisecond, MaxWait: 300 * time.Millisecond},
	}
	var domains []*Domain
	for range 4 {
		c := newClientOver(t, sentinel.FailoverClient(t),
			WithCommandTimeout(200*time.Millisecond),
			WithBreaker(breaker.Settings{OpenTimeout: 100 * time.Millisecond}))
		domains = append(domains, testDomain(t, c, policy))
	}

	// The clients drop their connections to the old primary when the
	// sentinel announces +switch-master, at the end of the failover
	// (after the other replicas were reconfigured). Until then the old
	// primary is still a master and their pooled connections still
	// write to it.
	switched := make(chan time.Time, 1)
	sub := sentinel.Client(t).Subscribe(t.Context(), "+switch-master")
	defer sub.Close()
	if _, err := sub.Receive(t.Context()); err != nil {
		t.Fatal(err)
	}
	go func() {
		if _, err := sub.ReceiveMessage(context.Background()); err == nil {
			switched <- time.Now()
		}
	}()

	s := startFailoverStream(t, domains, readers, 8, 4)
	defer s.halt()
	s.waitGranted(t, 50, 10*time.Second, "before the failover")
	before := s.granted.Load()
	for i := range s.missing {
		if n := s.missing[i].Load(); n != 0 {
			t.Fatalf("before the failover, replica %d missed %d held leases", i, n)
		}
	}

	start := time.Now()
	newMaster := sentinel.Failover(t)
	promoted := time.Since(start)
	var switchedAfter time.Duration
	select {
	case at := <-switched:
		switchedAfter = at.Sub(start)
	case <-time.After(15 * time.Second):
		t.Fatal("no +switch-master within 15s of the failover")
	}
	s.waitGranted(t, 100, tc.recoverBy, "after +switch-master")
	recovered := time.Since(start)
	s.halt()

	promotedIdx := slices.IndexFunc(replicas, func(r *testserver.Redis) bool { return r.Addr() == newMaster })
	if promotedIdx < 0 {
		t.Fatalf("new master %s is not one of the replicas", newMaster)
	}
	t.Logf("%s: %d leases granted (%d before the failover); %d granted twice; %d unknown to the new primary (%d unchecked); errors: %d unavailable, %d not acquired, %d leases lost during their hold; replica promoted after %v, +switch-master after %v, 100 more leases by %v",
		tc.name, s.granted.Load(), before, s.doubles.Load(), s.missing[promotedIdx].Load(), s.unreadable[promotedIdx].Load(),
		s.unavailable.Load(), s.contended.Load(), s.lost.Load(),
		promoted.Round(time.Millisecond), switchedAfter.Round(time.Millisecond), recovered.Round(time.Millisecond))
	s.other.Range(func(k, v any) bool {
		t.Errorf("unexpected error (%d times): %s", v.(*atomic.Int64).Load(), k)
		return true
	})
	// Every client now writes to the new primary.
	for i, d := range domains {
		lease, err := lockOn(d, "after"+strconv.Itoa(i)).Acquire(t.Context())
		if err != nil {
			t.Fatalf("client %d: acquire after recovery: %v", i, err)
		}
		if got := readers[promotedIdx].Get(t.Context(), lease.Key()).Val(); !holder.Owns(got, lease.Token()) {
			t.Fatalf("client %d: the new primary %s holds %q for its lease, want the lease's token", i, newMaster, got)
		}
		lease.Release(t.Context())
	}
}
