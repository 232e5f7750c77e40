package lockkit

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/internal/telnames"
	"github.com/lockkit/lockkit/internal/testserver"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// doAllPaths are the two ways DoAll takes a set: one script (a plain Redis
// server) and one by one (the same server through a backend without its
// Batcher, as across Cluster slots, Redlock or PostgreSQL).
func doAllPaths(t *testing.T, r *testserver.Redis) map[string]driver.Spec {
	rdb := r.Client(t)
	return map[string]driver.Spec{
		"one_script": goredis.New(rdb),
		"one_by_one": {Name: "redis", Open: func(cfg driver.Config) (driver.Backend, error) {
			be, err := goredis.New(rdb).Open(cfg)
			return oneByOne{be}, err
		}},
	}
}

// A DoAll that gives up is one acquisition per lock, as a Do that gives up:
// one acquire span each with every attempt, a lockkit.retry event before
// each backoff, the exhausted event and outcome, Error status; the metrics
// count two acquisitions, not one per attempt, and nothing was held.
func TestTelemetryDoAllGivesUp(t *testing.T) {
	r := testserver.StartRedis(t)
	for path, spec := range doAllPaths(t, r) {
		t.Run(path, func(t *testing.T) {
			const attempts = 4
			p := Policy{TTL: 10 * time.Second, Retry: Retry{Attempts: attempts, Initial: 5 * time.Millisecond, Max: 10 * time.Millisecond}}
			holder, err := lockOn(testDomain(t, newClient(t, r), p), "b").Acquire(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Release(context.Background())

			g := newTelRigOn(t, spec)
			d := testDomain(t, g.c, p)
			a, b := lockOn(d, "a"), lockOn(d, "b")
			if got := batcherFor([]Lock{a, b}) != nil; got != (path == "one_script") {
				t.Fatalf("batched = %v on the %s path", got, path)
			}
			err = DoAll(t.Context(), func(context.Context, *LeaseSet) error { return errors.New("fn ran") }, a, b)
			if !errors.Is(err, ErrNotAcquired) {
				t.Fatalf("DoAll = %v, want ErrNotAcquired", err)
			}
			acqs, holds := g.named("lockkit.acquire test"), g.named("lockkit.hold test")
			if len(acqs) != 2 || len(holds) != 2 {
				t.Fatalf("%d acquire and %d hold spans, want 2 and 2 (one per lock)", len(acqs), len(holds))
			}
			keys := map[string]bool{}
			for i, acq := range acqs {
				k, _ := attrOf(acq.Attributes, telnames.AttrKey)
				keys[k.AsString()] = true
				what := fmt.Sprintf("acquire %s", k.AsString())
				wantSpanAttrs(t, what, acq.Attributes, []attribute.KeyValue{telnames.AttrDomain.String("test"), telnames.AttrKey.String(k.AsString()),
					telnames.AttrOutcome.String("exhausted"), telnames.AttrErrorType.String("exhausted"), telnames.AttrAttempts.Int(attempts)}, telnames.AttrAcquireWait)
				wantStatus(t, acq, codes.Error, err.Error())
				names := eventNames(acq)
				if len(names) != attempts || names[attempts-1] != telnames.EventAcquireExhausted {
					t.Errorf("%s events = %v, want %d × %s then %s", what, names, attempts-1, telnames.EventRetry, telnames.EventAcquireExhausted)
				}
				for j, e := range acq.Events[:min(len(acq.Events), attempts-1)] {
					if e.Name != telnames.EventRetry {
						continue
					}
					wantSpanAttrs(t, fmt.Sprintf("%s retry %d", what, j), e.Attributes,
						[]attribute.KeyValue{telnames.AttrRetryAttempt.Int(j + 1), telnames.AttrOutcome.String("contended")}, telnames.AttrRetryBackoff)
				}
				hold := holds[i]
				wantStatus(t, hold, codes.Error, err.Error())
				if o, _ := attrOf(hold.Attributes, telnames.AttrOutcome); o.AsString() != "exhausted" {
					t.Errorf("hold outcome %q, want exhausted", o.AsString())
				}
			}
			if !keys[a.Key()] || !keys[b.Key()] {
				t.Errorf("acquire spans for keys %v, want %s and %s", keys, a.Key(), b.Key())
			}
			ms := g.metrics(t)
			wantPoints(t, ms, telnames.MetricAcquireAttempts, map[string]telPoint{byOutcome("exhausted"): {count: 2}})
			if p := ms[telnames.MetricAcquireAttempts][byOutcome("exhausted")]; p.sum != 2*attempts {
				t.Errorf("attempts histogram sum %v, want %d", p.sum, 2*attempts)
			}
			wantPoints(t, ms, telnames.MetricAcquireDuration, map[string]telPoint{byOutcome("exhausted"): {count: 2}})
			wantPoints(t, ms, telnames.MetricAcquireContended, map[string]telPoint{byOutcome("exhausted"): {sum: 2}})
			wantNoMetric(t, ms, telnames.MetricHoldDuration, telnames.MetricReleases, telnames.MetricRenewals, telnames.MetricLeasesLost)
		})
	}
}

// A DoAll that waits for a held lock and then takes the set is one
// acquisition per lock: outcome acquired, every attempt counted, a retry
// event per backoff; each lock's hold then ends released, once.
func TestTelemetryDoAllWaitsThenAcquires(t *testing.T) {
	r := testserver.StartRedis(t)
	for path, spec := range doAllPaths(t, r) {
		t.Run(path, func(t *testing.T) {
			p := Policy{TTL: 5 * time.Second, Retry: Retry{Attempts: 1000, Initial: 10 * time.Millisecond, Max: 20 * time.Millisecond, MaxWait: 10 * time.Second}}
			g := newTelRigOn(t, spec)
			d := testDomain(t, g.c, p)
			holder, err := lockOn(testDomain(t, newClient(t, r), p), "b").Acquire(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			// Long enough for DoAll's first attempt to find b held, on a
			// loaded machine.
			time.AfterFunc(300*time.Millisecond, func() { _ = holder.Release(context.Background()) })
			if err := DoAll(t.Context(), func(context.Context, *LeaseSet) error { return nil }, lockOn(d, "a"), lockOn(d, "b")); err != nil {
				t.Fatalf("DoAll = %v", err)
			}
			acqs := g.named("lockkit.acquire test")
			if len(acqs) != 2 {
				t.Fatalf("%d acquire spans, want 2 (one per lock)", len(acqs))
			}
			var n int64
			for _, acq := range acqs {
				a, _ := attrOf(acq.Attributes, telnames.AttrAttempts)
				if n == 0 {
					n = a.AsInt64()
				}
				if a.AsInt64() < 2 || a.AsInt64() != n {
					t.Errorf("attempts %d (other lock %d), want the set's count, at least 2", a.AsInt64(), n)
				}
				if names := eventNames(acq); int64(len(names)) != a.AsInt64()-1 {
					t.Errorf("%d events %v for %d attempts, want a retry event per backoff", len(names), names, a.AsInt64())
				}
				wantStatus(t, acq, codes.Unset, "")
			}
			ms := g.metrics(t)
			wantPoints(t, ms, telnames.MetricAcquireAttempts, map[string]telPoint{byOutcome("acquired"): {count: 2}})
			if p := ms[telnames.MetricAcquireAttempts][byOutcome("acquired")]; p.sum != float64(2*n) {
				t.Errorf("attempts sum %v, want %d", p.sum, 2*n)
			}
			wantPoints(t, ms, telnames.MetricAcquireContended, map[string]telPoint{byOutcome("acquired"): {sum: 2}})
			wantPoints(t, ms, telnames.MetricHoldDuration, map[string]telPoint{byOutcome("released"): {count: 2}})
			wantPoints(t, ms, telnames.MetricReleases, map[string]telPoint{byOutcome("released"): {sum: 2}})
		})
	}
}

// TryDoAll turned away: one single-attempt acquisition per lock, contended,
// with neither a hold nor a release recorded for the lock it took and gave
// back (one by one).
func TestTelemetryTryDoAllContended(t *testing.T) {
	r := testserver.StartRedis(t)
	for path, spec := range doAllPaths(t, r) {
		t.Run(path, func(t *testing.T) {
			p := Policy{TTL: 10 * time.Second}
			holder, err := lockOn(testDomain(t, newClient(t, r), p), "b").Acquire(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Release(context.Background())
			g := newTelRigOn(t, spec)
			d := testDomain(t, g.c, p)
			if err := TryDoAll(t.Context(), func(context.Context, *LeaseSet) error { return nil }, lockOn(d, "a"), lockOn(d, "b")); err != ErrNotAcquired {
				t.Fatalf("TryDoAll = %v, want ErrNotAcquired", err)
			}
			if n := len(g.named("lockkit.acquire test")); n != 2 {
				t.Errorf("%d acquire spans, want 2", n)
			}
			ms := g.metrics(t)
			wantPoints(t, ms, telnames.MetricAcquireAttempts, map[string]telPoint{byOutcome("contended"): {count: 2}})
			wantPoints(t, ms, telnames.MetricAcquireContended, map[string]telPoint{byOutcome("contended"): {sum: 2}})
			wantNoMetric(t, ms, telnames.MetricHoldDuration, telnames.MetricReleases, telnames.MetricLeasesLost)
		})
	}
}

// retryRatio is the retry-ratio alert's expression over the exported
// lockkit.acquire.attempts histogram of one domain: 1 − (acquisitions in the
// le="1" bucket) / (all acquisitions), and the two counts.
func retryRatio(t *testing.T, g *telRig, domain string) (ratio float64, retried, total uint64) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := g.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var first uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != telnames.MetricAcquireAttempts {
				continue
			}
			for _, p := range m.Data.(metricdata.Histogram[int64]).DataPoints {
				if v, _ := p.Attributes.Value(telnames.AttrDomain); v.AsString() != domain {
					continue
				}
				if len(p.Bounds) == 0 || p.Bounds[0] != 1 {
					t.Fatalf("first bucket bound %v, want le=1", p.Bounds)
				}
				total += p.Count
				first += p.BucketCounts[0]
			}
		}
	}
	if total == 0 {
		return 0, 0, 0
	}
	return 1 - float64(first)/float64(total), total - first, total
}

// The retry-ratio alert counts every acquisition: Do, a FIFO wait and DoAll
// (both paths), each history with a known number of acquisitions that found
// their lock held. The ratio computed from the exported histogram, as the
// alert computes it, is that number over all acquisitions, per domain.
func TestRetryRatioCountsEveryAcquisition(t *testing.T) {
	r := testserver.StartRedis(t)
	g := newTelRig(t, r)
	other := newClient(t, r)
	retry := Retry{Attempts: 10000, Initial: 5 * time.Millisecond, Max: 10 * time.Millisecond, MaxWait: 20 * time.Second}
	noop := func(context.Context, *Lease) error { return nil }
	noopSet := func(context.Context, *LeaseSet) error { return nil }
	const free, waited = 6, 2

	domain := func(c *Client, name string, wait string) *Domain {
		d := c.Domain(DomainSpec{Name: name, Prefix: "lock:" + t.Name() + ":", Policy: Policy{TTL: 5 * time.Second, Wait: wait, Retry: retry}})
		if d.err != nil {
			t.Fatal(d.err)
		}
		return d
	}
	// held runs take while other holds key for 300ms: its first attempt
	// finds the lock held (300ms: the first attempt comes at once, even on
	// a loaded machine).
	held := func(d *Domain, id string, take func() error) {
		t.Helper()
		lease, err := lockOn(d, id).Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(300*time.Millisecond, func() { _ = lease.Release(context.Background()) })
		if err := take(); err != nil {
			t.Fatal(err)
		}
	}
	histories := map[string]func(name string){
		"do": func(name string) {
			d, od := domain(g.c, name, "poll"), domain(other, name, "poll")
			for i := range free {
				if err := lockOn(d, fmt.Sprint(i)).Do(t.Context(), noop); err != nil {
					t.Fatal(err)
				}
			}
			for i := range waited {
				held(od, fmt.Sprint(i), func() error { return lockOn(d, fmt.Sprint(i)).Do(t.Context(), noop) })
			}
		},
		"fifo": func(name string) {
			d, od := domain(g.c, name, "fifo"), domain(other, name, "fifo")
			for i := range free {
				if err := lockOn(d, fmt.Sprint(i)).Do(t.Context(), noop); err != nil {
					t.Fatal(err)
				}
			}
			for i := range waited {
				held(od, fmt.Sprint(i), func() error { return lockOn(d, fmt.Sprint(i)).Do(t.Context(), noop) })
			}
		},
		"doall": func(name string) {
			// Sets of two: free/2 free sets, and waited sets in which one lock
			// is held, so 2×waited acquisitions wait (the whole set waits).
			d, od := domain(g.c, name, "poll"), domain(other, name, "poll")
			for i := range free / 2 {
				if err := DoAll(t.Context(), noopSet, lockOn(d, fmt.Sprint(i, "x")), lockOn(d, fmt.Sprint(i, "y"))); err != nil {
					t.Fatal(err)
				}
			}
			for i := range waited / 2 {
				held(od, fmt.Sprint(i, "y"), func() error {
					return DoAll(t.Context(), noopSet, lockOn(d, fmt.Sprint(i, "x")), lockOn(d, fmt.Sprint(i, "y")))
				})
			}
		},
	}
	for name, run := range histories {
		run(name)
		ratio, retried, total := retryRatio(t, g, name)
		if total != free+waited || retried != waited {
			t.Errorf("%s: the histogram shows %d of %d acquisitions retried, want %d of %d", name, retried, total, waited, free+waited)
		}
		if want := float64(waited) / float64(free+waited); ratio != want {
			t.Errorf("%s: retry ratio %.3f, want %.3f", name, ratio, want)
		}
	}
}
