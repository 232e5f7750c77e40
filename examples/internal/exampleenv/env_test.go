package exampleenv_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockkit/lockkit/fence"

	"github.com/lockkit/lockkit/examples/internal/exampleenv"
	"github.com/lockkit/lockkit/examples/locks"
	"github.com/lockkit/lockkit/lockkit"
)

func openEmbedded(t *testing.T) (*exampleenv.Env, *bytes.Buffer) {
	t.Helper()
	t.Setenv("REDIS_URL", "")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "")
	var out bytes.Buffer
	env, err := exampleenv.Open(context.Background(), "exampleenv-test", &out)
	if err != nil {
		t.Fatal(err)
	}
	return env, &out
}

// The runtime's scripts run on miniredis (gopher-lua): the acquire script
// with fencing (TIME, string.format, EXISTS, INCR), extend, release, the
// owner checks, and key expiry on the wall clock.
func TestRuntimeScriptsOnMiniredis(t *testing.T) {
	env, out := openEmbedded(t)
	defer env.Close()
	if !env.Embedded || !strings.HasPrefix(out.String(), "lockkit: no REDIS_URL set; using an embedded in-process Redis (miniredis) at 127.0.0.1:") {
		t.Fatalf("not on the embedded Redis: %q", out.String())
	}
	ctx := context.Background()
	c, err := env.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	rdb := env.NewRedis()
	l := locks.New(c)

	before := time.Now().UnixMicro()
	lease, err := l.Table("12").TryAcquire(ctx)
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	// The fence counter was seeded from TIME in microseconds, then incremented.
	if f := lease.Fence(); f < before || f > time.Now().UnixMicro()+1 {
		t.Errorf("first fence %d is not seeded from the server clock (now %d µs)", f, time.Now().UnixMicro())
	}
	if _, err := l.Table("12").TryAcquire(ctx); !errors.Is(err, lockkit.ErrNotAcquired) {
		t.Errorf("second acquire: %v, want ErrNotAcquired", err)
	}
	if err := rdb.PExpire(ctx, lease.Key(), time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if err := lease.Extend(ctx); err != nil {
		t.Fatalf("extend: %v", err)
	}
	if pttl := rdb.PTTL(ctx, lease.Key()).Val(); pttl < 9*time.Second {
		t.Errorf("after extend the key lives %v, want ~10s", pttl)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	if n := rdb.Exists(ctx, lease.Key()).Val(); n != 0 {
		t.Errorf("key still there after release")
	}

	// A release by a lease whose key now holds another token deletes nothing.
	lease2, err := l.Table("12").TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	//lockkit-vet:ignore comparing fences of a released and a new lease is the point
	if lease2.Fence() <= lease.Fence() {
		t.Errorf("fences %d then %d, want strictly increasing", lease.Fence(), lease2.Fence())
	}
	rdb.Set(ctx, lease2.Key(), "another-owner", time.Minute)
	if err := lease2.Release(ctx); !errors.Is(err, lockkit.ErrNotHeld) {
		t.Errorf("release of a lost lease: %v, want ErrNotHeld", err)
	}
	if v := rdb.Get(ctx, lease2.Key()).Val(); v != "another-owner" {
		t.Errorf("the other owner's key now holds %q", v)
	}
	rdb.Del(ctx, lease2.Key())

	// Keys expire as time passes (ClockTTL), not only on FastForward.
	t.Setenv("LOCKKIT_TTL_JOB", "100ms")
	// A 100ms lease needs a command timeout that leaves its renewals room.
	short, err := env.NewClient(lockkit.WithCommandTimeout(50 * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	//lockkit-vet:ignore a crashed holder: the lease is never released, by design
	if _, err := locks.New(short).Job("j").TryAcquire(ctx); err != nil {
		t.Fatal(err)
	}
	if err := env.Crash(short); err != nil {
		t.Fatal(err)
	}
	time.Sleep(150 * time.Millisecond)
	if lease3, err := l.Job("j").TryAcquire(ctx); err != nil {
		t.Errorf("acquire after the crashed holder's 100ms TTL: %v", err)
	} else if err := lease3.Release(ctx); err != nil {
		t.Errorf("release: %v", err)
	}

	// fence.Set (string.find, string.byte, error replies).
	if err := fence.Set(ctx, rdb, "res", "a", 5); err != nil {
		t.Errorf("fenced set: %v", err)
	}
	if err := fence.Set(ctx, rdb, "res", "b", 4); !errors.Is(err, fence.ErrFenced) {
		t.Errorf("fenced set with a lower fence: %v, want ErrFenced", err)
	}
	if v, f, err := fence.Get(ctx, rdb, "res"); err != nil || v != "a" || f != 5 {
		t.Errorf("fenced get: %q %d %v", v, f, err)
	}
	if err := env.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
}

// A REDIS_URL that does not parse is an error that does not echo the URL,
// which may hold a password.
func TestOpenBadRedisURL(t *testing.T) {
	t.Setenv("REDIS_URL", "http://user:s3cret@example.com:6379")
	var out bytes.Buffer
	_, err := exampleenv.Open(context.Background(), "exampleenv-test", &out)
	if err == nil {
		t.Fatal("no error")
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("the error quotes the password: %v", err)
	}
	if !strings.Contains(err.Error(), "REDIS_URL") {
		t.Errorf("the error does not name REDIS_URL: %v", err)
	}
}

// With a real lock taken through the runtime, the summary Close prints shows
// the hold, acquire and release spans, indented under the example's span.
func TestSummaryOfRuntimeSpans(t *testing.T) {
	env, out := openEmbedded(t)
	ctx := context.Background()
	c, err := env.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	ctx, span := env.Tracer("test").Start(ctx, "request")
	err = locks.New(c).Table("12").Do(ctx, func(context.Context, *lockkit.Lease) error { return nil })
	span.End()
	if err != nil {
		t.Fatal(err)
	}
	names := env.SpanNames()
	if err := env.Close(); err != nil {
		t.Fatal(err)
	}
	runtimeSpans := 0
	for _, n := range names {
		if strings.HasPrefix(n, "lockkit.") {
			runtimeSpans++
		}
	}
	if runtimeSpans == 0 {
		t.Fatalf("the lockkit runtime emitted no spans to the Env's provider (got only %q)", names)
	}
	got := out.String()
	t.Logf("output:\n%s", got)
	for _, want := range []string{
		"\n    lockkit.hold table  ",
		"\n      lockkit.acquire table  ",
		"\n      lockkit.release table  ",
		"key=lock:{table:12}",
		"attempts=1 outcome=acquired",
		"outcome=released",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q", want)
		}
	}
	if !strings.Contains(got, "fence=") {
		t.Errorf("summary lacks the fence of the table lock")
	}
}
