package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"

	"github.com/lockkit/lockkit/examples/internal/exampletest"
	"github.com/lockkit/lockkit/internal/jaegertest"
	"github.com/lockkit/lockkit/internal/testserver"
)

// Against a real redis-server: one booking for table 12, for Charlie or
// Diana; the paused holder's late write is fenced off and its late release is
// ErrNotHeld, B keeps the lock; the crashed holder's table is free after its
// TTL.
func TestBookingOnRedis(t *testing.T) {
	out := exampletest.OnRedis(t, "lockkit-example-booking", run)
	exampletest.CheckRealRedis(t, out)
	checkBooking(t, out)
}

// With DATABASE_URL set: the locks and the bookings in a real PostgreSQL
// (internal/testserver): one booking for table 12; a crashed holder's lock
// not granted to anyone before its lease ran out (lock-delay); DoTx's lock and row rolled back and
// committed together.
func TestBookingOnPostgres(t *testing.T) {
	out := exampletest.OnPostgres(t, "lockkit-example-booking", run)
	if !strings.Contains(out, "lockkit: using the PostgreSQL at 127.0.0.1:") {
		t.Errorf("no PostgreSQL notice in the output")
	}
	checkRace(t, out)
	for _, want := range []string{
		"replica-E  tries table 3 at once: not acquired",
		"Eve got table 3",
		"Grace: the payment provider declined: rolled back",
		"result: table 5 has Heidi's booking only",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// With ZOOKEEPER_SERVERS set: the locks in a real ZooKeeper 3.8
// (internal/testserver), the bookings in the embedded Redis: one booking for
// table 12.
func TestBookingOnZooKeeper(t *testing.T) {
	z := testserver.StartZooKeeper(t, 1)
	t.Setenv("ZOOKEEPER_SERVERS", z.ServersString())
	out := exampletest.Embedded(t, "lockkit-example-booking", run)
	if !strings.Contains(out, "lockkit: locks on the ZooKeeper ensemble 127.0.0.1:") {
		t.Errorf("no ZooKeeper notice in the output")
	}
	checkRace(t, out)
}

// With ETCD_ENDPOINTS set: the locks in a real 1-member etcd
// (internal/testserver), the bookings in the embedded Redis: one booking for
// table 12; a crashed holder's lease expires at its TTL and the next holder's
// fence is above its.
func TestBookingOnEtcd(t *testing.T) {
	c := testserver.StartEtcd(t, 1)
	t.Setenv("ETCD_ENDPOINTS", c.EndpointsString())
	out := exampletest.Embedded(t, "lockkit-example-booking", run)
	if !strings.Contains(out, "lockkit: taking the locks in etcd at [127.0.0.1:") {
		t.Errorf("no etcd notice in the output")
	}
	checkRace(t, out)
	if !strings.Contains(out, "result: Eve got table 3 ") {
		t.Errorf("output lacks the crash story's result")
	}
}

// With REDIS_URL unset: the embedded miniredis, announced in one line, and
// the same facts.
func TestBookingEmbedded(t *testing.T) {
	out := exampletest.Embedded(t, "lockkit-example-booking", run)
	exampletest.CheckEmbeddedNotice(t, out)
	checkBooking(t, out)
}

var (
	bookedRE   = regexp.MustCompile(`replica-\d\s+(Charlie|Diana)\s+booked table 12 for (Charlie|Diana)$`)
	rejectedRE = regexp.MustCompile(`replica-\d\s+(Charlie|Diana)\s+rejected: table 12 `)
	resultRE   = regexp.MustCompile(`result: table 12 has exactly 1 booking, for (Charlie|Diana);`)
)

func checkBooking(t *testing.T, out string) {
	t.Helper()
	checkRace(t, out)
	checkRedisStories(t, out)
}

// checkRace checks the race on table 12: one booking, three rejections.
func checkRace(t *testing.T, out string) {
	t.Helper()
	var booked, rejected []string
	for _, l := range strings.Split(out, "\n") {
		if m := bookedRE.FindStringSubmatch(l); m != nil {
			if m[1] != m[2] {
				t.Errorf("%q: %s's request booked for %s", l, m[1], m[2])
			}
			booked = append(booked, m[2])
		}
		if rejectedRE.MatchString(l) {
			rejected = append(rejected, l)
		}
	}
	if len(booked) != 1 {
		t.Fatalf("%d 'booked table 12' lines (%v), want exactly 1", len(booked), booked)
	}
	if len(rejected) != 3 {
		t.Errorf("%d rejections for table 12, want 3", len(rejected))
	}
	if m := resultRE.FindStringSubmatch(out); m == nil || m[1] != booked[0] {
		t.Errorf("the result line does not name the winner %s", booked[0])
	}
}

// checkRedisStories checks the stolen lock and the crash on Redis.
func checkRedisStories(t *testing.T, out string) {
	t.Helper()
	// The stolen lock: the store turns A's late write away by its fence, A's
	// late release deletes nothing, B keeps the lock and Grace the table.
	for _, want := range []string{
		"replica-B  booked table 7 for Grace (write with fence ",
		"replica-A  wakes up and finishes its booking for Heidi: the write is turned away, ErrFenced (its fence ",
		"replica-A  release: ErrNotHeld",
		"replica-C  tries table 7: ErrNotAcquired; B's lock survives",
		`lockkit: lease lost" domain=table key=lock:{table:7}`,
	} {
		if len(exampletest.Lines(out, want)) != 1 {
			t.Errorf("no line %q", want)
		}
	}

	// The crash: Eve is turned away while the dead holder's key lives, then
	// gets the table once its TTL frees it.
	for _, want := range []string{
		"Eve tries table 3 at once (TryDo): ErrNotAcquired",
		"booked table 3 for Eve",
		"result: Eve waited",
	} {
		if len(exampletest.Lines(out, want)) != 1 {
			t.Errorf("no line %q", want)
		}
	}
}

// With OTEL_EXPORTER_OTLP_ENDPOINT set, the traces go to a real Jaeger
// instead of the summary: each request's span with the lock's hold span
// under it, and the acquire and release spans under that.
func TestBookingExportsToJaeger(t *testing.T) {
	jaeger := jaegertest.Start(t)
	srv := testserver.StartRedis(t)
	prev := otel.GetTracerProvider()
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	t.Setenv("REDIS_URL", "redis://"+srv.Addr())
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", jaeger.OTLPHTTPEndpoint())
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	// Unset: the Env turns metrics off, since Jaeger takes traces only.
	t.Setenv("OTEL_METRICS_EXPORTER", "")
	const service = "lockkit-example-booking-test"
	out := exampletest.Run(t, service, run)

	if n := len(exampletest.Lines(out, "lockkit: exporting traces over OTLP to "+jaeger.OTLPHTTPEndpoint())); n != 1 {
		t.Errorf("%d export notices, want 1", n)
	}
	if strings.Contains(out, "spans: ") || strings.Contains(out, "exporting telemetry failed") {
		t.Errorf("a summary or an export failure in the output while exporting")
	}
	checkBooking(t, out)

	tr, req := jaeger.WaitForSpan(t, service, "reserve table")
	kids := func(parent jaegertest.Span, name string) []jaegertest.Span {
		var found []jaegertest.Span
		for _, s := range tr.Spans {
			if s.ParentSpanID == parent.SpanID && s.OperationName == name {
				found = append(found, s)
			}
		}
		return found
	}
	holds := kids(req, "lockkit.hold table")
	if len(holds) != 1 {
		t.Fatalf("%d lockkit.hold table spans under %q, want 1", len(holds), req.OperationName)
	}
	for _, name := range []string{"lockkit.acquire table", "lockkit.release table"} {
		if len(kids(holds[0], name)) != 1 {
			t.Errorf("no %s span under the hold span", name)
		}
	}
}

// The fence line reports A's fence below B's: the numbers come from the
// leases, and the store compared them.
var fencedRE = regexp.MustCompile(`booked table 7 for Grace \(write with fence (\d+)\)[\s\S]*ErrFenced \(its fence (\d+) < the store's (\d+)\)`)

func TestBookingFenceOrder(t *testing.T) {
	out := exampletest.Embedded(t, "lockkit-example-booking", run)
	m := fencedRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no fenced write in:\n%s", out)
	}
	b, _ := strconv.ParseInt(m[1], 10, 64)
	a, _ := strconv.ParseInt(m[2], 10, 64)
	current, _ := strconv.ParseInt(m[3], 10, 64)
	if current != b || a >= b || a <= 0 {
		t.Errorf("A's fence %d, B's %d, the store's %d; want 0 < A's < B's = the store's", a, b, current)
	}
}
