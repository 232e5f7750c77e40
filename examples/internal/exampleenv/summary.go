package exampleenv

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockkit/lockkit/internal/telnames"
)

// MaxSummaryLines bounds the span summary: past it, the rest is counted, not
// printed.
const MaxSummaryLines = 60

// summary is a synchronous span processor that keeps every ended span, for
// print to show as one indented tree per trace.
type summary struct {
	mu    sync.Mutex
	spans []sdktrace.ReadOnlySpan
}

func newSummary() *summary { return &summary{} }

func (s *summary) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

func (s *summary) OnEnd(sp sdktrace.ReadOnlySpan) {
	s.mu.Lock()
	s.spans = append(s.spans, sp)
	s.mu.Unlock()
}

func (s *summary) Shutdown(context.Context) error   { return nil }
func (s *summary) ForceFlush(context.Context) error { return nil }

// Spans returns the spans ended so far.
func (s *summary) Spans() []sdktrace.ReadOnlySpan {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.spans)
}

// SpanNames returns the names of the spans ended so far, or nil when traces
// are exported rather than summarized. For tests.
func (e *Env) SpanNames() []string {
	if e.summary == nil {
		return nil
	}
	var names []string
	for _, sp := range e.summary.Spans() {
		names = append(names, sp.Name())
	}
	return names
}

func (s *summary) print(w io.Writer) {
	WriteSummary(w, s.Spans(), MaxSummaryLines)
}

// WriteSummary writes spans as one indented tree per trace, oldest trace
// first, children under their parent in start order, at most maxLines lines:
//
//	trace 4bf92f35
//	  reserve table 12  112ms  guest=Charlie
//	    lockkit.hold table  110ms  key=lock:{table:12} fence=7 outcome=released
//	      lockkit.acquire table  1.1ms  attempts=1 outcome=acquired
//
// Runs of alike leaf siblings (renewals) share one line: "lockkit.renew table ×3".
func WriteSummary(w io.Writer, spans []sdktrace.ReadOnlySpan, maxLines int) {
	if len(spans) == 0 {
		fmt.Fprintln(w, "spans: none recorded")
		return
	}
	byTrace := map[trace.TraceID][]sdktrace.ReadOnlySpan{}
	for _, sp := range spans {
		id := sp.SpanContext().TraceID()
		byTrace[id] = append(byTrace[id], sp)
	}
	type tr struct {
		id    trace.TraceID
		roots []sdktrace.ReadOnlySpan
		kids  map[trace.SpanID][]sdktrace.ReadOnlySpan
		start time.Time
	}
	var traces []*tr
	for id, sps := range byTrace {
		t := &tr{id: id, kids: map[trace.SpanID][]sdktrace.ReadOnlySpan{}}
		present := map[trace.SpanID]bool{}
		for _, sp := range sps {
			present[sp.SpanContext().SpanID()] = true
		}
		for _, sp := range sps {
			if p := sp.Parent(); p.IsValid() && present[p.SpanID()] {
				t.kids[p.SpanID()] = append(t.kids[p.SpanID()], sp)
			} else {
				t.roots = append(t.roots, sp)
			}
		}
		byStart := func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) }
		slices.SortFunc(t.roots, byStart)
		for _, k := range t.kids {
			slices.SortFunc(k, byStart)
		}
		t.start = t.roots[0].StartTime()
		traces = append(traces, t)
	}
	slices.SortFunc(traces, func(a, b *tr) int { return a.start.Compare(b.start) })

	p := &printer{w: w, max: maxLines, total: len(spans)}
	p.line(fmt.Sprintf("spans: %d in %d trace(s); set OTEL_EXPORTER_OTLP_ENDPOINT to see them in Jaeger instead", len(spans), len(traces)), 0)
	for _, t := range traces {
		p.line("trace "+t.id.String()[:8], 0)
		p.tree(t.roots, t.kids, 1, inherited{})
	}
	if left := p.total - p.shown; left > 0 {
		fmt.Fprintf(w, "  ... %d more span(s) not shown\n", left)
	}
}

type printer struct {
	w            io.Writer
	max, lines   int
	total, shown int
}

// line prints s at depth, unless the summary is full; it reports whether it
// printed.
func (p *printer) line(s string, depth int) bool {
	if p.lines >= p.max {
		return false
	}
	p.lines++
	fmt.Fprintf(p.w, "%s%s\n", strings.Repeat("  ", depth), s)
	return true
}

// inherited are the attributes a child shows only where they differ from
// its parent's: the key and the fence are the hold's.
type inherited struct{ key, fence string }

func (p *printer) tree(spans []sdktrace.ReadOnlySpan, kids map[trace.SpanID][]sdktrace.ReadOnlySpan, depth int, parent inherited) {
	for i := 0; i < len(spans); {
		sp := spans[i]
		// A run of alike leaves (a lease's renewals) shares one line.
		n := 1
		for i+n < len(spans) && alike(sp, spans[i+n], kids) {
			n++
		}
		run := spans[i : i+n]
		i += n
		if !p.line(describe(run, parent), depth) {
			return
		}
		p.shown += n
		if n == 1 {
			mine := parent
			if v, ok := attr(sp, telnames.AttrKey); ok {
				mine.key = v.Emit()
			}
			if v, ok := attr(sp, telnames.AttrFence); ok {
				mine.fence = v.Emit()
			}
			p.tree(kids[sp.SpanContext().SpanID()], kids, depth+1, mine)
		}
	}
}

// alike reports whether b can share a's line: same name and outcome, both leaves.
func alike(a, b sdktrace.ReadOnlySpan, kids map[trace.SpanID][]sdktrace.ReadOnlySpan) bool {
	if a.Name() != b.Name() || len(kids[a.SpanContext().SpanID()]) > 0 || len(kids[b.SpanContext().SpanID()]) > 0 {
		return false
	}
	oa, _ := attr(a, telnames.AttrOutcome)
	ob, _ := attr(b, telnames.AttrOutcome)
	return oa == ob && a.Status().Code == b.Status().Code
}

func attr(sp sdktrace.ReadOnlySpan, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range sp.Attributes() {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// describe is one summary line: name, duration, then the attributes worth
// reading, lockkit's in a fixed order (key, fence, attempts, retries,
// outcome, lost), then the application's.
func describe(run []sdktrace.ReadOnlySpan, parent inherited) string {
	sp := run[0]
	var b strings.Builder
	b.WriteString(sp.Name())
	if len(run) > 1 {
		fmt.Fprintf(&b, " ×%d", len(run))
	}
	b.WriteString("  ")
	lo, hi := spanDur(sp), spanDur(sp)
	for _, o := range run[1:] {
		lo, hi = min(lo, spanDur(o)), max(hi, spanDur(o))
	}
	b.WriteString(duration(lo))
	if duration(hi) != duration(lo) {
		b.WriteString("..")
		b.WriteString(duration(hi))
	}

	var key, fence, attempts, outcome, lost string
	var app []string
	for _, kv := range sp.Attributes() {
		v := kv.Value.Emit()
		switch kv.Key {
		case telnames.AttrDomain, telnames.AttrAcquireWait, telnames.AttrErrorType:
			// The domain is in the span name, the wait is its duration, the
			// error type is the outcome.
		case telnames.AttrKey:
			key = v
		case telnames.AttrFence:
			fence = v
		case telnames.AttrAttempts:
			attempts = v
		case telnames.AttrOutcome:
			outcome = v
		case telnames.AttrLostCause:
			lost = v
		default:
			app = append(app, string(kv.Key)+"="+quote(v))
		}
	}
	events := map[string]int{}
	var order []string
	for _, ev := range sp.Events() {
		if events[ev.Name] == 0 {
			order = append(order, ev.Name)
		}
		events[ev.Name]++
	}

	var fields []string
	add := func(name, v string) {
		if v != "" {
			fields = append(fields, name+"="+v)
		}
	}
	if key != parent.key {
		add("key", key)
	}
	if fence != parent.fence {
		add("fence", fence)
	}
	add("attempts", attempts)
	if n := events[telnames.EventRetry]; n > 0 {
		add("retries", fmt.Sprint(n))
	}
	add("outcome", outcome)
	add("lost", lost)
	fields = append(fields, app...)
	for _, name := range order {
		switch name {
		case telnames.EventRetry, telnames.EventLeaseLost:
			// Counted above; the lost= attribute.
		default:
			ev := strings.TrimPrefix(name, "lockkit.")
			if events[name] > 1 {
				ev = fmt.Sprintf("%s×%d", ev, events[name])
			}
			add("event", ev)
		}
	}
	if st := sp.Status(); st.Code == codes.Error {
		desc := st.Description
		switch {
		case outcome != "" && outcome != "unavailable" && outcome != "error":
			// The outcome (and lost=) says it.
		case desc == "":
			fields = append(fields, "error")
		case outcome != "":
			// Only the cause: the rest repeats the operation and the key.
			add("error", quote(lastCause(desc)))
		default:
			add("error", quote(desc))
		}
	}
	if len(fields) > 0 {
		b.WriteString("  ")
		b.WriteString(strings.Join(fields, " "))
	}
	return b.String()
}

// lastCause is the end of an error chain's message, after its last ": ":
// "lockkit: extend lock:{table:7}: ...: context canceled" → "context canceled".
func lastCause(msg string) string {
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		return msg[i+2:]
	}
	return msg
}

func spanDur(sp sdktrace.ReadOnlySpan) time.Duration { return sp.EndTime().Sub(sp.StartTime()) }

func quote(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\n\"=") {
		return fmt.Sprintf("%q", s)
	}
	return s
}

func duration(d time.Duration) string {
	switch {
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	default:
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
}
