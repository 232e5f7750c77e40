package misuse_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/types"
	"io"
	"log/slog"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"golang.org/x/tools/go/packages"

	"github.com/lockkit/lockkit/breaker"
	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/etcd"
	"github.com/lockkit/lockkit/fence"
	"github.com/lockkit/lockkit/gen"
	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/goredis/autopipeline"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/lockkit/lockkit/postgres"
	"github.com/lockkit/lockkit/schema"
	"github.com/lockkit/lockkit/telemetry"
	"github.com/lockkit/lockkit/zookeeper"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// publicPackages are the packages whose every exported function and method
// the table covers.
var publicPackages = []string{"lockkit", "goredis", "goredis/autopipeline", "etcd", "zookeeper", "fence", "schema", "gen", "telemetry", "breaker", "driver", "postgres"}

// exportedNames lists "pkg.Func" and "pkg.Type.Method" for every exported
// function and method (value or pointer receiver) of the public packages.
func exportedNames(t *testing.T) []string {
	t.Helper()
	patterns := make([]string, len(publicPackages))
	for i, p := range publicPackages {
		patterns[i] = "github.com/lockkit/lockkit/" + p
	}
	pkgs, err := packages.Load(&packages.Config{Mode: packages.NeedName | packages.NeedTypes}, patterns...)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pkgs {
		if len(p.Errors) > 0 {
			t.Fatalf("%s: %v", p.PkgPath, p.Errors)
		}
		sc := p.Types.Scope()
		for _, n := range sc.Names() {
			switch o := sc.Lookup(n).(type) {
			case *types.Func:
				if o.Exported() {
					names = append(names, p.Name+"."+n)
				}
			case *types.TypeName:
				if !o.Exported() || o.IsAlias() {
					continue
				}
				ms := types.NewMethodSet(types.NewPointer(o.Type()))
				for i := range ms.Len() {
					m := ms.At(i).Obj()
					if m.Exported() && m.Pkg() == p.Types {
						names = append(names, p.Name+"."+n+"."+m.Name())
					}
				}
			}
		}
	}
	slices.Sort(names)
	return names
}

// noPanic runs f, failing the test with the case's name if it panics.
func noPanic(t *testing.T, name string, f func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s panicked: %v", name, r)
		}
	}()
	f()
}

// wantErr fails unless err is non-nil and names the mistake (holds every one of want).
func wantErr(t *testing.T, name string, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: nil error, want one mentioning %q", name, want)
		return
	}
	for _, w := range want {
		if !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(w)) {
			t.Errorf("%s: %v; want it to mention %q", name, err, w)
		}
	}
}

// TestMisuseTableCoversEveryExport calls every exported function and method
// of the public packages with nil, zero, typed-nil and edge values: none may
// panic, and where an error is returned it names the mistake. A name the
// table lacks fails the test, as does a table entry naming nothing.
func TestMisuseTableCoversEveryExport(t *testing.T) {
	ctx := context.Background()
	var nilCtx context.Context
	var (
		nilClient  *lockkit.Client
		nilDomain  *lockkit.Domain
		nilLease   *lockkit.Lease
		nilSet     *lockkit.LeaseSet
		zeroLock   lockkit.Lock
		nilRedis   *redis.Client
		nilCluster *redis.ClusterClient
		nilPool    *pgxpool.Pool
	)
	nopFn := func(context.Context, *lockkit.Lease) error { return nil }
	nopSetFn := func(context.Context, *lockkit.LeaseSet) error { return nil }
	edgeInts := []int64{math.MinInt64, -1, 0, math.MaxInt64}
	edgeDurations := []time.Duration{math.MinInt64, -1, 0, math.MaxInt64}

	// A client with no reachable server: New does not dial, so it is made;
	// its domain gives locks whose calls are refused without a server.
	// MaxRetries -1 only keeps each refused call to one dial: this table
	// checks argument handling, not fault behaviour, which the lockkit and
	// goredis fault tests check with the README's client (default retries).
	unreachable := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 50 * time.Millisecond, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = unreachable.Close() })
	client, err := lockkit.New(goredis.New(unreachable), lockkit.WithCommandTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close(ctx) })
	dom := client.Domain(lockkit.DomainSpec{Name: "misuse", Policy: lockkit.Policy{TTL: time.Second}})
	lock := dom.Key(8).Literal("id:").String("x").Lock()
	semDom := client.Domain(lockkit.DomainSpec{Name: "misuse_sem", Policy: lockkit.Policy{TTL: time.Second, Kind: "semaphore", Permits: 2}})
	sem := semDom.Key(8).Literal("id:").String("x").Semaphore()
	elDom := client.Domain(lockkit.DomainSpec{Name: "misuse_el", Policy: lockkit.Policy{TTL: time.Second, Kind: "election"}})
	el := elDom.Key(8).Literal("id:").String("x").Election()
	var (
		zeroSem lockkit.Semaphore
		zeroEl  lockkit.Election
		nilTerm *lockkit.Term
		nopTerm = func(context.Context, *lockkit.Term) error { return nil }
	)

	table := map[string]func(t *testing.T){
		// lockkit: constructors and options.
		"lockkit.New": func(t *testing.T) {
			_, err := lockkit.New(driver.Spec{})
			wantErr(t, "New(zero Spec)", err, "no backend")
			_, err = lockkit.New(goredis.New(unreachable), lockkit.Option{})
			wantErr(t, "New(…, zero Option)", err, "option")
		},
		"lockkit.WithBreaker": func(t *testing.T) {
			_, err := lockkit.New(goredis.New(unreachable), lockkit.WithBreaker(breaker.Settings{ConsecutiveFailures: math.MaxUint32, FailureRatio: -1, OpenTimeout: -1, Interval: math.MinInt64}))
			if err == nil {
				t.Log("WithBreaker(negative settings) accepted (defaults apply)")
			}
		},
		"lockkit.WithCommandTimeout": func(t *testing.T) {
			for _, d := range edgeDurations {
				c, err := lockkit.New(goredis.New(unreachable), lockkit.WithCommandTimeout(d))
				if err == nil {
					_ = c.Close(ctx)
				} else if d > 0 {
					t.Errorf("WithCommandTimeout(%v): %v", d, err)
				}
			}
		},
		"lockkit.WithKeyMode": func(t *testing.T) {
			_, err := lockkit.New(goredis.New(unreachable), lockkit.WithKeyMode(telemetry.KeyMode(99), nil))
			wantErr(t, "WithKeyMode(99)", err, "key mode")
		},
		"lockkit.WithLogger": func(t *testing.T) {
			c, err := lockkit.New(goredis.New(unreachable), lockkit.WithLogger(nil))
			if err == nil {
				_ = c.Close(ctx)
			}
		},
		"lockkit.WithMeterProvider": func(t *testing.T) {
			c, err := lockkit.New(goredis.New(unreachable), lockkit.WithMeterProvider(nil))
			if err == nil {
				_ = c.Close(ctx)
			}
		},
		"lockkit.WithTracerProvider": func(t *testing.T) {
			c, err := lockkit.New(goredis.New(unreachable), lockkit.WithTracerProvider(nil))
			if err == nil {
				_ = c.Close(ctx)
			}
		},
		"lockkit.WithSharedEnvironment": func(t *testing.T) {
			c, err := lockkit.New(goredis.New(unreachable), lockkit.WithSharedEnvironment(), lockkit.WithSharedEnvironment())
			if err != nil {
				t.Errorf("New with WithSharedEnvironment twice: %v", err)
				return
			}
			_ = c.Close(ctx)
		},
		"lockkit.WithOwner": func(t *testing.T) {
			for _, o := range []string{"", strings.Repeat("x", 1<<16), "a;b&c=\x00\xff"} {
				c, err := lockkit.New(goredis.New(unreachable), lockkit.WithOwner(o))
				if err == nil {
					_ = c.Close(ctx)
				}
			}
		},
		"lockkit.WithoutReplicaWarning": func(t *testing.T) {
			c, err := lockkit.New(goredis.New(unreachable), lockkit.WithoutReplicaWarning(), lockkit.WithoutReplicaWarning("", "nope"))
			if err == nil {
				_ = c.Close(ctx)
			}
		},
		"lockkit.RegisterDomains": func(t *testing.T) {
			lockkit.RegisterDomains()
			lockkit.RegisterDomains(lockkit.DomainSpec{})
		},
		// lockkit: client.
		"lockkit.Client.Close": func(t *testing.T) {
			wantErr(t, "nil Client.Close", nilClient.Close(ctx), "client")
			wantErr(t, "zero Client.Close", (&lockkit.Client{}).Close(ctx), "client")
			c, err := lockkit.New(goredis.New(unreachable))
			if err != nil {
				t.Fatal(err)
			}
			wantErr(t, "Close(nil ctx)", c.Close(nilCtx), "nil context")
			_ = c.Close(ctx)
		},
		"lockkit.Client.Domain": func(t *testing.T) {
			for name, d := range map[string]*lockkit.Domain{
				"nil Client":   nilClient.Domain(lockkit.DomainSpec{Name: "x", Policy: lockkit.Policy{TTL: time.Second}}),
				"zero spec":    client.Domain(lockkit.DomainSpec{}),
				"negative TTL": client.Domain(lockkit.DomainSpec{Name: "neg", Policy: lockkit.Policy{TTL: -1}}),
				"bad wait":     client.Domain(lockkit.DomainSpec{Name: "wait", Policy: lockkit.Policy{TTL: time.Second, Wait: "lifo"}}),
			} {
				wantErr(t, name+" Domain.Err", d.Err(), "")
			}
			wantErr(t, "wait lifo", client.Domain(lockkit.DomainSpec{Name: "wait", Policy: lockkit.Policy{TTL: time.Second, Wait: "lifo"}}).Err(), "wait")
		},
		"lockkit.Client.Health": func(t *testing.T) {
			if nilClient.Health(ctx).Healthy || (&lockkit.Client{}).Health(ctx).Healthy {
				t.Error("a nil or zero Client is healthy")
			}
			if client.Health(nilCtx).Healthy {
				t.Error("Health(nil ctx) is healthy")
			}
		},
		"lockkit.Client.HealthHandler": func(t *testing.T) {
			for _, c := range []*lockkit.Client{nilClient, {}} {
				w := httptest.NewRecorder()
				c.HealthHandler().ServeHTTP(w, httptest.NewRequest("GET", "/healthz", nil))
				if w.Code < 500 {
					t.Errorf("HealthHandler of a nil/zero Client: %d, want 5xx", w.Code)
				}
			}
		},
		"lockkit.Client.Ping": func(t *testing.T) {
			wantErr(t, "nil Client.Ping", nilClient.Ping(ctx), "client")
			wantErr(t, "Ping(nil ctx)", client.Ping(nilCtx), "nil context")
		},
		// lockkit: domains and keys.
		"lockkit.Domain.Err": func(t *testing.T) {
			wantErr(t, "nil Domain.Err", nilDomain.Err(), "")
		},
		"lockkit.Domain.Name":   func(t *testing.T) { _ = nilDomain.Name() },
		"lockkit.Domain.Policy": func(t *testing.T) { _ = nilDomain.Policy() },
		"lockkit.Domain.Key": func(t *testing.T) {
			for _, n := range []int{math.MinInt, -1, 0, math.MaxInt, int(min(1<<40, int64(math.MaxInt)))} { // 1<<40 where int holds it (not on 386)
				_ = dom.Key(n).Literal("a").Lock()
				_ = nilDomain.Key(n).Literal("a").Lock()
			}
		},
		"lockkit.KeyBuilder.Int": func(t *testing.T) {
			for _, v := range edgeInts {
				_ = dom.Key(0).Int(v).Lock().Key()
			}
			_ = lockkit.KeyBuilder{}.Int(1).Lock()
		},
		"lockkit.KeyBuilder.Uint": func(t *testing.T) {
			_ = dom.Key(0).Uint(math.MaxUint64).Lock().Key()
			_ = lockkit.KeyBuilder{}.Uint(0).Lock()
		},
		"lockkit.KeyBuilder.String": func(t *testing.T) {
			for _, s := range []string{"", "{", "}", "a}{b", "\x00\xff", strings.Repeat("x", 1<<16)} {
				_ = dom.Key(0).String(s).Lock().Key()
			}
			_ = lockkit.KeyBuilder{}.String("x").Lock()
		},
		"lockkit.KeyBuilder.Literal": func(t *testing.T) {
			for _, s := range []string{"a}{b", "}", "{"} {
				l := dom.Key(0).Literal(s).Lock()
				//lockkit-vet:ignore test: the release outcome is not what this test checks
				wantErr(t, fmt.Sprintf("Literal(%q) then TryAcquire", s), func() error { _, err := l.TryAcquire(ctx); return err }(), "")
			}
			//lockkit-vet:ignore test: the release outcome is not what this test checks
			wantErr(t, "empty hash tag", func() error { _, err := dom.Key(0).Lock().TryAcquire(ctx); return err }(), "")
		},
		"lockkit.KeyBuilder.Lock": func(t *testing.T) { _ = lockkit.KeyBuilder{}.Lock().Key() },
		// lockkit: locks.
		"lockkit.KeyBuilder.Semaphore": func(t *testing.T) {
			_ = lockkit.KeyBuilder{}.Semaphore().Key()
			// a lock domain's key is no semaphore: its calls say so
			wantErr(t, "Semaphore() of a lock domain", dom.Key(1).Literal("x").Semaphore().TryDo(ctx, nopFn), "semaphore")
		},
		"lockkit.KeyBuilder.Election": func(t *testing.T) {
			_ = lockkit.KeyBuilder{}.Election().Key()
			wantErr(t, "Election() of a lock domain", dom.Key(1).Literal("x").Election().Lead(ctx, nopTerm), "election")
		},
		"lockkit.Semaphore.Key": func(t *testing.T) { _ = zeroSem.Key() + sem.Key() },
		"lockkit.Semaphore.Do": func(t *testing.T) {
			wantErr(t, "zero Semaphore.Do", zeroSem.Do(ctx, nopFn), "")
			wantErr(t, "Semaphore.Do(nil fn)", sem.Do(ctx, nil), "fn is nil")
			wantErr(t, "Semaphore.Do(nil ctx)", sem.Do(nilCtx, nopFn), "nil context")
		},
		"lockkit.Semaphore.TryDo": func(t *testing.T) {
			wantErr(t, "zero Semaphore.TryDo", zeroSem.TryDo(ctx, nopFn), "")
			wantErr(t, "Semaphore.TryDo(nil fn)", sem.TryDo(ctx, nil), "fn is nil")
			wantErr(t, "Semaphore.TryDo(nil ctx)", sem.TryDo(nilCtx, nopFn), "nil context")
		},
		"lockkit.Semaphore.Acquire": func(t *testing.T) {
			//lockkit-vet:ignore test: no lease is granted here
			_, err := zeroSem.Acquire(ctx)
			wantErr(t, "zero Semaphore.Acquire", err, "")
			//lockkit-vet:ignore test: no lease is granted here
			_, err = sem.Acquire(nilCtx)
			wantErr(t, "Semaphore.Acquire(nil ctx)", err, "nil context")
		},
		"lockkit.Semaphore.TryAcquire": func(t *testing.T) {
			//lockkit-vet:ignore test: no lease is granted here
			_, err := zeroSem.TryAcquire(ctx)
			wantErr(t, "zero Semaphore.TryAcquire", err, "")
			//lockkit-vet:ignore test: no lease is granted here
			_, err = sem.TryAcquire(nilCtx)
			wantErr(t, "Semaphore.TryAcquire(nil ctx)", err, "nil context")
		},
		"lockkit.Election.Key": func(t *testing.T) { _ = zeroEl.Key() + el.Key() },
		"lockkit.Election.Lead": func(t *testing.T) {
			wantErr(t, "zero Election.Lead", zeroEl.Lead(ctx, nopTerm), "")
			wantErr(t, "Lead(nil fn)", el.Lead(ctx, nil), "fn is nil")
			wantErr(t, "Lead(nil ctx)", el.Lead(nilCtx, nopTerm), "nil context")
		},
		"lockkit.Election.Leader": func(t *testing.T) {
			_, err := zeroEl.Leader(ctx)
			wantErr(t, "zero Election.Leader", err, "")
			_, err = el.Leader(nilCtx)
			wantErr(t, "Leader(nil ctx)", err, "nil context")
		},
		"lockkit.Election.Observe": func(t *testing.T) {
			_, err := zeroEl.Observe(ctx)
			wantErr(t, "zero Election.Observe", err, "")
			_, err = el.Observe(nilCtx)
			wantErr(t, "Observe(nil ctx)", err, "nil context")
		},
		"lockkit.Leader.Leads": func(t *testing.T) {
			if (lockkit.Leader{}).Leads() {
				t.Error("the zero Leader leads")
			}
		},
		"lockkit.Term.Number": func(t *testing.T) {
			if n := nilTerm.Number(); n != 0 {
				t.Errorf("nil Term's number = %d", n)
			}
		},
		"lockkit.Term.Lease": func(t *testing.T) {
			if nilTerm.Lease() != nil {
				t.Error("nil Term has a lease")
			}
		},
		"lockkit.Term.Err": func(t *testing.T) { wantErr(t, "nil Term.Err", nilTerm.Err(), "") },
		"lockkit.Lock.Key": func(t *testing.T) { _ = zeroLock.Key() },
		"lockkit.Lock.Do": func(t *testing.T) {
			wantErr(t, "zero Lock.Do", zeroLock.Do(ctx, nopFn), "")
			wantErr(t, "Do(nil fn)", lock.Do(ctx, nil), "fn is nil")
			wantErr(t, "Do(nil ctx)", lock.Do(nilCtx, nopFn), "nil context")
		},
		"lockkit.Lock.TryDo": func(t *testing.T) {
			wantErr(t, "zero Lock.TryDo", zeroLock.TryDo(ctx, nopFn), "")
			wantErr(t, "TryDo(nil fn)", lock.TryDo(ctx, nil), "fn is nil")
			wantErr(t, "TryDo(nil ctx)", lock.TryDo(nilCtx, nopFn), "nil context")
		},
		"lockkit.Lock.Acquire": func(t *testing.T) {
			//lockkit-vet:ignore test: the release outcome is not what this test checks
			_, err := zeroLock.Acquire(ctx)
			wantErr(t, "zero Lock.Acquire", err, "")
			//lockkit-vet:ignore test: the release outcome is not what this test checks
			_, err = lock.Acquire(nilCtx)
			wantErr(t, "Acquire(nil ctx)", err, "nil context")
		},
		"lockkit.Lock.TryAcquire": func(t *testing.T) {
			//lockkit-vet:ignore test: the release outcome is not what this test checks
			_, err := zeroLock.TryAcquire(ctx)
			wantErr(t, "zero Lock.TryAcquire", err, "")
			//lockkit-vet:ignore test: the release outcome is not what this test checks
			_, err = lock.TryAcquire(nilCtx)
			wantErr(t, "TryAcquire(nil ctx)", err, "nil context")
		},
		"lockkit.DoAll": func(t *testing.T) {
			wantErr(t, "DoAll(nil fn)", lockkit.DoAll(ctx, nil, lock), "fn is nil")
			wantErr(t, "DoAll(nil ctx)", lockkit.DoAll(nilCtx, nopSetFn, lock), "nil context")
			wantErr(t, "DoAll()", lockkit.DoAll(ctx, nopSetFn), "no locks")
			wantErr(t, "DoAll(nil Locker)", lockkit.DoAll(ctx, nopSetFn, nil), "nil")
			wantErr(t, "DoAll(zero Lock)", lockkit.DoAll(ctx, nopSetFn, zeroLock), "")
		},
		"lockkit.TryDoAll": func(t *testing.T) {
			wantErr(t, "TryDoAll(nil fn)", lockkit.TryDoAll(ctx, nil, lock), "fn is nil")
			wantErr(t, "TryDoAll(nil ctx)", lockkit.TryDoAll(nilCtx, nopSetFn, lock), "nil context")
			wantErr(t, "TryDoAll()", lockkit.TryDoAll(ctx, nopSetFn), "no locks")
		},
		"lockkit.DoOn": func(t *testing.T) {
			wantErr(t, "DoOn(nil backend)", lockkit.DoOn(ctx, lock, nil, nopFn), "")
			wantErr(t, "DoOn(zero Lock)", lockkit.DoOn(ctx, zeroLock, nil, nopFn), "")
			wantErr(t, "DoOn(nil fn)", lockkit.DoOn(ctx, lock, nil, nil), "")
			wantErr(t, "DoOn(nil ctx)", lockkit.DoOn(nilCtx, lock, nil, nopFn), "")
		},
		// lockkit: leases.
		"lockkit.Lease.Deadline": func(t *testing.T) { _ = nilLease.Deadline(); _ = (&lockkit.Lease{}).Deadline() },
		"lockkit.Lease.Done":     func(t *testing.T) { <-nilLease.Done(); <-(&lockkit.Lease{}).Done() },
		"lockkit.Lease.Err": func(t *testing.T) {
			wantErr(t, "nil Lease.Err", nilLease.Err(), "no lease")
			wantErr(t, "zero Lease.Err", (&lockkit.Lease{}).Err(), "no lease")
		},
		"lockkit.Lease.Extend": func(t *testing.T) {
			wantErr(t, "nil Lease.Extend", nilLease.Extend(ctx), "no lease")
			wantErr(t, "zero Lease.Extend(nil ctx)", (&lockkit.Lease{}).Extend(nilCtx), "")
		},
		"lockkit.Lease.Release": func(t *testing.T) {
			wantErr(t, "nil Lease.Release", nilLease.Release(ctx), "no lease")
			wantErr(t, "zero Lease.Release(nil ctx)", (&lockkit.Lease{}).Release(nilCtx), "")
		},
		"lockkit.Lease.Fence": func(t *testing.T) { _ = nilLease.Fence() + (&lockkit.Lease{}).Fence() },
		"lockkit.Lease.Key":   func(t *testing.T) { _ = nilLease.Key() + (&lockkit.Lease{}).Key() },
		"lockkit.Lease.Token": func(t *testing.T) { _ = nilLease.Token() + (&lockkit.Lease{}).Token() },
		"lockkit.Lease.Valid": func(t *testing.T) {
			if nilLease.Valid() || (&lockkit.Lease{}).Valid() {
				t.Error("a nil or zero Lease is valid")
			}
		},
		"lockkit.LeaseSet.Err": func(t *testing.T) {
			wantErr(t, "nil LeaseSet.Err", nilSet.Err(), "no lease")
			wantErr(t, "zero LeaseSet.Err", (&lockkit.LeaseSet{}).Err(), "no lease")
		},
		"lockkit.LeaseSet.Fence":  func(t *testing.T) { _ = nilSet.Fence(nil) + (&lockkit.LeaseSet{}).Fence(zeroLock) },
		"lockkit.LeaseSet.Lease":  func(t *testing.T) { _, _ = nilSet.Lease(nil), (&lockkit.LeaseSet{}).Lease(zeroLock) },
		"lockkit.LeaseSet.Leases": func(t *testing.T) { _ = nilSet.Leases() },
		// goredis.
		"goredis.New": func(t *testing.T) {
			for name, rdb := range map[string]redis.UniversalClient{"nil": nil, "typed-nil Client": nilRedis, "typed-nil ClusterClient": nilCluster, "zero Client": &redis.Client{}} {
				_, err := lockkit.New(goredis.New(rdb))
				wantErr(t, "goredis.New("+name+")", err, "redis")
			}
		},
		"autopipeline.New": func(t *testing.T) {
			for name, rdb := range map[string]*redis.Client{"nil": nil, "typed-nil Client": nilRedis, "zero Client": {}} {
				_, err := lockkit.New(autopipeline.New(rdb))
				wantErr(t, "autopipeline.New("+name+")", err, "redis")
			}
			// A client closed before New: its autopipeliner cannot be made.
			closed := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
			_ = closed.Close()
			c, err := lockkit.New(autopipeline.New(closed))
			if err == nil {
				_ = c.Close(ctx)
			}
			wantErr(t, "autopipeline.New(closed client)", err, "closed")
			// An unordered autopipeliner could run a give-back before the
			// acquire it gives back.
			unordered := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", AutoPipelineOptions: &redis.AutoPipelineOptions{Unordered: true, MaxConcurrentBatches: 2}})
			t.Cleanup(func() { _ = unordered.Close() })
			c, err = lockkit.New(autopipeline.New(unordered))
			if err == nil {
				_ = c.Close(ctx)
			}
			wantErr(t, "autopipeline.New(Unordered client)", err, "autopipeline.New", "Unordered")
			// The default options are ordered.
			ordered := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
			t.Cleanup(func() { _ = ordered.Close() })
			if c, err = lockkit.New(autopipeline.New(ordered)); err != nil {
				t.Errorf("autopipeline.New(default client): %v", err)
			} else {
				_ = c.Close(ctx)
			}
		},
		"goredis.Redlock": func(t *testing.T) {
			_, err := lockkit.New(goredis.Redlock())
			wantErr(t, "Redlock()", err, "redlock")
			_, err = lockkit.New(goredis.Redlock(nilRedis, unreachable, unreachable))
			wantErr(t, "Redlock(typed nil, …)", err, "node 0")
		},
		// fence.
		"fence.Get": func(t *testing.T) {
			_, _, err := fence.Get(ctx, nil, "k")
			wantErr(t, "fence.Get(nil)", err, "nil")
			_, _, err = fence.Get(ctx, nilRedis, "k")
			wantErr(t, "fence.Get(typed nil)", err, "nil")
		},
		"fence.Set": func(t *testing.T) {
			wantErr(t, "fence.Set(nil)", fence.Set(ctx, nil, "k", "v", 1), "nil")
			wantErr(t, "fence.Set(typed nil)", fence.Set(ctx, nilCluster, "k", "v", 1), "nil")
			wantErr(t, "fence.Set(fence MinInt64)", fence.Set(ctx, nilCluster, "k", "v", math.MinInt64), "fence")
		},
		"fence.Error.Error": func(t *testing.T) {
			var e *fence.Error
			if e.Error() == "" || (&fence.Error{}).Error() == "" {
				t.Error("empty fence.Error message")
			}
		},
		"fence.Error.Unwrap": func(t *testing.T) {
			var e *fence.Error
			_ = e.Unwrap()
			if !errors.Is(e, fence.ErrFenced) {
				t.Error("(*fence.Error)(nil) is not ErrFenced")
			}
		},
		"fence.Table.Statement": func(t *testing.T) {
			_, _, err := fence.Table{}.Statement(1, 1)
			wantErr(t, "zero Table.Statement", err, "table")
			_, _, err = fence.Table{Table: "t", KeyColumn: "k"}.Statement(nil, math.MinInt64, fence.Column{})
			wantErr(t, "Statement(nil key, empty column)", err, "")
		},
		"fence.Table.Update": func(t *testing.T) {
			wantErr(t, "Table.Update(nil db)", fence.Table{Table: "t", KeyColumn: "k"}.Update(ctx, nil, 1, 1, fence.Column{Name: "c", Value: 1}), "nil")
		},
		// schema.
		"schema.Parse": func(t *testing.T) {
			for _, in := range []string{"", "\x00", "{", "domains: 7", "version: 1\ndomains:\n  a:\n    key: 'x:{id}'\n    params: {id: int}\n    ttl: -1s\n"} {
				_, err := schema.Parse("", []byte(in))
				wantErr(t, fmt.Sprintf("Parse(%q)", in), err, "")
			}
			_, err := schema.Parse("x.yaml", nil)
			wantErr(t, "Parse(nil)", err, "")
		},
		"schema.Load": func(t *testing.T) {
			_, err := schema.Load("")
			wantErr(t, `Load("")`, err, "")
			_, err = schema.Load(t.TempDir())
			wantErr(t, "Load(a directory)", err, "")
			if _, err := os.Stat("/dev/zero"); err == nil {
				_, err = schema.Load("/dev/zero")
				wantErr(t, "Load(/dev/zero)", err, "")
			}
		},
		"schema.CheckPackageName": func(t *testing.T) {
			for _, n := range []string{"", "1a", "a-b", "func", strings.Repeat("a", 1<<12)} {
				_ = schema.CheckPackageName(n)
			}
			wantErr(t, `CheckPackageName("")`, schema.CheckPackageName(""), "")
		},
		"schema.JSONSchema": func(t *testing.T) {
			if len(schema.JSONSchema()) == 0 {
				t.Error("empty JSON Schema")
			}
		},
		"schema.Domain.Params":   func(t *testing.T) { var d *schema.Domain; _ = d.Params(); _ = (&schema.Domain{}).Params() },
		"schema.Retry.None":      func(t *testing.T) { _ = schema.Retry{}.None() },
		"schema.Segment.IsParam": func(t *testing.T) { _ = schema.Segment{}.IsParam() },
		"schema.Error.Error": func(t *testing.T) {
			var e *schema.Error
			_ = e.Error()
			_ = (&schema.Error{}).Error()
		},
		"schema.Errors.Error": func(t *testing.T) {
			_ = schema.Errors(nil).Error()
			_ = schema.Errors{nil}.Error()
		},
		// gen.
		"gen.Generate": func(t *testing.T) {
			_, err := gen.Generate(nil, gen.Options{})
			wantErr(t, "Generate(nil)", err, "")
			_, err = gen.Generate(&schema.File{Domains: []*schema.Domain{nil}}, gen.Options{})
			wantErr(t, "Generate(nil domain)", err, "")
		},
		"gen.Run": func(t *testing.T) {
			var stderr bytes.Buffer
			for _, args := range [][]string{nil, {}, {"-config"}, {"-config", ""}, {"-nope"}} {
				if code := gen.Run(args, &stderr); code == 0 {
					t.Errorf("gen.Run(%q) = 0", args)
				}
			}
			schemaFile := filepath.Join(t.TempDir(), "lockkit.yaml")
			if err := os.WriteFile(schemaFile, []byte("version: 1\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if code := gen.Run([]string{"-config", schemaFile, "-out", schemaFile}, io.Discard); code == 0 {
				t.Error("gen.Run with -out naming the schema exits 0")
			}
			_ = gen.Run([]string{"-config", "x"}, nil)
		},
		// telemetry.
		"telemetry.Catalog": func(t *testing.T) { _ = telemetry.Catalog() },
		"telemetry.HashKey": func(t *testing.T) {
			_ = telemetry.HashKey("", nil)
			_ = telemetry.HashKey("\xff", []byte{})
		},
		"telemetry.LogAttrs": func(t *testing.T) { _ = telemetry.LogAttrs(nilCtx); _ = telemetry.LogAttrs(ctx) },
		"telemetry.NewLogHandler": func(t *testing.T) {
			h := telemetry.NewLogHandler(nil)
			if h != nil {
				_ = h.Enabled(ctx, slog.LevelInfo)
				_ = h.Handle(ctx, slog.Record{})
				_ = h.WithAttrs(nil).WithGroup("")
			}
		},
		// breaker.
		"breaker.State.String": func(t *testing.T) {
			if s := breaker.State(255).String(); s == "" {
				t.Error("empty name of an unknown state")
			}
		},
		"breaker.OpenError.Error": func(t *testing.T) {
			var e *breaker.OpenError
			_ = e.Error()
			_ = (&breaker.OpenError{}).Error()
		},
		"breaker.OpenError.Unwrap": func(t *testing.T) {
			var e *breaker.OpenError
			_ = e.Unwrap()
		},
		// driver.
		"driver.Failure":  func(t *testing.T) { _ = driver.Failure(nil) },
		"driver.Capacity": func(t *testing.T) { _ = driver.Capacity(nil) },
		// postgres.
		"etcd.New": func(t *testing.T) {
			_, err := lockkit.New(etcd.New(nil))
			wantErr(t, "etcd.New(nil)", err, "nil client")
			_, err = lockkit.New(etcd.New(&clientv3.Client{}))
			wantErr(t, "etcd.New(zero Client)", err, "clientv3.New")
			// Made (clientv3.New does not dial), then closed before New.
			closed, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:1"}})
			if err != nil {
				t.Fatal(err)
			}
			_ = closed.Close()
			c, err := lockkit.New(etcd.New(closed))
			if err == nil {
				_ = c.Close(ctx)
			}
			wantErr(t, "etcd.New(closed client)", err, "closed")
		},
		"etcd.WithMinTTL": func(t *testing.T) {
			cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:1"}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cli.Close() })
			for _, d := range append(edgeDurations, 1, 1500*time.Millisecond) {
				_, err := lockkit.New(etcd.New(cli, etcd.WithMinTTL(d)))
				wantErr(t, fmt.Sprintf("WithMinTTL(%v)", d), err, "WithMinTTL", "whole seconds")
			}
		},
		"zookeeper.New": func(t *testing.T) {
			for _, servers := range [][]string{nil, {}, {""}, {" , "}, {"/app"}} {
				_, err := lockkit.New(zookeeper.New(servers))
				wantErr(t, fmt.Sprintf("zookeeper.New(%q)", servers), err, "no servers")
			}
			for _, servers := range [][]string{{"zk:2181/app/"}, {"zk:2181/a//b"}, {"zk:2181/a", "zk2:2181"}, {"zk:2181/a/.."}} {
				_, err := lockkit.New(zookeeper.New(servers))
				wantErr(t, fmt.Sprintf("zookeeper.New(%q)", servers), err, "chroot")
			}
			_, err := lockkit.New(zookeeper.New([]string{"127.0.0.1:1"}, zookeeper.Option{}))
			if err != nil {
				t.Errorf("zookeeper.New with a zero Option: %v", err)
			}
			// Several servers: an ensemble, whose timing must be declared.
			ensemble := []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}
			_, err = lockkit.New(zookeeper.New(ensemble))
			wantErr(t, "zookeeper.New(3 servers)", err, "3 servers", "WithEnsembleTiming", "tickTime", "syncLimit")
			if _, err := lockkit.New(zookeeper.New(ensemble, zookeeper.WithEnsembleTiming(2*time.Second, 5))); err != nil {
				t.Errorf("zookeeper.New(3 servers, WithEnsembleTiming(2s, 5)): %v", err)
			}
		},
		"zookeeper.WithRoot": func(t *testing.T) {
			for _, root := range []string{"", "lockkit", "/lockkit/", "//", "/a//b", "/a/./b", "/a/..", "/a\x00b", "/a\nb", "/a\xffb"} {
				_, err := lockkit.New(zookeeper.New([]string{"127.0.0.1:1"}, zookeeper.WithRoot(root)))
				wantErr(t, fmt.Sprintf("WithRoot(%q)", root), err, "WithRoot", "absolute path")
			}
		},
		"zookeeper.WithDigestAuth": func(t *testing.T) {
			for _, up := range [][2]string{{"", "secret"}, {"alice", ""}, {"al:ice", "secret"}} {
				_, err := lockkit.New(zookeeper.New([]string{"127.0.0.1:1"}, zookeeper.WithDigestAuth(up[0], up[1])))
				wantErr(t, fmt.Sprintf("WithDigestAuth(%q, …)", up[0]), err, "WithDigestAuth")
			}
		},
		"zookeeper.WithSessionTimeouts": func(t *testing.T) {
			for _, min := range edgeDurations {
				for _, max := range edgeDurations {
					_, err := lockkit.New(zookeeper.New([]string{"127.0.0.1:1"}, zookeeper.WithSessionTimeouts(min, max)))
					if min > 0 && max >= min {
						continue // accepted: the domains' TTLs are checked against them
					}
					wantErr(t, fmt.Sprintf("WithSessionTimeouts(%v, %v)", min, max), err, "WithSessionTimeouts", "0 < min ≤ max")
				}
			}
		},
		"zookeeper.WithEnsembleTiming": func(t *testing.T) {
			for _, tick := range edgeDurations {
				for _, limit := range []int{math.MinInt, -1, 0, 1, 5, 12, 13, 1<<20 + 1, math.MaxInt} {
					_, err := lockkit.New(zookeeper.New([]string{"127.0.0.1:1"}, zookeeper.WithEnsembleTiming(tick, limit)))
					timing := tick >= time.Millisecond && tick <= time.Hour && tick%time.Millisecond == 0 && limit >= 1 && limit <= 1<<20
					if !timing {
						wantErr(t, fmt.Sprintf("WithEnsembleTiming(%v, %d)", tick, limit), err, "WithEnsembleTiming", "tickTime", "syncLimit")
						continue
					}
					// A timing: accepted, or refused (2 and 20 of its ticks
					// leave no TTL) saying so.
					if err != nil {
						wantErr(t, fmt.Sprintf("WithEnsembleTiming(%v, %d)", tick, limit), err, "WithEnsembleTiming", "leaves no TTL", "WithSessionTimeouts")
					}
				}
			}
		},
		"zookeeper.LockPath": func(t *testing.T) {
			for _, root := range []string{"", "/", "/lockkit"} {
				// Never "": a lock key has at least its domain's prefix.
				for _, key := range []string{".", "..", "/", "a/b", "\x00", "é", strings.Repeat("x", 1<<16)} {
					p := zookeeper.LockPath(root, key)
					if name := p[strings.LastIndexByte(p, '/')+1:]; name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
						t.Errorf("LockPath(%q, %q) = %q: its last element is not one valid node name", root, key, p)
					}
				}
			}
		},
		"postgres.New": func(t *testing.T) {
			_, err := lockkit.New(postgres.New(nil))
			wantErr(t, "postgres.New(nil)", err, "")
			_, err = lockkit.New(postgres.New(&pgxpool.Pool{}))
			wantErr(t, "postgres.New(zero Pool)", err, "")
		},
		"postgres.WithConnWait": func(t *testing.T) {
			for _, d := range edgeDurations {
				_, _ = lockkit.New(postgres.New(nilPool, postgres.WithConnWait(d)))
			}
		},
		"postgres.WithMaxHeld": func(t *testing.T) {
			for _, n := range []int{math.MinInt, -1, 0, math.MaxInt} {
				_, _ = lockkit.New(postgres.New(nilPool, postgres.WithMaxHeld(n)))
			}
		},
		"postgres.DoTx": func(t *testing.T) {
			fn := func(context.Context, pgx.Tx, *lockkit.Lease) error { return nil }
			wantErr(t, "DoTx(nil pool)", postgres.DoTx(ctx, nil, lock, fn), "")
			wantErr(t, "DoTx(nil fn)", postgres.DoTx(ctx, nil, lock, nil), "")
			wantErr(t, "DoTx(zero lock)", postgres.DoTx(ctx, nil, zeroLock, fn), "")
			wantErr(t, "DoTx(nil ctx)", postgres.DoTx(nilCtx, nil, lock, fn), "")
		},
		"postgres.FenceRowKey": func(t *testing.T) { _ = postgres.FenceRowKey(""); _ = postgres.FenceRowKey(strings.Repeat("x", 1<<16)) },
		"postgres.KeyID":       func(t *testing.T) { _ = postgres.KeyID("") },
		"postgres.Migrate": func(t *testing.T) {
			wantErr(t, "Migrate(nil)", postgres.Migrate(ctx, nil), "")
			wantErr(t, "Migrate(typed nil pool)", postgres.Migrate(ctx, nilPool), "")
		},
	}

	names := exportedNames(t)
	for _, n := range names {
		f, ok := table[n]
		if !ok {
			t.Errorf("%s is exported but not in the misuse table: add a case calling it with nil, zero and edge values", n)
			continue
		}
		t.Run(n, func(t *testing.T) { noPanic(t, n, func() { f(t) }) })
	}
	for n := range table {
		if !slices.Contains(names, n) {
			t.Errorf("the misuse table has %s, which is not exported (renamed or removed?)", n)
		}
	}
}
