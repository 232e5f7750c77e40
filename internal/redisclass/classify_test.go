package redisclass

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/circuit"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/redis/go-redis/v9"
)

// classifyCase produces one real error and says how it must be classified.
type classifyCase struct {
	name string
	// produce returns the error and the caller's ctx to classify it with.
	produce func(t *testing.T) (error, context.Context)
	// check fails the test when produce did not yield the error the case is
	// about (a READONLY case that got a refused connection would pass for
	// the wrong reason).
	check func(t *testing.T, err error)
	want  circuit.Outcome
}

// TestClassifyRealErrors classifies errors obtained from real redis-server
// processes, real sockets and real go-redis clients.
func TestClassifyRealErrors(t *testing.T) {
	shared := testserver.StartRedis(t)
	sc := shared.Client(t)
	bg := context.Background()

	cases := []classifyCase{
		{
			name: "nil error",
			produce: func(t *testing.T) (error, context.Context) {
				return sc.Set(bg, key(t), "v", 0).Err(), bg
			},
			check: wantNil,
			want:  Success,
		},
		{
			name: "redis.Nil (contention: key absent)",
			produce: func(t *testing.T) (error, context.Context) {
				return sc.Get(bg, key(t)).Err(), bg
			},
			check: func(t *testing.T, err error) {
				if err != redis.Nil {
					t.Fatalf("got %v, want redis.Nil", err)
				}
			},
			want: Success,
		},
		{
			name: "redis.Nil wrapped",
			produce: func(t *testing.T) (error, context.Context) {
				return fmt.Errorf("acquire: %w", sc.Get(bg, key(t)).Err()), bg
			},
			check: func(t *testing.T, err error) {
				if !errors.Is(err, redis.Nil) {
					t.Fatalf("got %v, want wrapped redis.Nil", err)
				}
			},
			want: Success,
		},
		{
			name: "NOSCRIPT from EVALSHA of an unknown sha",
			produce: func(t *testing.T) (error, context.Context) {
				return sc.EvalSha(bg, strings.Repeat("f", 40), []string{key(t)}).Err(), bg
			},
			check: wantPrefix("NOSCRIPT "),
			want:  Success,
		},
		{
			name: "WRONGTYPE",
			produce: func(t *testing.T) (error, context.Context) {
				k := key(t)
				if err := sc.LPush(bg, k, "x").Err(); err != nil {
					t.Fatal(err)
				}
				return sc.Get(bg, k).Err(), bg
			},
			check: wantPrefix("WRONGTYPE "),
			want:  Success,
		},
		{
			name: "BUSYKEY is not BUSY",
			produce: func(t *testing.T) (error, context.Context) {
				k := key(t)
				if err := sc.Set(bg, k, "v", 0).Err(); err != nil {
					t.Fatal(err)
				}
				dump, err := sc.Dump(bg, k).Result()
				if err != nil {
					t.Fatal(err)
				}
				return sc.Restore(bg, k, 0, dump).Err(), bg
			},
			check: wantPrefix("BUSYKEY "),
			want:  Success,
		},
		{
			name: "unknown command inside a script",
			produce: func(t *testing.T) (error, context.Context) {
				return sc.Eval(bg, "return redis.call('NOSUCHCOMMAND')", nil).Err(), bg
			},
			check: wantPrefix("ERR "),
			want:  Success,
		},
		{
			name: "Redis 6 style script error wrapping OOM",
			produce: func(t *testing.T) (error, context.Context) {
				return sc.Eval(bg, `return redis.error_reply("ERR Error running script (call to f_0): @user_script:1: -OOM command not allowed when used memory > 'maxmemory'.")`, nil).Err(), bg
			},
			check: wantPrefix("ERR Error running script"),
			want:  Failure,
		},
		{
			name: "Redis 6 style script error wrapping BUSYKEY",
			produce: func(t *testing.T) (error, context.Context) {
				return sc.Eval(bg, `return redis.error_reply("ERR Error running script (call to f_0): @user_script:1: -BUSYKEY Target key name already exists.")`, nil).Err(), bg
			},
			check: wantPrefix("ERR Error running script"),
			want:  Success,
		},
		{
			name: "READONLY from a replica",
			produce: func(t *testing.T) (error, context.Context) {
				r := startOrphanReplica(t)
				return r.Client(t).Set(bg, key(t), "v", 0).Err(), bg
			},
			check: wantPrefix("READONLY "),
			want:  Failure,
		},
		{
			name: "READONLY from a script on a replica, wrapped",
			produce: func(t *testing.T) (error, context.Context) {
				r := startOrphanReplica(t)
				err := r.Client(t).Eval(bg, "return redis.call('SET', KEYS[1], 'v')", []string{key(t)}).Err()
				return fmt.Errorf("lockkit: acquire: %w", err), bg
			},
			check: wantContains("READONLY "),
			want:  Failure,
		},
		{
			name: "MASTERDOWN from a replica that serves no stale data",
			produce: func(t *testing.T) (error, context.Context) {
				c := startOrphanReplica(t).Client(t)
				if err := c.ConfigSet(bg, "replica-serve-stale-data", "no").Err(); err != nil {
					t.Fatal(err)
				}
				return c.Get(bg, key(t)).Err(), bg
			},
			check: wantPrefix("MASTERDOWN "),
			want:  Failure,
		},
		{
			name: "CLUSTERDOWN from a cluster node with no slots",
			produce: func(t *testing.T) (error, context.Context) {
				r, _ := startClusterNode(t)
				return r.Client(t).Get(bg, key(t)).Err(), bg
			},
			check: wantPrefix("CLUSTERDOWN "),
			want:  Failure,
		},
		{
			name:    "TRYAGAIN from a multi-key command on a migrating slot",
			produce: produceTryAgain,
			check:   wantPrefix("TRYAGAIN "),
			want:    Ignored, // a resharding, not a sick node: it must not open a healthy master's breaker
		},
		{
			name:    "BUSY while a script runs past the busy threshold",
			produce: produceBusy,
			check:   wantPrefix("BUSY "),
			want:    Failure,
		},
		{
			name: "NOREPLICAS when min-replicas-to-write is unmet",
			produce: func(t *testing.T) (error, context.Context) {
				r := testserver.StartRedis(t, testserver.WithArgs("--min-replicas-to-write", "1"))
				return r.Client(t).Set(bg, key(t), "v", 0).Err(), bg
			},
			check: wantPrefix("NOREPLICAS "),
			want:  Failure,
		},
		{
			name: "OOM at maxmemory with noeviction",
			produce: func(t *testing.T) (error, context.Context) {
				r := testserver.StartRedis(t, testserver.WithArgs("--maxmemory", "1", "--maxmemory-policy", "noeviction"))
				return r.Client(t).Set(bg, key(t), "v", 0).Err(), bg
			},
			check: wantPrefix("OOM "),
			want:  Failure,
		},
		{
			name:    "MISCONF after a failed background save",
			produce: produceMisconf,
			check:   wantPrefix("MISCONF "),
			want:    Failure,
		},
		{
			name:    "LOADING while the dataset loads",
			produce: produceLoading,
			check:   wantPrefix("LOADING "),
			want:    Failure,
		},
		{
			// go-redis takes the server's refusal for an answer to HELLO from a
			// server without HELLO, goes on, and fails on the closed socket:
			// through go-redis, max clients arrives as a network error.
			name: "max number of clients reached, through go-redis",
			produce: func(t *testing.T) (error, context.Context) {
				r := testserver.StartRedis(t, testserver.WithArgs("--maxclients", "1"))
				mustPing(t, r.Client(t))
				return r.Client(t).Ping(bg).Err(), bg
			},
			check: wantIs(syscall.EPIPE, syscall.ECONNRESET, io.EOF),
			want:  Failure,
		},
		{
			name: "max number of clients reached, the reply itself",
			produce: func(t *testing.T) (error, context.Context) {
				return sc.Eval(bg, `return redis.error_reply("ERR max number of clients reached")`, nil).Err(), bg
			},
			check: wantPrefix("ERR max number of clients reached"),
			want:  Failure,
		},
		{
			name: "connection refused",
			produce: func(t *testing.T) (error, context.Context) {
				// One dial, no re-send: the case classifies the error a
				// refused dial gives; the README client's retries are covered
				// by lockkit's TestRedisDownRefused.
				c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(freePort(t)), MaxRetries: -1, DialerRetries: 1})
				defer c.Close()
				return c.Ping(bg).Err(), bg
			},
			check: wantIs(syscall.ECONNREFUSED),
			want:  Failure,
		},
		{
			name: "EOF: the server closes the connection",
			produce: func(t *testing.T) (error, context.Context) {
				addr := fakeServer(t, func(c *net.TCPConn) {
					_, _ = c.Read(make([]byte, 4096)) // take the request, answer nothing
					_ = c.Close()
				})
				// No re-send, so the error is the EOF itself, not a retry's;
				// lockkit's send-once path sends lock writes the same way.
				c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
				defer c.Close()
				return c.Ping(bg).Err(), bg
			},
			check: wantIs(io.EOF),
			want:  Failure,
		},
		{
			// go-redis reports a reset during its handshake as EOF, so this
			// one is read from a plain net.Conn.
			name: "connection reset by the server",
			produce: func(t *testing.T) (error, context.Context) {
				addr := fakeServer(t, func(c *net.TCPConn) {
					// Closing with the request unread makes the kernel send RST.
					time.Sleep(50 * time.Millisecond)
					_ = c.SetLinger(0)
					_ = c.Close()
				})
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				if _, err := c.Write([]byte("PING\r\n")); err != nil {
					t.Fatal(err)
				}
				_, err = c.Read(make([]byte, 16))
				return err, bg
			},
			check: wantIs(syscall.ECONNRESET),
			want:  Failure,
		},
		{
			name: "read timeout against a stopped server",
			produce: func(t *testing.T) (error, context.Context) {
				r := testserver.StartRedis(t)
				c := r.Client(t, func(o *redis.Options) {
					o.ReadTimeout = 100 * time.Millisecond
					o.ContextTimeoutEnabled = false
				})
				mustPing(t, c)
				r.Pause(t)
				return c.Get(bg, key(t)).Err(), bg
			},
			check: wantTimeout,
			want:  Failure,
		},
		{
			name: "per-command ctx timeout, caller still waiting",
			produce: func(t *testing.T) (error, context.Context) {
				r := testserver.StartRedis(t)
				c := r.Client(t, func(o *redis.Options) {
					o.ReadTimeout = 5 * time.Second
					o.ContextTimeoutEnabled = true
				})
				mustPing(t, c)
				r.Pause(t)
				caller, cancel := context.WithCancel(bg)
				t.Cleanup(cancel)
				cmd, cancelCmd := context.WithTimeout(caller, 100*time.Millisecond)
				defer cancelCmd()
				return c.Get(cmd, key(t)).Err(), caller
			},
			check: wantTimeout,
			want:  Failure,
		},
		{
			name: "the caller's own deadline passes",
			produce: func(t *testing.T) (error, context.Context) {
				r := testserver.StartRedis(t)
				c := r.Client(t, func(o *redis.Options) {
					o.ReadTimeout = 5 * time.Second
					o.ContextTimeoutEnabled = true
				})
				mustPing(t, c)
				r.Pause(t)
				caller, cancel := context.WithTimeout(bg, 100*time.Millisecond)
				t.Cleanup(cancel)
				return c.Get(caller, key(t)).Err(), caller
			},
			check: wantTimeout,
			want:  Ignored,
		},
		{
			name: "the caller cancels, then the read times out",
			produce: func(t *testing.T) (error, context.Context) {
				r := testserver.StartRedis(t)
				c := r.Client(t, func(o *redis.Options) {
					o.ReadTimeout = 300 * time.Millisecond
					o.ContextTimeoutEnabled = true // a cancel-only ctx still does not stop a read
					// No re-send: this case is the read timeout's own error; a
					// retry would return the caller's cancellation instead
					// (the case "the caller's ctx is already cancelled").
					o.MaxRetries = -1
				})
				mustPing(t, c)
				r.Pause(t)
				caller, cancel := context.WithCancel(bg)
				time.AfterFunc(50*time.Millisecond, cancel)
				return c.Get(caller, key(t)).Err(), caller
			},
			check: wantTimeout,
			want:  Ignored,
		},
		{
			name: "the caller's ctx is already cancelled",
			produce: func(t *testing.T) (error, context.Context) {
				caller, cancel := context.WithCancel(bg)
				cancel()
				return sc.Get(caller, key(t)).Err(), caller
			},
			check: wantIs(context.Canceled),
			want:  Ignored,
		},
		{
			name: "a cancellation that is not the caller's",
			produce: func(t *testing.T) (error, context.Context) {
				other, cancel := context.WithCancel(bg)
				cancel()
				return sc.Get(other, key(t)).Err(), bg
			},
			check: wantIs(context.Canceled),
			want:  Ignored,
		},
		{
			name: "the caller's ctx ended with a cause, returned by op",
			produce: func(t *testing.T) (error, context.Context) {
				lost := errors.New("lease lost")
				caller, cancel := context.WithCancelCause(bg)
				cancel(lost)
				return fmt.Errorf("renew: %w", context.Cause(caller)), caller
			},
			check: func(t *testing.T, err error) {
				if errors.Is(err, context.Canceled) {
					t.Fatalf("%v should carry the cause only", err)
				}
			},
			want: Ignored,
		},
		{
			name: "connection pool timeout",
			produce: func(t *testing.T) (error, context.Context) {
				c := shared.Client(t, func(o *redis.Options) {
					o.PoolSize = 1
					o.PoolTimeout = 100 * time.Millisecond
				})
				k := key(t)
				blocked := make(chan error, 1)
				go func() { blocked <- c.BLPop(bg, 10*time.Second, k).Err() }()
				waitFor(t, "BLPOP to block", func() bool {
					info, err := sc.Info(bg, "clients").Result()
					return err == nil && strings.Contains(info, "blocked_clients:1")
				})
				err := c.Get(bg, key(t)).Err()
				if err := sc.LPush(bg, k, "x").Err(); err != nil {
					t.Fatal(err)
				}
				if err := <-blocked; err != nil {
					t.Fatalf("BLPOP: %v", err)
				}
				return err, bg
			},
			check: wantIs(redis.ErrPoolTimeout),
			want:  Failure,
		},
		{
			name: "client closed by this process",
			produce: func(t *testing.T) (error, context.Context) {
				c := shared.Client(t)
				_ = c.Close()
				return c.Get(bg, key(t)).Err(), bg
			},
			check: wantIs(redis.ErrClosed),
			want:  Ignored,
		},
	}

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err, callerCtx := tc.produce(t)
			t.Logf("error: %T %v", err, err)
			tc.check(t, err)
			if got := Classify(err, callerCtx); got != tc.want {
				t.Errorf("Classify(%q) = %v, want %v", err, got, tc.want)
			}
		})
	}
}

func produceTryAgain(t *testing.T) (error, context.Context) {
	ctx := context.Background()
	a, _ := startClusterNode(t)
	b, bBus := startClusterNode(t)
	ac, bc := a.Client(t), b.Client(t)
	bID, err := bc.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatal(err)
	}
	if err := ac.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatal(err)
	}
	if err := ac.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", b.Port(), bBus).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "node A to know node B", func() bool {
		nodes, err := ac.ClusterNodes(ctx).Result()
		return err == nil && strings.Contains(nodes, bID) && !strings.Contains(nodes, "handshake")
	})
	k1, k2 := "{tryagain}a", "{tryagain}b"
	waitFor(t, "node A to serve writes", func() bool { return ac.Set(ctx, k1, "v", 0).Err() == nil })
	slot, err := ac.ClusterKeySlot(ctx, k1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := ac.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", bID).Err(); err != nil {
		t.Fatal(err)
	}
	// k1 is still here, k2 is not: a multi-key command cannot be served.
	return ac.MGet(ctx, k1, k2).Err(), ctx
}

func produceBusy(t *testing.T) (error, context.Context) {
	ctx := context.Background()
	r := testserver.StartRedis(t, testserver.WithArgs("--busy-reply-threshold", "50"))
	runner := r.Client(t, func(o *redis.Options) { o.ReadTimeout = 10 * time.Second })
	other := r.Client(t)
	mustPing(t, other)
	done := make(chan error, 1)
	go func() { done <- runner.Eval(ctx, "while true do end", nil).Err() }()
	var busy error
	waitFor(t, "a BUSY reply", func() bool {
		busy = other.Ping(ctx).Err()
		return busy != nil && strings.HasPrefix(busy.Error(), "BUSY ")
	})
	if err := other.ScriptKill(ctx).Err(); err != nil {
		t.Fatalf("SCRIPT KILL: %v", err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the busy script did not end after SCRIPT KILL")
	}
	return busy, ctx
}

func produceMisconf(t *testing.T) (error, context.Context) {
	ctx := context.Background()
	r := testserver.StartRedis(t, testserver.WithArgs("--save", "3600 1",
		"--stop-writes-on-bgsave-error", "yes", "--enable-protected-configs", "local"))
	c := r.Client(t)
	// Without save points again, the server can shut down without saving.
	t.Cleanup(func() { _ = c.ConfigSet(ctx, "save", "").Err() })
	// Move the server into a directory, then remove it: the server cannot
	// create its RDB temp file there, even as root.
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "dir", dir).Err(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := c.BgSave(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the background save to fail", func() bool {
		info, err := c.Info(ctx, "persistence").Result()
		return err == nil && strings.Contains(info, "rdb_last_bgsave_status:err") &&
			strings.Contains(info, "rdb_bgsave_in_progress:0")
	})
	return c.Set(ctx, key(t), "v", 0).Err(), ctx
}

func produceLoading(t *testing.T) (error, context.Context) {
	ctx := context.Background()
	r := testserver.StartRedis(t)
	c := r.Client(t)
	reloader := r.Client(t, func(o *redis.Options) { o.ReadTimeout = 30 * time.Second })
	const keys = 2000
	pipe := c.Pipeline()
	for i := range keys {
		pipe.Set(ctx, "loading:"+strconv.Itoa(i), "v", 0)
	}
	pipe.ConfigSet(ctx, "key-load-delay", "1000") // µs a key: ~2s to load
	pipe.ConfigSet(ctx, "loading-process-events-interval-bytes", "1024")
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	mustPing(t, reloader)
	// DEBUG RELOAD saves and loads the dataset again; other clients are
	// answered LOADING meanwhile.
	reloaded := make(chan error, 1)
	go func() { reloaded <- reloader.Do(ctx, "DEBUG", "RELOAD").Err() }()
	var loading error
	waitFor(t, "a LOADING reply", func() bool {
		loading = c.Get(ctx, "loading:0").Err()
		return redis.IsLoadingError(loading)
	})
	if err := <-reloaded; err != nil {
		t.Fatalf("DEBUG RELOAD: %v", err)
	}
	return loading, ctx
}

// startOrphanReplica starts a replica of a master that does not exist: it
// is read-only and its link to the master is down.
func startOrphanReplica(t *testing.T) *testserver.Redis {
	return testserver.StartRedis(t, testserver.WithArgs("--replicaof", "127.0.0.1", strconv.Itoa(freePort(t))))
}

// startClusterNode starts a cluster-enabled server with no slots and
// returns it with its cluster bus port.
func startClusterNode(t *testing.T) (*testserver.Redis, int) {
	bus := freePort(t)
	r := testserver.StartRedis(t, testserver.WithArgs("--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf", "--cluster-port", strconv.Itoa(bus)))
	return r, bus
}

// freePort returns a port that was free on 127.0.0.1 a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// fakeServer listens on 127.0.0.1 and hands each connection to handle.
func fakeServer(t *testing.T, handle func(*net.TCPConn)) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go handle(c.(*net.TCPConn))
		}
	}()
	return l.Addr().String()
}

func key(t *testing.T) string { return "breaker-test:" + t.Name() }

func mustPing(t *testing.T, c *redis.Client) {
	t.Helper()
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func wantNil(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("got %v, want no error", err)
	}
}

func wantPrefix(prefix string) func(*testing.T, error) {
	return func(t *testing.T, err error) {
		t.Helper()
		var re redis.Error
		if !errors.As(err, &re) || !strings.HasPrefix(re.Error(), prefix) {
			t.Fatalf("got %T %v, want a Redis error reply starting %q", err, err, prefix)
		}
	}
}

func wantContains(s string) func(*testing.T, error) {
	return func(t *testing.T, err error) {
		t.Helper()
		var re redis.Error
		if !errors.As(err, &re) || !strings.Contains(re.Error(), s) {
			t.Fatalf("got %T %v, want a Redis error reply containing %q", err, err, s)
		}
	}
}

// wantIs accepts an error matching any of targets.
func wantIs(targets ...error) func(*testing.T, error) {
	return func(t *testing.T, err error) {
		t.Helper()
		for _, target := range targets {
			if errors.Is(err, target) {
				return
			}
		}
		t.Fatalf("got %T %v, want an error matching one of %v", err, err, targets)
	}
}

func wantTimeout(t *testing.T, err error) {
	t.Helper()
	var ne net.Error
	if !(errors.As(err, &ne) && ne.Timeout()) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %T %v, want a timeout", err, err)
	}
}

// The cases classify as the breaker does on a Redis backend: the error as
// the backend returns it, marked by Mark, sorted by circuit.Classify.
type Outcome = circuit.Outcome

const (
	Success = circuit.Success
	Failure = circuit.Failure
	Ignored = circuit.Ignored
)

func Classify(err error, ctx context.Context) Outcome { return circuit.Classify(Mark(err), ctx) }
