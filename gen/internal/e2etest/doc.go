// Package e2etest is lock helpers generated from this directory's
// lockkit.yaml, for the generator's end-to-end tests (e2e_test.go), which run
// them against a real redis-server. locks_gen.go is generated: edit
// lockkit.yaml and run go generate.
package e2etest

//go:generate go run github.com/lockkit/lockkit/cmd/lockkit-gen -config lockkit.yaml -out locks_gen.go
