package goredis

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockkit/lockkit/breaker"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/redis/go-redis/v9"
)

// The cgroup v1 cpu controller, where a container's CPU limit lives
// (cpu.cfs_quota_us over cpu.cfs_period_us).
const cgroupCPU = "/sys/fs/cgroup/cpu"

// cpuCgroup makes a cgroup with quota percent of one CPU, removed with the
// test; "" with the reason when none can be made here.
func cpuCgroup(t *testing.T, percent int) (dir, why string) {
	dir = filepath.Join(cgroupCPU, fmt.Sprintf("lockkit-%d-%d", os.Getpid(), percent))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", fmt.Sprintf("no writable cgroup v1 cpu controller at %s (%v): run as root on a host with cgroup v1, as CI does", cgroupCPU, err)
	}
	t.Cleanup(func() { _ = os.Remove(dir) })
	if err := os.WriteFile(filepath.Join(dir, "cpu.cfs_period_us"), []byte("100000"), 0o644); err != nil {
		return "", err.Error()
	}
	if err := os.WriteFile(filepath.Join(dir, "cpu.cfs_quota_us"), []byte(strconv.Itoa(percent*1000)), 0o644); err != nil {
		return "", err.Error()
	}
	return dir, ""
}

// A client under a container CPU limit must not open its own breaker while
// Redis is healthy (issue 35). The review's history: one process, GOMAXPROCS
// 1, four busy goroutines, four held leases and a TryDo every 20ms, in a CFS
// quota of 20% and of 10% of a CPU; the replies sat in the socket buffer
// while the process was not scheduled, the command timeouts fired, and the
// breaker opened 1–4 times per run, refusing every lock for 2s each time.
// The child runs that workload in the quota; the breaker must stay closed.
// (A Redis that truly stops answering still opens it: TestBreakerOpens* in
// package lockkit, and drivertest's ServerDown.)
func TestThrottledClientKeepsBreakerClosed(t *testing.T) {
	if addr := os.Getenv("LOCKKIT_THROTTLE_CHILD"); addr != "" {
		throttledChild(t, addr)
		return
	}
	r := testserver.StartRedis(t)
	for _, percent := range []int{20, 10} {
		t.Run(strconv.Itoa(percent)+"%", func(t *testing.T) {
			dir, why := cpuCgroup(t, percent)
			if dir == "" {
				if os.Getenv("CI") == "true" {
					t.Fatal(why)
				}
				t.Skip(why)
			}
			res := runThrottled(t, dir, r.Addr(), 10*time.Second)
			t.Logf("%d%% quota: %+v", percent, res)
			openings, calls, refused := res.openings, res.calls, res.refused
			if calls < 3 {
				t.Fatalf("the child made %d calls: the workload did not run", calls)
			}
			if openings != 0 || refused != 0 {
				t.Errorf("%d%% CPU quota, healthy Redis: the breaker opened %d times and refused %d of %d calls; want none", percent, openings, refused, calls)
			}
		})
	}
}

// throttled is what one run of throttledChild counted.
type throttled struct{ openings, calls, refused, lost int }

// runThrottled runs throttledChild in the cgroup dir, on the Redis at addr,
// with a domain of ttl, and returns its counts.
func runThrottled(t *testing.T, dir, addr string, ttl time.Duration) throttled {
	t.Helper()
	child := testserver.StartChild(t, "^TestThrottledClientKeepsBreakerClosed$", "LOCKKIT_THROTTLE_CHILD="+addr, "LOCKKIT_THROTTLE_TTL="+ttl.String(), "GOMAXPROCS=1")
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(child.PID)), 0o644); err != nil {
		t.Fatalf("move the child into the cgroup: %v", err)
	}
	child.Send(t, "go")
	line := child.Next(t)
	for !strings.HasPrefix(line, "RESULT ") {
		line = child.Next(t)
	}
	var res throttled
	if _, err := fmt.Sscanf(line, "RESULT openings=%d calls=%d refused=%d lost=%d", &res.openings, &res.calls, &res.refused, &res.lost); err != nil {
		t.Fatalf("child said %q: %v", line, err)
	}
	return res
}

// TestCPULimitsLossRates measures, for docs/deployments.md ("CPU limits"),
// how many leases a CPU-throttled client loses and how often its breaker
// opens with Redis healthy, by CFS quota and TTL: the throttled workload
// (throttledChild, 8s a run) at each quota and TTL, runs times each. It is
// a measurement, not a check, and takes minutes, so it runs only when
// LOCKKIT_CPU_LIMITS is set (to the number of runs per cell, such as 2):
//
//	LOCKKIT_CPU_LIMITS=2 go test -count=1 -run TestCPULimitsLossRates -v ./goredis/
func TestCPULimitsLossRates(t *testing.T) {
	runs, _ := strconv.Atoi(os.Getenv("LOCKKIT_CPU_LIMITS"))
	if runs <= 0 {
		t.Skip("a measurement of minutes: set LOCKKIT_CPU_LIMITS to the runs per quota and TTL")
	}
	r := testserver.StartRedis(t)
	for _, percent := range []int{50, 20, 10} {
		dir, why := cpuCgroup(t, percent)
		if dir == "" {
			t.Skip(why)
		}
		for _, ttl := range []time.Duration{time.Second, 2 * time.Second, 5 * time.Second} {
			var sum throttled
			for range runs {
				res := runThrottled(t, dir, r.Addr(), ttl)
				sum.openings += res.openings
				sum.calls += res.calls
				sum.refused += res.refused
				sum.lost += res.lost
			}
			t.Logf("quota %d%% ttl %v: %d runs of 8s, 4 leases held each: %d leases lost, %d breaker openings, %d of %d calls refused",
				percent, ttl, runs, sum.lost, sum.openings, sum.refused, sum.calls)
		}
	}
}

// throttledChild is the review's workload, run in the child once it is in
// its cgroup: it prints one RESULT line. LOCKKIT_THROTTLE_TTL sets the
// domain's TTL (default 10s); a held lease that is lost is counted and
// taken again, so lost counts every loss of the run.
func throttledChild(t *testing.T, addr string) {
	if line, _ := readLine(); line != "go" {
		t.Fatalf("parent said %q", line)
	}
	runtime.GOMAXPROCS(1)
	ttl := 10 * time.Second
	if s := os.Getenv("LOCKKIT_THROTTLE_TTL"); s != "" {
		var err error
		if ttl, err = time.ParseDuration(s); err != nil {
			t.Fatalf("LOCKKIT_THROTTLE_TTL: %v", err)
		}
	}
	var openings atomic.Int64
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	c, err := lockkit.New(New(rdb), lockkit.WithBreaker(breaker.Settings{OnStateChange: func(_ string, _, to breaker.State) {
		if to == breaker.StateOpen {
			openings.Add(1)
		}
	}}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	d := c.Domain(lockkit.DomainSpec{Name: "throttled", Prefix: "lock:throttled:", Policy: lockkit.Policy{TTL: ttl}})
	if d.Err() != nil {
		t.Fatal(d.Err())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()

	var busy sync.WaitGroup
	for range 4 { // CPU-bound work beside the locks
		busy.Go(func() {
			for x := 0; ctx.Err() == nil; x++ {
				_ = x * x
			}
		})
	}
	var lost atomic.Int64
	for i := range 4 { // held leases, renewing; taken again when lost
		busy.Go(func() {
			for ctx.Err() == nil {
				err := d.Key(8).Literal("held").Int(int64(i)).Lock().Do(ctx, func(ctx context.Context, _ *lockkit.Lease) error {
					<-ctx.Done()
					return nil
				})
				if errors.Is(err, lockkit.ErrLockLost) {
					lost.Add(1)
				}
			}
		})
	}
	var calls, refused int
	for tick := time.NewTicker(20 * time.Millisecond); ctx.Err() == nil; <-tick.C {
		calls++
		err := d.Key(8).Literal("try").Lock().TryDo(ctx, func(context.Context, *lockkit.Lease) error { return nil })
		if errors.Is(err, breaker.ErrOpen) {
			refused++
		}
	}
	busy.Wait()
	fmt.Printf("RESULT openings=%d calls=%d refused=%d lost=%d\n", openings.Load(), calls, refused, lost.Load())
}

func readLine() (string, error) {
	var b []byte
	one := make([]byte, 1)
	for {
		if _, err := os.Stdin.Read(one); err != nil {
			return string(b), err
		}
		if one[0] == '\n' {
			return string(b), nil
		}
		b = append(b, one[0])
	}
}
