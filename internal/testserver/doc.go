// Package testserver starts real server processes for lockkit's tests: redis-server
// (standalone, replica, sentinel, cluster) and PostgreSQL.
//
// Every server listens on 127.0.0.1 only, on a free port, with its files (config, data,
// log) in a t.TempDir(). Each one is started as a child of the test binary, in its own
// process group, with a parent-death signal of SIGKILL so that it dies with the test
// binary even if that panics or is killed (including by go test -timeout). t.Cleanup stops
// it by its PID (SIGCONT, then the graceful signal, then SIGKILL after a timeout) and
// reaps it. Every wait is bounded in time.
//
// When a required binary is missing the test fails with the exact install command; it
// is skipped instead only when the CI environment variable is unset (local development
// without the binary). Under CI=true it always fails.
//
// The package imports "testing" and lives under internal/: it is meant for this
// module's tests only.
package testserver
