// Package gen is the generator behind the lockkit-gen command
// (github.com/lockkit/lockkit/cmd/lockkit-gen): Generate turns a checked
// schema (package schema) into the Go source of typed lock helpers, and Run
// is the whole command, flags to exit status.
//
// Generate is pure: it returns the gofmt'd source and writes nothing, so the
// same schema gives the same bytes. Its templates are dumb; the view model in
// generate.go computes every name, type and expression. The golden tests in
// testdata/golden (one folder a case; update with go test ./gen -run
// TestGolden -update) pin the output and the exact error text of failing
// schemas.
package gen
