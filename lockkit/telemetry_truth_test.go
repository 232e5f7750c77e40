package lockkit

import (
	"errors"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/telnames"
	"github.com/lockkit/lockkit/internal/testserver"
	"go.opentelemetry.io/otel/attribute"
)

// Close releases an Acquire lease under its holder, and the holder's Err
// reports a loss (ErrLockLost, ErrClosed): telemetry records the same, the
// hold ending "lost" with cause "closed", counted by lockkit.leases.lost.
func TestTelemetryCloseLossMatchesErr(t *testing.T) {
	r := testserver.StartRedis(t)
	g := newTelRig(t, r)
	l := lockOn(testDomain(t, g.c, Policy{TTL: 5 * time.Second}), "closed")
	lease, err := l.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := g.c.Close(t.Context()); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if err := lease.Err(); !errors.Is(err, ErrLockLost) || !errors.Is(err, ErrClosed) {
		t.Fatalf("lease.Err() after Close = %v, want ErrLockLost and ErrClosed", err)
	}
	domain, key := telnames.AttrDomain.String("test"), telnames.AttrKey.String(l.Key())
	hold := g.one(t, "lockkit.hold test")
	wantSpanAttrs(t, "hold", hold.Attributes, []attribute.KeyValue{domain, key,
		telnames.AttrOutcome.String("lost"), telnames.AttrErrorType.String("lost"), telnames.AttrLostCause.String("closed")})
	if names := eventNames(hold); len(names) != 1 || names[0] != telnames.EventLeaseLost {
		t.Errorf("hold events = %v, want [%s]", names, telnames.EventLeaseLost)
	}
	rel := g.one(t, "lockkit.release test")
	wantSpanAttrs(t, "release", rel.Attributes, []attribute.KeyValue{domain, key, telnames.AttrOutcome.String("released")})
	ms := g.metrics(t)
	wantPoints(t, ms, telnames.MetricLeasesLost, map[string]telPoint{byCause("closed"): {sum: 1}})
	wantPoints(t, ms, telnames.MetricHoldDuration, map[string]telPoint{byOutcome("lost"): {count: 1}})
}
