// Package exampletest runs an example's run function in a test, against a
// real redis-server (internal/testserver) or the embedded miniredis, and
// returns everything it printed.
package exampletest

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/lockkit/lockkit/examples/internal/exampleenv"
	"github.com/lockkit/lockkit/internal/testserver"
)

// RunFunc is an example's run function.
type RunFunc func(ctx context.Context, w io.Writer, env *exampleenv.Env) error

// OnRedis runs run against a fresh redis-server on a loopback port, reached
// through REDIS_URL as a user would, and returns the output: the backend
// notice, the narrative and the span summary. A run error fails the test.
func OnRedis(t *testing.T, service string, run RunFunc) string {
	t.Helper()
	srv := testserver.StartRedis(t)
	t.Setenv("REDIS_URL", "redis://"+srv.Addr())
	t.Setenv("DATABASE_URL", "")
	noExport(t)
	return Run(t, service, run)
}

// Embedded runs run with REDIS_URL unset, so on the embedded miniredis.
func Embedded(t *testing.T, service string, run RunFunc) string {
	t.Helper()
	t.Setenv("REDIS_URL", "")
	t.Setenv("DATABASE_URL", "")
	noExport(t)
	return Run(t, service, run)
}

// OnPostgres runs run with DATABASE_URL set to a fresh PostgreSQL server on a
// loopback port (and REDIS_URL unset).
func OnPostgres(t *testing.T, service string, run RunFunc) string {
	t.Helper()
	pg := testserver.StartPostgres(t)
	t.Setenv("DATABASE_URL", pg.DSN())
	t.Setenv("REDIS_URL", "")
	noExport(t)
	return Run(t, service, run)
}

// noExport turns trace export off, so that the summary is printed.
func noExport(t *testing.T) {
	for _, v := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"} {
		t.Setenv(v, "")
	}
}

// Run runs run in the current environment (REDIS_URL, OTEL_*).
func Run(t *testing.T, service string, run RunFunc) string {
	t.Helper()
	ctx := context.Background()
	var out bytes.Buffer
	env, err := exampleenv.Open(ctx, service, &out)
	if err != nil {
		t.Fatal(err)
	}
	err = run(ctx, env.Out, env)
	if cerr := env.Close(); cerr != nil {
		t.Errorf("closing the env: %v", cerr)
	}
	t.Logf("output:\n%s", out.String())
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return out.String()
}

// Lines returns the lines of out that contain substr.
func Lines(out, substr string) []string {
	var found []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, substr) {
			found = append(found, l)
		}
	}
	return found
}

// EmbeddedNotice is the start of the line that announces the embedded Redis.
const EmbeddedNotice = "lockkit: no REDIS_URL set; using an embedded in-process Redis (miniredis) at 127.0.0.1:"

// CheckEmbeddedNotice checks that out starts with the one-line notice, and
// has it only once.
func CheckEmbeddedNotice(t *testing.T, out string) {
	t.Helper()
	if n := len(Lines(out, "embedded in-process Redis")); n != 1 {
		t.Errorf("the embedded-Redis notice appears %d times, want once", n)
	}
	if !strings.HasPrefix(out, EmbeddedNotice) {
		t.Errorf("output does not start with the notice %q...", EmbeddedNotice)
	}
}

// CheckRealRedis checks that out names the REDIS_URL server and does not
// claim to be embedded.
func CheckRealRedis(t *testing.T, out string) {
	t.Helper()
	if !strings.HasPrefix(out, "lockkit: using the Redis at 127.0.0.1:") {
		t.Errorf("output does not start with the REDIS_URL notice")
	}
	if len(Lines(out, "embedded")) != 0 {
		t.Errorf("output mentions an embedded Redis while REDIS_URL is set")
	}
}
