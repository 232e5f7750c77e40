// Package telemetry says what lockkit records with OpenTelemetry. Catalog
// lists every span name, event, attribute and metric, with its type, unit and
// the values of an enumerated attribute (lockkit.outcome, lockkit.lost.cause),
// as data: dashboards, alerts and documentation are checked against it
// (docs/telemetry.md prints it). The package also says how lock keys are
// recorded (KeyMode, HashKey) and has a log handler that stamps trace ids on
// log lines.
//
// The runtime records these through the OpenTelemetry API only, never the SDK
// or an exporter, so importing lockkit stays light: with no providers set up,
// a lock records nothing and allocates nothing for telemetry. An application
// that wants OTLP export from the standard OTEL_* environment variables calls
// otelsetup.Setup (package telemetry/otelsetup) in its main; one that has its
// own providers passes them with lockkit.WithTracerProvider and
// lockkit.WithMeterProvider.
//
// # Names
//
// Span names are low-cardinality: "lockkit.acquire table", never the key or id.
// The key is the lockkit.key attribute, recorded raw, hashed or not at all
// (lockkit.WithKeyMode).
//
// # Outcomes and errors
//
// Every operation ends with an outcome, recorded as the lockkit.outcome attribute on
// spans and metrics. Only failures set the span status to Error and the
// error.type attribute; contention ("contended", a TryDo that found the lock
// held) and caller cancellation ("canceled") are outcomes, not errors.
// Error messages become the span status description only with KeyRaw, since an error
// message may quote the lock key.
package telemetry
