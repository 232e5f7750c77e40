package jaegertest

import (
	"encoding/json"
	"strconv"
	"time"
)

// Trace is one trace as Jaeger's query API returns it.
type Trace struct {
	TraceID string
	Spans   []Span
}

// Span is one span of a Trace. OpenTelemetry data maps onto Jaeger's model: span
// attributes, the span kind ("span.kind"), the status ("otel.status_code",
// "otel.status_description", "error") and the instrumentation scope
// ("otel.scope.name", "otel.scope.version") are Tags; span events are Events.
type Span struct {
	TraceID       string
	SpanID        string
	ParentSpanID  string // "" for a root span
	OperationName string
	Service       string
	Start         time.Time
	Duration      time.Duration
	// Tags are the span's tags: string, bool, int64 or float64 values.
	Tags map[string]any
	// ProcessTags are the resource attributes of the span's process.
	ProcessTags map[string]any
	Events      []Event
	// Links are the span's references other than its parent (OpenTelemetry
	// span links, which Jaeger shows as FOLLOWS_FROM), possibly to another
	// trace.
	Links []Link
}

// Link is a reference from a span to another span.
type Link struct {
	RefType, TraceID, SpanID string
}

// Event is one span event (a Jaeger log). Its name is Fields["event"].
type Event struct {
	Time   time.Time
	Fields map[string]any
}

// Name returns the event's name.
func (e Event) Name() string {
	s, _ := e.Fields["event"].(string)
	return s
}

// Span returns the first span named operation.
func (t Trace) Span(operation string) (Span, bool) {
	for _, s := range t.Spans {
		if s.OperationName == operation {
			return s, true
		}
	}
	return Span{}, false
}

// Children returns the spans whose parent is spanID.
func (t Trace) Children(spanID string) []Span {
	var out []Span
	for _, s := range t.Spans {
		if s.ParentSpanID == spanID {
			out = append(out, s)
		}
	}
	return out
}

// The JSON of GET /api/traces (Jaeger's UI API, kept in v2).
type apiResponse struct {
	Data   []apiTrace `json:"data"`
	Errors []struct {
		Code int    `json:"code"`
		Msg  string `json:"msg"`
	} `json:"errors"`
}

type apiTrace struct {
	TraceID   string                `json:"traceID"`
	Spans     []apiSpan             `json:"spans"`
	Processes map[string]apiProcess `json:"processes"`
}

type apiProcess struct {
	ServiceName string   `json:"serviceName"`
	Tags        []apiTag `json:"tags"`
}

type apiSpan struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	StartTime int64    `json:"startTime"` // µs since the epoch
	Duration  int64    `json:"duration"`  // µs
	Tags      []apiTag `json:"tags"`
	Logs      []struct {
		Timestamp int64    `json:"timestamp"`
		Fields    []apiTag `json:"fields"`
	} `json:"logs"`
	ProcessID string `json:"processID"`
}

type apiTag struct {
	Key   string          `json:"key"`
	Type  string          `json:"type"`
	Value json.RawMessage `json:"value"`
}

func (at apiTrace) convert() Trace {
	t := Trace{TraceID: at.TraceID}
	for _, as := range at.Spans {
		s := Span{
			TraceID:       as.TraceID,
			SpanID:        as.SpanID,
			OperationName: as.OperationName,
			Start:         time.UnixMicro(as.StartTime),
			Duration:      time.Duration(as.Duration) * time.Microsecond,
			Tags:          tagMap(as.Tags),
		}
		for _, r := range as.References {
			if r.RefType == "CHILD_OF" && r.TraceID == as.TraceID && s.ParentSpanID == "" {
				s.ParentSpanID = r.SpanID
				continue
			}
			s.Links = append(s.Links, Link{RefType: r.RefType, TraceID: r.TraceID, SpanID: r.SpanID})
		}
		if p, ok := at.Processes[as.ProcessID]; ok {
			s.Service = p.ServiceName
			s.ProcessTags = tagMap(p.Tags)
		}
		for _, l := range as.Logs {
			s.Events = append(s.Events, Event{Time: time.UnixMicro(l.Timestamp), Fields: tagMap(l.Fields)})
		}
		t.Spans = append(t.Spans, s)
	}
	return t
}

func tagMap(tags []apiTag) map[string]any {
	m := make(map[string]any, len(tags))
	for _, tag := range tags {
		m[tag.Key] = tagValue(tag)
	}
	return m
}

// tagValue decodes a tag's value by its declared type; an undecodable value is kept
// as its JSON text.
func tagValue(tag apiTag) any {
	switch tag.Type {
	case "bool":
		var b bool
		if json.Unmarshal(tag.Value, &b) == nil {
			return b
		}
	case "int64":
		var n json.Number
		if json.Unmarshal(tag.Value, &n) == nil {
			if i, err := strconv.ParseInt(n.String(), 10, 64); err == nil {
				return i
			}
		}
	case "float64":
		var f float64
		if json.Unmarshal(tag.Value, &f) == nil {
			return f
		}
	default: // string, binary
		var s string
		if json.Unmarshal(tag.Value, &s) == nil {
			return s
		}
	}
	return string(tag.Value)
}
