// Package circuit is the runtime's circuit breaker: one [Breaker] per backend
// node, and [Classify], the one place that sorts a backend error into a
// failure, a success or neither. Package breaker holds what applications
// see of it (Settings, State, OpenError) and documents the rules.
package circuit
