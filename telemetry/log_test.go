package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
)

func spanContext(t *testing.T) (context.Context, trace.SpanContext) {
	t.Helper()
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x0a, 0x0b, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14},
		SpanID:     trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8},
		TraceFlags: trace.FlagsSampled,
	})
	return trace.ContextWithSpanContext(context.Background(), sc), sc
}

func TestLogAttrs(t *testing.T) {
	if got := LogAttrs(context.Background()); got != nil {
		t.Errorf("LogAttrs without a span = %v", got)
	}
	ctx, sc := spanContext(t)
	got := LogAttrs(ctx)
	if len(got) != 2 || got[0].Key != "trace_id" || got[0].Value.String() != sc.TraceID().String() ||
		got[1].Key != "span_id" || got[1].Value.String() != sc.SpanID().String() {
		t.Errorf("LogAttrs = %v", got)
	}
}

func TestLogHandler(t *testing.T) {
	var buf bytes.Buffer
	base := slog.NewJSONHandler(&buf, nil)
	h := NewLogHandler(base)
	if NewLogHandler(h) != h {
		t.Error("wrapping twice adds a second layer")
	}
	log := slog.New(h).With("component", "lockkit")
	ctx, sc := spanContext(t)

	decode := func() map[string]any {
		t.Helper()
		var m map[string]any
		if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
			t.Fatalf("%v: %s", err, buf.Bytes())
		}
		buf.Reset()
		return m
	}

	log.InfoContext(ctx, "acquired", "domain", "table")
	m := decode()
	if m["trace_id"] != sc.TraceID().String() || m["span_id"] != sc.SpanID().String() ||
		m["component"] != "lockkit" || m["domain"] != "table" || m["msg"] != "acquired" {
		t.Errorf("record = %v", m)
	}

	log.Info("no ctx")
	if m := decode(); m["trace_id"] != nil || m["span_id"] != nil {
		t.Errorf("record without a span got ids: %v", m)
	}

	// A record the caller keeps using after Handle is not changed by it.
	r := slog.NewRecord(time.Time{}, slog.LevelInfo, "kept", 0)
	r.AddAttrs(slog.Int("a", 1), slog.Int("b", 2), slog.Int("c", 3), slog.Int("d", 4), slog.Int("e", 5), slog.Int("f", 6))
	if err := h.Handle(ctx, r); err != nil {
		t.Fatal(err)
	}
	if r.NumAttrs() != 6 {
		t.Errorf("Handle changed the caller's record: %d attrs", r.NumAttrs())
	}
	decode()

	slog.New(h).WithGroup("g").InfoContext(ctx, "grouped", "x", 1)
	if g, _ := decode()["g"].(map[string]any); g["trace_id"] != sc.TraceID().String() {
		t.Errorf("grouped record lost the trace id")
	}
	if !h.Enabled(ctx, slog.LevelInfo) || h.Enabled(ctx, slog.LevelDebug) {
		t.Error("Enabled does not follow the wrapped handler")
	}
}
