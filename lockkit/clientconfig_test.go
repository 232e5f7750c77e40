package lockkit

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockkit/lockkit/goredis/autopipeline"
	"github.com/lockkit/lockkit/internal/rediswire"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/redis/go-redis/v9"
)

// stallBound is how long past the command timeout a call on a paused server
// may take: generous for a loaded 2-core machine, far below go-redis's own
// 3s read timeout and its retries (the history: 8.003s).
const stallBound = 1500 * time.Millisecond

// The go-redis clients users build, as the README and docs/deployments.md
// build them (no MaxRetries, no ContextTimeoutEnabled), and with retries
// raised: on a paused server no acquire is re-sent behind lockkit's back, the
// call is ErrUnavailable (never contention), and the key it may have taken is
// given back. The call returns within the command timeout whatever the
// client's settings (before: within its ReadTimeout, 3s, or a Cluster
// client's DialTimeout, 5s, unless it had ContextTimeoutEnabled).
func TestStalledServerUserClients(t *testing.T) {
	const cmdTimeout = 300 * time.Millisecond
	// A client as go-redis makes it by default, on a server of its own.
	plain := func(t *testing.T) (redis.UniversalClient, func(), func(), func(context.Context, string) []string) {
		r := testserver.StartRedis(t)
		rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
		t.Cleanup(func() { rdb.Close() })
		return rdb, func() { r.Pause(t) }, func() { r.Resume(t) }, keysOn(r.Client(t))
	}
	cases := []struct {
		name  string
		autop bool // the lock commands on the client's autopipeliner (autopipeline.New)
		setup func(t *testing.T) (rdb redis.UniversalClient, pause, resume func(), keys func(ctx context.Context, pattern string) []string)
	}{
		{"default", false, plain},
		{"ParseURL", false, func(t *testing.T) (redis.UniversalClient, func(), func(), func(context.Context, string) []string) {
			r := testserver.StartRedis(t)
			o, err := redis.ParseURL("redis://" + r.Addr() + "/0")
			if err != nil {
				t.Fatal(err)
			}
			rdb := redis.NewClient(o)
			t.Cleanup(func() { rdb.Close() })
			return rdb, func() { r.Pause(t) }, func() { r.Resume(t) }, keysOn(r.Client(t))
		}},
		{"MaxRetries5", false, func(t *testing.T) (redis.UniversalClient, func(), func(), func(context.Context, string) []string) {
			r := testserver.StartRedis(t)
			rdb := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: 5})
			t.Cleanup(func() { rdb.Close() })
			return rdb, func() { r.Pause(t) }, func() { r.Resume(t) }, keysOn(r.Client(t))
		}},
		{"ContextTimeoutEnabled", false, func(t *testing.T) (redis.UniversalClient, func(), func(), func(context.Context, string) []string) {
			r := testserver.StartRedis(t)
			rdb := redis.NewClient(&redis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true})
			t.Cleanup(func() { rdb.Close() })
			return rdb, func() { r.Pause(t) }, func() { r.Resume(t) }, keysOn(r.Client(t))
		}},
		{"AutoPipelined", true, plain},
		{"Sentinel", false, func(t *testing.T) (redis.UniversalClient, func(), func(), func(context.Context, string) []string) {
			r := testserver.StartRedis(t)
			s := testserver.StartSentinel(t, r, "mymaster", 1)
			rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterName(), SentinelAddrs: []string{s.Addr()}})
			t.Cleanup(func() { rdb.Close() })
			return rdb, func() { r.Pause(t) }, func() { r.Resume(t) }, keysOn(r.Client(t))
		}},
		{"Cluster", false, func(t *testing.T) (redis.UniversalClient, func(), func(), func(context.Context, string) []string) {
			cl := testserver.StartCluster(t, 3)
			rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
			t.Cleanup(func() { rdb.Close() })
			check := cl.Client(t)
			pause := func() {
				for _, n := range cl.Nodes() {
					n.Pause(t)
				}
			}
			resume := func() {
				for _, n := range cl.Nodes() {
					n.Resume(t)
				}
			}
			return rdb, pause, resume, func(ctx context.Context, pattern string) []string {
				var (
					mu  sync.Mutex // ForEachMaster calls fn on every master at once
					out []string
				)
				_ = check.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
					ks, err := m.Keys(ctx, pattern).Result()
					mu.Lock()
					out = append(out, ks...)
					mu.Unlock()
					return err
				})
				return out
			}
		}},
	}
	// The setups run at once: each waits about 2 × (its ReadTimeout or
	// DialTimeout + stallBound) on a paused server of its own, mostly idle,
	// so one after another they took 108 s of the package's 413 s (ed4cd8c).
	// (t.Parallel would run only -parallel of them at once.)
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, tc := range cases {
		wg.Go(func() {
			t.Run(tc.name, func(t *testing.T) {
				rdb, pause, resume, keys := tc.setup(t)
				var c *Client
				if tc.autop {
					c = newClientOn(t, autopipeline.New(rdb.(*redis.Client)), WithCommandTimeout(cmdTimeout))
				} else {
					c = newClientOver(t, rdb, WithCommandTimeout(cmdTimeout))
				}
				// Every client is bounded by the command timeout. go-redis
				// itself bounds I/O by the ctx deadline only with
				// ContextTimeoutEnabled, otherwise by ReadTimeout (3s by
				// default) and, for a Cluster client that refreshes its
				// slot map under the stall, DialTimeout (5s): the backend
				// leaves such a command at the deadline (rediswire.Bounded).
				// The server stays paused past the client's own timeouts,
				// so that a replay queued behind the stall would run at the
				// resume.
				bound := cmdTimeout
				paused := cmdTimeout
				switch c := rdb.(type) {
				case *redis.Client:
					paused = max(paused, c.Options().ReadTimeout)
				case *redis.ClusterClient:
					paused = max(paused, c.Options().ReadTimeout, c.Options().DialTimeout)
				}
				for _, fencing := range []bool{false, true} {
					d := c.Domain(DomainSpec{Name: "stall", Prefix: "lock:" + t.Name() + ":" + map[bool]string{false: "plain", true: "fenced"}[fencing] + ":", Policy: Policy{TTL: 10 * time.Second, Fencing: fencing}})
					if d.Err() != nil {
						t.Fatal(d.Err())
					}
					// Warm the pool: the stall must hit an open connection.
					if err := lockOn(d, "warm").TryDo(t.Context(), func(context.Context, *Lease) error { return nil }); err != nil {
						t.Fatalf("warm-up: %v", err)
					}
					pause()
					start := time.Now()
					// stalledCallers at once: on a *redis.Client the first
					// rediswire.CombineLimit are sent, the rest wait for a
					// batch behind them (rediswire.Combiner); every one is
					// bounded all the same.
					var (
						errs  [stalledCallers]error
						tooks [stalledCallers]time.Duration
						all   sync.WaitGroup
					)
					for i := range stalledCallers {
						all.Go(func() {
							errs[i] = lockOn(d, "stalled"+strconv.Itoa(i)).TryDo(t.Context(), func(context.Context, *Lease) error { return nil })
							tooks[i] = time.Since(start)
						})
					}
					all.Wait()
					time.Sleep(time.Until(start.Add(paused + stallBound)))
					resume()
					for i, err := range errs {
						took := tooks[i]
						t.Logf("fencing=%v: TryDo #%d on a paused server: %v after %v", fencing, i, err, took.Round(time.Millisecond))
						if !errors.Is(err, ErrUnavailable) {
							t.Errorf("fencing=%v: TryDo #%d on a paused server = %v, want ErrUnavailable", fencing, i, err)
						}
						if took > bound+stallBound {
							t.Errorf("fencing=%v: TryDo #%d on a paused server took %v, want at most %v + %v", fencing, i, took, bound, stallBound)
						}
					}
					// The key the stalled acquire may have taken is given
					// back; poll a while (the give-back runs once the server
					// answers).
					ctx := t.Context()
					var held []string
					for range 40 {
						held = nil
						for _, k := range keys(ctx, "lock:"+t.Name()+"*") {
							if !strings.HasSuffix(k, fenceSuffix) {
								held = append(held, k)
							}
						}
						if len(held) == 0 {
							break
						}
						time.Sleep(50 * time.Millisecond)
					}
					if len(held) > 0 {
						t.Errorf("fencing=%v: 2s after the resume keys are still held by a lease nobody owns: %v", fencing, held)
					}
					for i := range stalledCallers {
						if err := lockOn(d, "stalled"+strconv.Itoa(i)).TryDo(ctx, func(context.Context, *Lease) error { return nil }); err != nil {
							t.Errorf("fencing=%v: after the resume key #%d is not free: %v", fencing, i, err)
						}
					}
				}
			})
		})
	}
}

// stalledCallers is how many TryDos TestStalledServerUserClients sends at
// once to a paused server: more than rediswire.CombineLimit, so that some
// wait for a batch.
const stalledCallers = 3 * rediswire.CombineLimit

func keysOn(rdb *redis.Client) func(context.Context, string) []string {
	return func(ctx context.Context, pattern string) []string {
		return rdb.Keys(ctx, pattern).Val()
	}
}
