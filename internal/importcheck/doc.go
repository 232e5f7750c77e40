// Package importcheck holds no code: its test checks the import graph's
// promise that importing lockkit, or code generated for it, stays light. The
// runtime, generated code and the leaf packages link the OpenTelemetry API
// only, never its SDK, its exporters, protobuf or gRPC; those belong to
// telemetry/otelsetup, which only applications import.
package importcheck
