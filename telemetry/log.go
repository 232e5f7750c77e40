package telemetry

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// Log attribute keys that carry the span of a log line's ctx.
const (
	LogTraceID = "trace_id"
	LogSpanID  = "span_id"
)

// LogAttrs returns the trace_id and span_id attributes of the span in ctx, or nil
// when ctx carries no valid span context.
func LogAttrs(ctx context.Context) []slog.Attr {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return nil
	}
	return []slog.Attr{
		slog.String(LogTraceID, sc.TraceID().String()),
		slog.String(LogSpanID, sc.SpanID().String()),
	}
}

// NewLogHandler wraps next so that every record logged with a ctx carrying a valid
// span context gets trace_id and span_id attributes, linking log lines to traces.
// The runtime wraps its logger once: slog.New(telemetry.NewLogHandler(l.Handler())),
// and logs with the ctx-taking methods (InfoContext, LogAttrs). The attributes join
// the record's own, so under a WithGroup they land in that group.
// A nil next discards every record.
func NewLogHandler(next slog.Handler) slog.Handler {
	if next == nil {
		next = slog.DiscardHandler
	}
	if h, ok := next.(*logHandler); ok {
		return h // already wrapped
	}
	return &logHandler{next: next}
}

type logHandler struct{ next slog.Handler }

func (h *logHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

func (h *logHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		// Clone: the record may share its attribute storage with the caller's copy.
		r = r.Clone()
		r.AddAttrs(
			slog.String(LogTraceID, sc.TraceID().String()),
			slog.String(LogSpanID, sc.SpanID().String()),
		)
	}
	return h.next.Handle(ctx, r)
}

func (h *logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &logHandler{next: h.next.WithAttrs(attrs)}
}

func (h *logHandler) WithGroup(name string) slog.Handler {
	return &logHandler{next: h.next.WithGroup(name)}
}
