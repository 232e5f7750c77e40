package lockkit

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/internal/testserver"
)

// call runs f and turns a panic into a test failure naming the case; f's
// error (or nil) is returned for the case's own check.
func call(t *testing.T, name string, f func() error) (err error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s panicked: %v", name, r)
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return f()
}

// wantErr fails unless err is non-nil and its text holds every one of want.
func wantErr(t *testing.T, name string, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: nil error, want one mentioning %q", name, want)
		return
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: %v; want it to mention %q", name, err, w)
		}
	}
}

// TestMisuseNeverPanics: the misuse a user can write without meaning to
// (nil fn, nil ctx, nil and zero values, typed-nil clients, edge sizes) gets
// an error naming the mistake, or the documented behaviour; never a panic.
func TestMisuseNeverPanics(t *testing.T) {
	testserver.RequireRedis(t)
	r := testserver.StartRedis(t)
	c := newClient(t, r)
	d := testDomain(t, c, Policy{TTL: time.Second, Retry: Retry{Attempts: 2, Initial: time.Millisecond}})
	l := lockOn(d, "misuse")
	ctx := t.Context()
	var nilCtx context.Context

	// A nil fn: refused before anything is taken.
	for name, f := range map[string]func() error{
		"Do(ctx, nil)":    func() error { return l.Do(ctx, nil) },
		"TryDo(ctx, nil)": func() error { return l.TryDo(ctx, nil) },
		"DoAll(ctx, nil)": func() error { return DoAll(ctx, nil, l) },
	} {
		wantErr(t, name, call(t, name, f), "fn is nil")
	}
	if le, err := l.TryAcquire(ctx); err != nil {
		t.Fatalf("a nil fn left the lock held: %v", err)
	} else if err := le.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// A nil ctx: refused, naming it.
	for name, f := range map[string]func() error{
		"Do(nil, fn)":      func() error { return l.Do(nilCtx, func(context.Context, *Lease) error { return nil }) },
		"TryAcquire(nil)":  func() error { _, err := l.TryAcquire(nilCtx); return err },
		"Acquire(nil)":     func() error { _, err := l.Acquire(nilCtx); return err },
		"Ping(nil)":        func() error { return c.Ping(nilCtx) },
		"DoAll(nil, ...)":  func() error { return DoAll(nilCtx, func(context.Context, *LeaseSet) error { return nil }, l) },
		"TryDoAll(nil, …)": func() error { return TryDoAll(nilCtx, func(context.Context, *LeaseSet) error { return nil }, l) },
	} {
		wantErr(t, name, call(t, name, f), "nil context")
	}
	lease, err := l.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantErr(t, "Lease.Extend(nil)", call(t, "Lease.Extend(nil)", func() error { return lease.Extend(nilCtx) }), "nil context")
	wantErr(t, "Lease.Release(nil)", call(t, "Lease.Release(nil)", func() error { return lease.Release(nilCtx) }), "nil context")
	if err := lease.Release(ctx); err != nil {
		t.Errorf("Release after the refused nil-ctx calls: %v", err)
	}

	// Nil and zero leases: errors, zero values, a closed Done.
	for name, le := range map[string]*Lease{"nil *Lease": nil, "zero Lease": {}} {
		call(t, name+".Fence/Token/Key/Deadline/Valid", func() error {
			if le.Fence() != 0 || le.Token() != "" || le.Key() != "" || !le.Deadline().IsZero() || le.Valid() {
				t.Errorf("%s: non-zero accessors", name)
			}
			return nil
		})
		wantErr(t, name+".Err", call(t, name+".Err", func() error { return le.Err() }), "no lease")
		wantErr(t, name+".Release", call(t, name+".Release", func() error { return le.Release(ctx) }), "no lease")
		wantErr(t, name+".Extend", call(t, name+".Extend", func() error { return le.Extend(ctx) }), "no lease")
		call(t, name+".Done", func() error {
			select {
			case <-le.Done():
			case <-time.After(time.Second):
				t.Errorf("%s.Done() is not closed", name)
			}
			return nil
		})
	}

	// A nil or zero LeaseSet.
	var nilSet *LeaseSet
	call(t, "nil LeaseSet", func() error {
		if nilSet.Lease(l) != nil || nilSet.Fence(l) != 0 || len(nilSet.Leases()) != 0 {
			t.Error("nil LeaseSet: non-zero answers")
		}
		if (&LeaseSet{}).Lease(nil) != nil {
			t.Error("LeaseSet.Lease(nil) is not nil")
		}
		return nil
	})
	wantErr(t, "nil LeaseSet.Err", call(t, "nil LeaseSet.Err", func() error { return nilSet.Err() }), "no lease")

	// Nil and zero Clients and Domains.
	var nilClient *Client
	zeroClient := &Client{}
	for name, cl := range map[string]*Client{"nil *Client": nilClient, "zero Client": zeroClient} {
		wantErr(t, name+".Ping", call(t, name+".Ping", func() error { return cl.Ping(ctx) }), "client")
		wantErr(t, name+".Close", call(t, name+".Close", func() error { return cl.Close(ctx) }), "client")
		call(t, name+".Health", func() error {
			if h := cl.Health(ctx); h.Healthy {
				t.Errorf("%s.Health is OK", name)
			}
			return nil
		})
		wantErr(t, name+".Domain", call(t, name+".Domain", func() error {
			return cl.Domain(DomainSpec{Name: "x", Policy: Policy{TTL: time.Second}}).Key(1).Literal("a").Lock().Do(ctx, func(context.Context, *Lease) error { return nil })
		}), "client")
	}
	var nilDomain *Domain
	call(t, "nil *Domain.Name/Policy", func() error {
		if nilDomain.Name() != "" || nilDomain.Policy() != (Policy{}) {
			t.Error("nil Domain: non-zero Name or Policy")
		}
		return nil
	})

	// Key size hints at the edges: no panic, no huge allocation.
	for _, hint := range []int{-1, math.MinInt, math.MaxInt, int(min(1<<40, int64(math.MaxInt)))} { // 1<<40 where int holds it (not on 386)
		name := fmt.Sprintf("Key(%d)", hint)
		call(t, name, func() error {
			if got := d.Key(hint).Literal("id:").String("x").Lock().Key(); !strings.HasSuffix(got, "{id:x}") {
				t.Errorf("%s built %q", name, got)
			}
			return nil
		})
	}

	// Typed-nil and zero go-redis clients, and a nil Option: New refuses them.
	var nilRedis *redis.Client
	var nilCluster *redis.ClusterClient
	var nilRing *redis.Ring
	for name, rdb := range map[string]redis.UniversalClient{
		"nil":                     nil,
		"typed-nil Client":        nilRedis,
		"typed-nil ClusterClient": nilCluster,
		"typed-nil Ring":          nilRing,
		"zero Client":             &redis.Client{},
	} {
		wantErr(t, "New(Redis("+name+"))", call(t, name, func() error { _, err := New(goredis.New(rdb)); return err }), "redis")
		wantErr(t, "New(Redlock("+name+"...))", call(t, name, func() error {
			_, err := New(goredis.Redlock(rdb, r.Client(t), r.Client(t)))
			return err
		}), "Redlock")
	}
	wantErr(t, "New(…, zero Option)", call(t, "zero Option", func() error { _, err := New(goredis.New(r.Client(t)), Option{}); return err }), "option")
}
