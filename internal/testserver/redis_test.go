package testserver

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

func TestRedisStartPingCleanup(t *testing.T) {
	t.Parallel()
	var pid int
	var addr string
	t.Run("server", func(t *testing.T) {
		r := StartRedis(t)
		pid, addr = r.PID(), r.Addr()
		if want := "127.0.0.1:" + strconv.Itoa(r.Port()); addr != want {
			t.Fatalf("Addr() = %q, want %q", addr, want)
		}
		if pidGone(pid) {
			t.Fatalf("pid %d does not exist while the server runs", pid)
		}
		ctx := ctxT(t, 5*time.Second)
		c1, c2 := r.Client(t), r.Client(t)
		if c1 == c2 {
			t.Fatal("Client returned the same client twice")
		}
		for _, c := range []*redis.Client{c1, c2} {
			if got, err := c.Ping(ctx).Result(); err != nil || got != "PONG" {
				t.Fatalf("PING = %q, %v", got, err)
			}
		}
		id1, _ := c1.ClientID(ctx).Result()
		id2, _ := c2.ClientID(ctx).Result()
		if id1 == id2 {
			t.Errorf("two clients share connection %d", id1)
		}
		cfg, err := c1.ConfigGet(ctx, "*").Result()
		if err != nil {
			t.Fatal(err)
		}
		for k, want := range map[string]string{
			"bind": "127.0.0.1", "save": "", "appendonly": "no", "port": strconv.Itoa(r.Port()),
			"dir": r.Dir(), "repl-diskless-sync-delay": "0",
		} {
			if cfg[k] != want {
				t.Errorf("CONFIG GET %s = %q, want %q", k, cfg[k], want)
			}
		}
	})
	assertGone(t, "redis-server", pid)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("port still taken after cleanup: %v", err)
	}
	l.Close()
}

func TestRedisStopAndRestart(t *testing.T) {
	t.Parallel()
	r := StartRedis(t)
	pid := r.PID()
	r.Stop(t)
	assertGone(t, "stopped redis-server", pid)
	r.Stop(t) // idempotent
	r.Restart(t)
	if r.PID() == pid {
		t.Fatal("Restart kept the old pid")
	}
	if err := r.Client(t).Ping(ctxT(t, 5*time.Second)).Err(); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
	// Restart of a running server stops it first.
	pid = r.PID()
	r.Restart(t)
	assertGone(t, "redis-server replaced by Restart", pid)
}

func TestRedisPauseResume(t *testing.T) {
	t.Parallel()
	r := StartRedis(t)
	c := r.Client(t)
	ctx := ctxT(t, 10*time.Second)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r.Pause(t)
	// The client has the README's options: a paused server holds a command
	// until its ctx ends (ContextTimeoutEnabled), so each call here has a 1s one.
	start := time.Now()
	gctx, cancel := context.WithTimeout(ctx, time.Second)
	err := c.Get(gctx, "k").Err()
	cancel()
	if err == nil || !isTimeout(err) {
		t.Fatalf("GET on a paused server: err = %v, want a timeout", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("GET on a paused server took %v; its ctx ends after 1s", d)
	}
	// A new connection is accepted by the kernel but not answered either.
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	err = r.Client(t).Ping(pctx).Err()
	cancel()
	if !isTimeout(err) {
		t.Fatalf("PING on a new client to a paused server: err = %v, want a timeout", err)
	}
	r.Resume(t)
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET after Resume = %q, %v", got, err)
	}
}

func TestRedisCleanupWhilePaused(t *testing.T) {
	t.Parallel()
	var pid int
	start := time.Now()
	t.Run("paused", func(t *testing.T) {
		r := StartRedis(t)
		r.Client(t).Ping(ctxT(t, 5*time.Second))
		pid = r.PID()
		r.Pause(t)
	})
	assertGone(t, "paused redis-server", pid)
	if d := time.Since(start); d >= stopGrace {
		t.Errorf("start + cleanup of a paused server took %v: it was not resumed before SIGTERM", d)
	}
}

func TestRedisKillRestartLosesData(t *testing.T) {
	t.Parallel()
	r := StartRedis(t)
	ctx := ctxT(t, 20*time.Second)
	c := r.Client(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	pid, port := r.PID(), r.Port()
	r.Kill(t)
	assertGone(t, "killed redis-server", pid)
	if err := c.Get(ctx, "k").Err(); err == nil {
		t.Fatal("GET on a killed server succeeded")
	}
	r.Restart(t)
	if r.Port() != port || r.PID() == pid {
		t.Fatalf("after Restart: port %d pid %d, before: port %d pid %d", r.Port(), r.PID(), port, pid)
	}
	if err := r.Client(t).Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET k after Kill+Restart: err = %v, want redis.Nil (data lost)", err)
	}
	// The client created before the kill recovers too (bounded: its pool may need a second
	// to redial after the failed attempts).
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := c.Ping(ctx).Err()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("old client never reconnected: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestRedisAppendOnlyKeepsDataAcrossKill(t *testing.T) {
	t.Parallel()
	r := StartRedis(t, WithAppendOnly())
	ctx := ctxT(t, 20*time.Second)
	if err := r.Client(t).Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r.Kill(t)
	r.Restart(t)
	if got, err := r.Client(t).Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET k after Kill+Restart with AOF = %q, %v; want v", got, err)
	}
}

func TestRedisWithArgs(t *testing.T) {
	t.Parallel()
	r := StartRedis(t, WithArgs("--maxmemory", "12345678", "--port", "1"))
	ctx := ctxT(t, 5*time.Second)
	cfg, err := r.Client(t).ConfigGet(ctx, "maxmemory").Result()
	if err != nil || cfg["maxmemory"] != "12345678" {
		t.Fatalf("maxmemory = %v, %v", cfg, err)
	}
	if r.Port() == 1 {
		t.Fatal("WithArgs overrode the helper's --port")
	}
}

// Cluster ports come in pairs below the ephemeral range, and a pair whose bus port is
// taken is skipped.
func TestFreePortBus(t *testing.T) {
	t.Parallel()
	lo, hi := busPortRange()
	if hi <= lo || hi+10000 > 65536 || hi > maxPort+1 {
		t.Fatalf("busPortRange = [%d, %d)", lo, hi)
	}
	for range 20 {
		p, err := freePort(true)
		if err != nil {
			t.Fatal(err)
		}
		if p < lo || p >= hi {
			t.Fatalf("freePort(true) = %d, outside [%d, %d)", p, lo, hi)
		}
	}

	// Hold the bus port of the first candidate: freePortFrom must pass over it.
	var err error
	var first int
	var busy net.Listener
	for range 5 { // another package's server may take the pair between check and hold
		if first, err = freePort(true); err != nil {
			t.Fatal(err)
		}
		if busy, err = net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(first+10000)); err == nil {
			break
		}
	}
	if busy == nil {
		t.Fatalf("could not hold a bus port: %v", err)
	}
	defer busy.Close()
	second := first + 1
	if second >= hi {
		second = first - 1
	}
	cands := []int{first, second}
	got, err := freePortFrom(func() int { c := cands[0]; cands = cands[1:]; return c }, 2, true)
	if err == nil && got == first {
		t.Fatalf("freePortFrom returned %d although its bus port %d is held", got, first+10000)
	}
	if err == nil && got != second {
		t.Fatalf("freePortFrom = %d, want %d", got, second)
	}
}

func TestRedisStartFailureShowsLog(t *testing.T) {
	t.Parallel()
	f := runFake(t, func(tb testing.TB) { StartRedis(tb, WithArgs("--no-such-directive", "x")) })
	for _, want := range []string{"exited before it was ready", "redis.log (tail)", "no-such-directive"} {
		if !strings.Contains(f.fatal, want) {
			t.Errorf("failure message lacks %q:\n%s", want, f.fatal)
		}
	}
}

// A server started on a port another server holds is recognised as a port conflict (the
// case StartRedis retries with a new port and Restart retries on the same one), and the
// other server answering on that port is never mistaken for it.
func TestRedisPortConflictDetected(t *testing.T) {
	t.Parallel()
	a := StartRedis(t)
	dir := t.TempDir()
	b := &Redis{name: "redis-server", bin: a.bin, args: defaultRedisArgs(), dir: dir,
		logPath: filepath.Join(dir, "redis.log"), port: a.Port()}
	p, err := b.launch()
	if err == nil {
		_ = p.kill()
		t.Fatal("a second server started on a taken port")
	}
	var sf *startFailure
	if !errors.As(err, &sf) || !sf.portConflict {
		t.Fatalf("err = %v, want a port conflict", err)
	}
	if err := a.Client(t).Ping(ctxT(t, 5*time.Second)).Err(); err != nil {
		t.Fatalf("the first server: %v", err)
	}
}

// A port freePort handed out is reserved for the life of this process: not
// handed out again here, and locked for every other process (the flock(1)
// command stands for another test binary).
func TestReservedPortNotHandedOutTwice(t *testing.T) {
	p, err := freePort(false)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := freePortFrom(func() int { return p }, 3, false); err == nil {
		t.Fatalf("freePortFrom handed out %d again (got %d)", p, got)
	}
	flock, err := exec.LookPath("flock")
	if err != nil {
		t.Skipf("no flock(1) to stand for another process: %v", err)
	}
	file := filepath.Join(os.TempDir(), "lockkit-testserver-ports", strconv.Itoa(p))
	if out, err := exec.Command(flock, "-n", file, "true").CombinedOutput(); err == nil {
		t.Fatalf("another process took the reservation of port %d: %s", p, out)
	}
}
