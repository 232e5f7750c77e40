// Package importcheck holds no code: its test checks the import graph's
// promise that importing lockkit, or code generated for it, stays light. The
// runtime, generated code and the leaf packages link the OpenTelemetry API
// only, never its SDK, its exporters, protobuf, gRPC or the etcd client; those
// belong to telemetry/otelsetup and the etcd backend (package etcd), which only
// applications that use them import.
package importcheck
