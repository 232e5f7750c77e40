package obs

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/telnames"
	"github.com/lockkit/lockkit/telemetry"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestCatalogMatchesEmitted runs every path and checks, both ways, that what is
// emitted is exactly what telemetry.Catalog lists: span name patterns, events, attribute keys,
// metric names, units and instruments.
func TestCatalogMatchesEmitted(t *testing.T) {
	r := newRig(t, Options{})
	ctx := context.Background()
	dom := r.in.Domain("table")
	errBoom := errors.New("boom")

	// A hold that retries, is acquired, renews, is lost, and finds the key gone.
	hctx, hold := dom.StartHold(ctx, testKey)
	actx := hold.StartAcquire(hctx)
	hold.Retry(1, time.Millisecond, telnames.OutcomeContended)
	BreakerChanged(actx, "node-1", "closed", "open") // the attempt tripped a breaker
	RedlockNode(actx, "node-1", "failed", time.Millisecond, errBoom)
	hold.Queued(2, "push") // a FIFO waiter, second in line, woken by a push
	hold.LinkPrevious("0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331")
	hold.EndAcquire(AcquireResult{Outcome: telnames.OutcomeAcquired, Attempts: 2, Contended: true, Fence: 3})
	_, rn := hold.StartRenew(ctx)
	rn.End(telnames.OutcomeRefused, errBoom)
	hold.Lost(telnames.LostRefused, errBoom)
	_, rel := hold.StartRelease(hctx)
	rel.End(telnames.OutcomeExpired, errBoom)
	hold.End(telnames.OutcomeLost, errBoom)
	// Acquisitions that time out and run out of attempts.
	for _, o := range []telnames.Outcome{telnames.OutcomeTimeout, telnames.OutcomeExhausted} {
		hctx, hold := dom.StartHold(ctx, testKey)
		hold.StartAcquire(hctx)
		hold.EndAcquire(AcquireResult{Outcome: o, Attempts: 5, Contended: true})
		hold.End(o, nil)
	}
	// A permit of a semaphore domain, which carries lockkit.kind.
	{
		hctx, hold := r.in.DomainKind("table", "semaphore").StartHold(ctx, testKey)
		hold.StartAcquire(hctx)
		hold.EndAcquire(AcquireResult{Outcome: telnames.OutcomeAcquired, Attempts: 1})
		hold.End(telnames.OutcomeReleased, nil)
	}
	r.in.BreakerState(ctx, "node-1", telnames.BreakerOpen)

	type named struct {
		kind            telemetry.Kind
		name, typ, unit string
	}
	emitted := map[named]bool{}
	addAttrs := func(kvs []attribute.KeyValue) {
		for _, kv := range kvs {
			typ := map[attribute.Type]string{attribute.STRING: "string", attribute.INT64: "int", attribute.FLOAT64: "double"}[kv.Value.Type()]
			emitted[named{telemetry.KindAttribute, string(kv.Key), typ, ""}] = true
		}
	}
	for _, s := range r.spans.GetSpans() {
		name, ok := strings.CutSuffix(s.Name, " table")
		if !ok {
			t.Errorf("span name %q does not end with the domain", s.Name)
		}
		emitted[named{telemetry.KindSpan, name + " {domain}", "", ""}] = true
		addAttrs(s.Attributes)
		for _, e := range s.Events {
			emitted[named{telemetry.KindEvent, e.Name, "", ""}] = true
			addAttrs(e.Attributes)
		}
	}
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			var typ string
			var sets []attribute.Set
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				typ = "histogram"
				for _, p := range d.DataPoints {
					sets = append(sets, p.Attributes)
				}
			case metricdata.Histogram[int64]:
				typ = "histogram"
				for _, p := range d.DataPoints {
					sets = append(sets, p.Attributes)
				}
			case metricdata.Sum[int64]:
				typ = "counter"
				for _, p := range d.DataPoints {
					sets = append(sets, p.Attributes)
				}
			case metricdata.Gauge[int64]:
				typ = "gauge"
				for _, p := range d.DataPoints {
					sets = append(sets, p.Attributes)
				}
			}
			emitted[named{telemetry.KindMetric, m.Name, typ, m.Unit}] = true
			for _, s := range sets {
				addAttrs(s.ToSlice())
			}
		}
	}

	listed := map[named]bool{}
	for _, e := range telemetry.Catalog() {
		n := named{e.Kind, e.Name, e.Type, e.Unit}
		if listed[n] {
			t.Errorf("catalog lists %v twice", n)
		}
		listed[n] = true
		if e.Description == "" {
			t.Errorf("catalog entry %v has no description", n)
		}
	}
	for n := range emitted {
		if !listed[n] {
			t.Errorf("emitted but not in Catalog: %+v", n)
		}
	}
	for n := range listed {
		if !emitted[n] {
			t.Errorf("in Catalog but never emitted: %+v", n)
		}
	}
}

func TestCatalogValues(t *testing.T) {
	var outcomes []string
	for o := range numOutcomes {
		outcomes = append(outcomes, telnames.Outcome(o).String())
	}
	for _, e := range telemetry.Catalog() {
		switch e.Name {
		case string(telnames.AttrOutcome):
			if !slices.Equal(e.Values, outcomes) {
				t.Errorf("outcome values %v, want %v", e.Values, outcomes)
			}
		case string(telnames.AttrLostCause):
			if !slices.Equal(e.Values, []string{"refused", "deadline", "closed", "max_hold"}) {
				t.Errorf("lost cause values %v", e.Values)
			}
		}
		if e.Kind != telemetry.KindSpan && e.Kind != telemetry.KindEvent && !strings.HasPrefix(e.Name, "lockkit.") && e.Name != "error.type" {
			t.Errorf("%s: name outside the lockkit namespace", e.Name)
		}
	}
}

// An election's and a semaphore's spans and metrics carry lockkit.kind (a
// term's hold span with its number as lockkit.fence); a lock's carry none.
func TestKindAttribute(t *testing.T) {
	r := newRig(t, Options{})
	ctx := context.Background()
	for _, kind := range []string{"", "lock", "election", "semaphore"} {
		name := "d_" + kind
		hctx, hold := r.in.DomainKind(name, kind).StartHold(ctx, testKey)
		hold.StartAcquire(hctx)
		hold.EndAcquire(AcquireResult{Outcome: telnames.OutcomeAcquired, Attempts: 1, Fence: 9})
		hold.End(telnames.OutcomeReleased, nil)
	}
	want := map[string]string{"d_": "", "d_lock": "", "d_election": "election", "d_semaphore": "semaphore"}
	seen := 0
	for _, s := range r.spans.GetSpans() {
		dom, kind := "", ""
		for _, kv := range s.Attributes {
			switch kv.Key {
			case telnames.AttrDomain:
				dom = kv.Value.AsString()
			case telnames.AttrKind:
				kind = kv.Value.AsString()
			}
		}
		if w, ok := want[dom]; !ok || kind != w {
			t.Errorf("span %q of domain %q: lockkit.kind %q, want %q", s.Name, dom, kind, want[dom])
		}
		seen++
	}
	if seen != 8 {
		t.Errorf("%d spans, want 8 (a hold and an acquire per domain)", seen)
	}
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok {
				for _, p := range h.DataPoints {
					if v, ok := p.Attributes.Value(telnames.AttrKind); ok {
						kinds[v.AsString()] = true
					}
				}
			}
		}
	}
	if !kinds["election"] || !kinds["semaphore"] || kinds["lock"] {
		t.Errorf("metric points carry kinds %v, want election and semaphore only", kinds)
	}
}
