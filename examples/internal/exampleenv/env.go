// Package exampleenv is the setup shared by lockkit's runnable examples: which
// Redis they talk to, where their traces go, and one lockkit client per
// simulated replica.
//
// Open picks the backend: the server in REDIS_URL, or, with REDIS_URL unset,
// an embedded in-process Redis (miniredis) on 127.0.0.1, announced in one line.
// It picks the telemetry: OTLP trace export (to Jaeger) when
// OTEL_EXPORTER_OTLP_ENDPOINT is set, through otelsetup.Setup (metrics too
// only when OTEL_METRICS_EXPORTER or OTEL_EXPORTER_OTLP_METRICS_ENDPOINT asks
// for them: Jaeger takes no metrics); otherwise an in-process tracer provider
// whose spans Close prints as a compact summary.
//
// Every NewClient is a separate replica: a new go-redis client (its own
// connection pool) and a new lockkit client over the same server, as two
// processes would have.
package exampleenv

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	neturl "net/url"
	"os"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/lockkit/lockkit/telemetry/otelsetup"
)

// Env is an example's backend and telemetry. Close it when the example ends.
type Env struct {
	// Out is where the example writes its narrative. It is the writer given
	// to Open, made safe for concurrent use: the lockkit clients' log lines
	// (a lease lost, a failed release) go there too, in order.
	Out io.Writer
	// TracerProvider is where the example's spans and lockkit's go: the
	// global provider that otelsetup.Setup installed when exporting, or the
	// summary's own.
	TracerProvider trace.TracerProvider
	// Embedded reports whether the backend is the in-process miniredis.
	Embedded bool
	// Addr is the Redis server's host:port.
	Addr string

	opts     *redis.Options
	mini     *miniredis.Miniredis
	summary  *summary // nil when exporting
	shutdown func(context.Context) error
	log      *slog.Logger

	pg *pgEnv // nil unless DATABASE_URL is set

	mu       sync.Mutex
	rdbs     []*redis.Client
	replicas []*replica
}

type replica struct {
	lk      *lockkit.Client
	rdb     *redis.Client
	crashed bool
}

// Open prepares an example's environment. serviceName names the example in
// traces ("lockkit-example-booking"); stdout receives the backend notice, the
// narrative (through Out) and, at Close, the span summary.
func Open(ctx context.Context, serviceName string, stdout io.Writer) (*Env, error) {
	out := &lockedWriter{w: stdout}
	e := &Env{Out: out}
	e.log = slog.New(slog.NewTextHandler(&prefixWriter{prefix: "   lockkit log: ", w: out}, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{} // the narrative has no clock; keep lines short
			}
			return a
		},
	}))

	pg, err := openPostgres(out)
	if err != nil {
		return nil, err
	}
	e.pg = pg
	if err := e.openBackend(out); err != nil {
		return nil, err
	}
	if err := e.openTelemetry(ctx, serviceName, out); err != nil {
		e.closeBackend()
		return nil, err
	}
	return e, nil
}

func (e *Env) openBackend(out io.Writer) error {
	if url := os.Getenv("REDIS_URL"); url != "" {
		opts, err := redis.ParseURL(url)
		if err != nil {
			// The URL may hold a password: never echo it.
			var uerr *neturl.Error
			if errors.As(err, &uerr) {
				err = uerr.Err
			}
			return fmt.Errorf("exampleenv: REDIS_URL is not a Redis URL (redis://[:password@]host:port[/db]): %w", err)
		}
		e.opts = opts
		e.Addr = opts.Addr
		fmt.Fprintf(out, "lockkit: using the Redis at %s (REDIS_URL)\n", opts.Addr)
		return nil
	}
	m := miniredis.NewMiniRedis()
	// Keys expire as the wall clock passes, as on a real server; by default
	// miniredis keeps every TTL until the test calls FastForward, and then no
	// lock would ever expire.
	m.ClockTTL(true)
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return fmt.Errorf("exampleenv: starting the embedded Redis: %w", err)
	}
	e.mini = m
	e.Embedded = true
	e.Addr = m.Addr()
	e.opts = &redis.Options{Addr: m.Addr()}
	fmt.Fprintf(out, "lockkit: no REDIS_URL set; using an embedded in-process Redis (miniredis) at %s\n", m.Addr())
	return nil
}

func (e *Env) openTelemetry(ctx context.Context, serviceName string, out io.Writer) error {
	if otelsetup.ExportConfigured() {
		shutdown, err := setupTracesOnly(ctx, serviceName)
		if err != nil {
			return err
		}
		e.shutdown = shutdown
		e.TracerProvider = otel.GetTracerProvider()
		endpoint := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
		if endpoint == "" {
			endpoint = os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
		}
		if endpoint != "" {
			fmt.Fprintf(out, "lockkit: exporting traces over OTLP to %s as service %q (see them in Jaeger)\n", endpoint, serviceName)
		}
		if os.Getenv("OTEL_METRICS_EXPORTER") == "prometheus" {
			fmt.Fprintf(out, "lockkit: serving metrics for Prometheus at http://%s:%s/metrics (OTEL_EXPORTER_PROMETHEUS_HOST/PORT) while it runs\n",
				cmp.Or(os.Getenv("OTEL_EXPORTER_PROMETHEUS_HOST"), "localhost"), cmp.Or(os.Getenv("OTEL_EXPORTER_PROMETHEUS_PORT"), "9464"))
		}
		if endpoint == "" {
			// No traces exported: keep the printed span summary.
			e.summary = newSummary()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(e.summary))
			shutdownMetrics := e.shutdown
			e.shutdown = func(ctx context.Context) error { return errors.Join(tp.Shutdown(ctx), shutdownMetrics(ctx)) }
			e.TracerProvider = tp
		}
		return nil
	}
	e.summary = newSummary()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(e.summary))
	e.shutdown = tp.Shutdown
	e.TracerProvider = tp
	return nil
}

// setupTracesOnly is otelsetup.Setup with metrics export off unless the
// environment asks for it (OTEL_METRICS_EXPORTER or a metrics endpoint):
// the examples send to Jaeger, which takes traces only and answers
// /v1/metrics with 404.
func setupTracesOnly(ctx context.Context, serviceName string) (func(context.Context) error, error) {
	const v = "OTEL_METRICS_EXPORTER"
	if os.Getenv(v) == "" && os.Getenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") == "" {
		if err := os.Setenv(v, "none"); err != nil {
			return nil, err
		}
		defer os.Unsetenv(v)
	}
	return otelsetup.Setup(ctx, serviceName)
}

// Tracer returns a tracer for the example's own spans, which nest around and
// inside lockkit's.
func (e *Env) Tracer(name string) trace.Tracer { return e.TracerProvider.Tracer(name) }

// NewRedis returns a new go-redis client, with its own connection pool, on
// the example's server. Close closes it.
func (e *Env) NewRedis() *redis.Client {
	o := *e.opts
	// Let lockkit's per-command timeouts reach the network.
	o.ContextTimeoutEnabled = true
	rdb := redis.NewClient(&o)
	e.mu.Lock()
	e.rdbs = append(e.rdbs, rdb)
	e.mu.Unlock()
	return rdb
}

// NewClient returns a new replica: a lockkit client over a new go-redis
// client. Its spans go to TracerProvider and its log lines to Out; opts come
// after the Env's own, so they can override them.
func (e *Env) NewClient(opts ...lockkit.Option) (*lockkit.Client, error) {
	return e.NewClientOn(e.NewRedis(), opts...)
}

// NewClientOn returns a lockkit client over rdb, which should come from
// NewRedis. Close closes it before rdb.
func (e *Env) NewClientOn(rdb *redis.Client, opts ...lockkit.Option) (*lockkit.Client, error) {
	all := append([]lockkit.Option{lockkit.WithLogger(e.log), lockkit.WithTracerProvider(e.TracerProvider)}, opts...)
	lk, err := lockkit.New(goredis.New(rdb), all...)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.replicas = append(e.replicas, &replica{lk: lk, rdb: rdb})
	e.mu.Unlock()
	return lk, nil
}

// Crash makes c's replica die as a killed process does: its go-redis client
// is closed, so its connections drop, its renewals never reach Redis again
// and it never releases what it holds. What it held stays locked until the
// TTL expires it. Close does not shut c down cleanly.
func (e *Env) Crash(c *lockkit.Client) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, r := range e.replicas {
		if r.lk == c {
			r.crashed = true
			if e.crashPostgres(c) {
				return nil
			}
			return r.rdb.Close()
		}
	}
	return errors.New("exampleenv: Crash: the client was not made by this Env")
}

// Close shuts the replicas down (releasing what they still hold), prints the
// span summary unless traces are exported, flushes and stops the telemetry,
// and stops the embedded Redis. A failed trace export is reported on Out,
// not returned: the example itself did not fail.
func (e *Env) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var errs []error

	e.mu.Lock()
	replicas, rdbs := e.replicas, e.rdbs
	e.replicas, e.rdbs = nil, nil
	e.mu.Unlock()
	for _, r := range replicas {
		err := r.lk.Close(ctx)
		if err != nil && !r.crashed {
			// A crashed replica cannot release; its keys expire by TTL.
			errs = append(errs, err)
		}
	}
	if e.summary != nil {
		e.summary.print(e.Out)
	}
	if e.shutdown != nil {
		if err := e.shutdown(ctx); err != nil {
			// The example did its work; only the traces did not get out.
			fmt.Fprintf(e.Out, "lockkit: exporting telemetry failed (is Jaeger listening?): %v\n", err)
		}
	}
	for _, rdb := range rdbs {
		if err := rdb.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
			errs = append(errs, err)
		}
	}
	e.closePostgres()
	e.closeBackend()
	return errors.Join(errs...)
}

func (e *Env) closeBackend() {
	if e.mini != nil {
		e.mini.Close()
		e.mini = nil
	}
}

// lockedWriter serializes writes: the narrative and the lockkit clients' log
// lines come from different goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// prefixWriter starts every write (slog writes one record per Write) with
// prefix.
type prefixWriter struct {
	prefix string
	w      io.Writer
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	if _, err := p.w.Write(append([]byte(p.prefix), b...)); err != nil {
		return 0, err
	}
	return len(b), nil
}

// Main is an example's main: it opens the Env for the example called name
// (service "lockkit-example-<name>"), runs run with the Env's output, closes
// the Env, and exits 1 with the error when either failed.
func Main(name string, run func(ctx context.Context, w io.Writer, env *Env) error) {
	ctx := context.Background()
	env, err := Open(ctx, "lockkit-example-"+name, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
	err = run(ctx, env.Out, env)
	if cerr := env.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}
