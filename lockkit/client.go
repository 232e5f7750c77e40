package lockkit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/lockkit/lockkit/breaker"
	"github.com/lockkit/lockkit/telemetry"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// SupportPackageIsVersion1 is referenced by generated code
// (const _ = lockkit.SupportPackageIsVersion1). A runtime that can no longer
// serve code generated for version 1 drops the constant, so a stale
// generated file fails to compile instead of misbehaving at run time.
const SupportPackageIsVersion1 = true

// DefaultCommandTimeout bounds each Redis command a lock operation sends.
const DefaultCommandTimeout = 500 * time.Millisecond

// Client runs lock operations on one Redis deployment. It is safe for
// concurrent use. Create one per process with New and Close it on shutdown.
type Client struct {
	be         backend
	redlock    []redis.UniversalClient // further Redlock nodes; none for a single deployment
	redlockOpt bool                    // WithRedlock was given
	log        *slog.Logger
	cmdTimeout time.Duration
	brSettings breaker.Settings
	telOpts    telemetry.Options
	tel        *telemetry.Instruments
	ttlEnv     map[string]time.Duration

	sched scheduler // lease deadlines and renewals

	mu     sync.Mutex
	closed bool
	leases map[*Lease]struct{}
	bg     sync.WaitGroup // renewals and background releases
}

// Option configures a Client.
type Option func(*Client)

// WithLogger sets where the client logs lost leases, failed releases and
// other events that no caller sees as an error. Default: slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(c *Client) {
		if l != nil {
			c.log = l
		}
	}
}

// WithCommandTimeout bounds each Redis command (acquire, extend, release).
// Keep it well under the shortest TTL. Default: DefaultCommandTimeout.
//
// The timeout reaches the network only when the go-redis client has
// ContextTimeoutEnabled set; otherwise go-redis applies its own read and
// write timeouts. Lease deadlines are tracked locally either way.
func WithCommandTimeout(d time.Duration) Option {
	return func(c *Client) {
		if d > 0 {
			c.cmdTimeout = d
		}
	}
}

// WithTracerProvider sets where lockkit's spans go. Default: the global
// provider (otel.GetTracerProvider), followed if it is replaced later.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *Client) { c.telOpts.TracerProvider = tp }
}

// WithMeterProvider sets where lockkit's metrics go. Default: the global
// provider, followed if it is replaced later.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *Client) { c.telOpts.MeterProvider = mp }
}

// WithKeyMode says how lock keys appear in spans (the lockkit.key
// attribute), for keys that hold personal data: telemetry.KeyRaw (default),
// telemetry.KeyHashed (HMAC-SHA-256 with hashSecret, or SHA-256 when nil:
// searchable, not readable) or telemetry.KeyOmitted. Log lines follow the
// same mode. Metrics never carry keys.
func WithKeyMode(mode telemetry.KeyMode, hashSecret []byte) Option {
	return func(c *Client) { c.telOpts.KeyMode, c.telOpts.KeyHashSecret = mode, hashSecret }
}

// WithBreaker sets the circuit breakers' settings (zero fields keep the
// defaults documented in package breaker). There is one breaker per backend
// node. It gates acquisitions only: while it is open an acquisition fails at
// once with an error matching ErrUnavailable and no lease is granted.
// Renewals and releases go through regardless, since they cannot grant a lock
// and should succeed the moment the node is back; a held lease whose
// renewals fail is lost at its local deadline as always.
func WithBreaker(s breaker.Settings) Option {
	return func(c *Client) { c.brSettings = s }
}

// New returns a client over rdb: a *redis.Client, a Sentinel failover client
// or a *redis.ClusterClient. It opens no connections of its own and does not
// close rdb. It reads the LOCKKIT_TTL_* environment variables once and fails
// if one of them is invalid.
func New(rdb redis.UniversalClient, opts ...Option) (*Client, error) {
	if rdb == nil {
		return nil, errors.New("lockkit: New: nil redis client")
	}
	c := &Client{
		log:        slog.Default(),
		cmdTimeout: DefaultCommandTimeout,
		leases:     make(map[*Lease]struct{}),
	}
	for _, o := range opts {
		o(c)
	}
	// Every log line of a lease carries its trace and span ids.
	c.log = slog.New(telemetry.NewLogHandler(c.log.Handler()))
	tel, err := telemetry.New(c.telOpts)
	if err != nil {
		return nil, fmt.Errorf("lockkit: telemetry: %w", err)
	}
	c.tel = tel
	userOnChange := c.brSettings.OnStateChange
	c.brSettings.OnStateChange = func(name string, from, to breaker.State) {
		c.breakerChanged(name, from, to)
		if userOnChange != nil {
			userOnChange(name, from, to)
		}
	}
	if c.redlockOpt && len(c.redlock) == 0 {
		return nil, errors.New("lockkit: WithRedlock needs the other nodes: New(node0, WithRedlock(node1, node2)) runs Redlock over 3")
	}
	if len(c.redlock) > 0 {
		be, err := newRedlockBackend(append([]redis.UniversalClient{rdb}, c.redlock...), c.brSettings, c.cmdTimeout)
		if err != nil {
			return nil, err
		}
		c.be = be
	} else {
		c.be = newRedisBackend(rdb, c.brSettings, c.cmdTimeout)
	}
	for _, b := range c.be.breakers() {
		c.tel.BreakerState(context.Background(), b.Name(), int(breaker.StateClosed))
	}
	ttlEnv, err := readTTLOverrides(environ())
	if err != nil {
		return nil, err
	}
	c.ttlEnv = ttlEnv
	return c, nil
}

// DomainSpec declares a lock domain: generated code holds one per domain of
// lockkit.yaml.
type DomainSpec struct {
	// Name is the domain's low-cardinality name ("table", "user_digest"):
	// used in telemetry and in the LOCKKIT_TTL_<NAME> override.
	Name string
	// Pattern is the key pattern from the schema, for documentation and
	// telemetry ("user:{id:int64}:digest").
	Pattern string
	// Prefix starts every key of the domain; "" means DefaultPrefix.
	Prefix string
	// Policy is the domain's TTL, renewal, retry and fencing.
	Policy Policy
}

// Domain is a DomainSpec bound to a client, with its environment override
// applied and its policy validated.
type Domain struct {
	c      *Client
	tel    *telemetry.Domain
	name   string
	prefix string
	policy Policy
	drift  time.Duration
	err    error // a spec error, returned by every operation
}

// Domain binds spec to c. It never fails: an invalid spec yields a Domain
// whose locks return the validation error from every operation, and a nil
// client yields a nil Domain, whose locks return ErrNoClient.
//
// When LOCKKIT_TTL_<NAME> overrides the TTL, an explicit RenewInterval keeps
// its share of the TTL (ttl 30s, renew 10s → renew 3s under a 9s override).
func (c *Client) Domain(spec DomainSpec) *Domain {
	if c == nil {
		return nil
	}
	d := &Domain{c: c, name: spec.Name, prefix: spec.Prefix, tel: c.tel.Domain(spec.Name)}
	if d.prefix == "" {
		d.prefix = DefaultPrefix
	}
	p := spec.Policy
	if ttl, ok := c.ttlEnv[envName(spec.Name)]; ok {
		// Keep the renew interval's share of the TTL: a schema saying
		// ttl 30s, renew 10s renews every 3s under LOCKKIT_TTL_X=9s.
		if p.RenewInterval > 0 && p.TTL > 0 {
			p.RenewInterval = time.Duration(float64(p.RenewInterval) * float64(ttl) / float64(p.TTL))
		}
		p.TTL = ttl
	}
	d.policy = p.withDefaults()
	var errs []error
	if spec.Name == "" {
		errs = append(errs, errors.New("name must not be empty"))
	}
	if strings.ContainsAny(d.prefix, "{}") {
		// The key's own braces are its Redis Cluster hash tag; a brace in
		// the prefix would move the tag and split a lock from its counter.
		errs = append(errs, fmt.Errorf("prefix %q must not contain '{' or '}'", d.prefix))
	}
	if err := d.policy.validate(); err != nil {
		errs = append(errs, err)
	}
	if len(c.redlock) > 0 && d.policy.Fencing {
		errs = append(errs, errRedlockFencing)
	}
	if err := errors.Join(errs...); err != nil {
		d.err = fmt.Errorf("lockkit: domain %q: %w", spec.Name, err)
	}
	// The Redlock drift allowance: clocks may run at slightly different
	// rates, so a lease is trusted a little less than its TTL.
	d.drift = d.policy.TTL/100 + 2*time.Millisecond
	return d
}

// Name is the domain's name.
func (d *Domain) Name() string { return d.name }

// Policy is the domain's effective policy: defaults and the environment
// override applied.
func (d *Domain) Policy() Policy { return d.policy }

// Ping checks that the backend answers.
func (c *Client) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.cmdTimeout)
	defer cancel()
	if err := c.be.ping(ctx); err != nil {
		return fmt.Errorf("%w: ping: %w", ErrUnavailable, err)
	}
	return nil
}

// Close stops every renewal and releases every lease the client holds, then
// waits for the renewals to end. Afterwards every operation returns
// ErrClosed. It does not close the go-redis client.
func (c *Client) Close(ctx context.Context) error {
	c.mu.Lock()
	c.closed = true
	held := make([]*Lease, 0, len(c.leases))
	for l := range c.leases {
		held = append(held, l)
	}
	c.mu.Unlock()

	var errs []error
	for _, l := range held {
		if err := l.Release(ctx); err != nil && !errors.Is(err, ErrNotHeld) {
			errs = append(errs, err)
		}
	}
	done := make(chan struct{})
	go func() { c.bg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("lockkit: close: waiting for renewals: %w", ctx.Err()))
	}
	c.be.close()
	return errors.Join(errs...)
}

// logKey is a lock key as log lines show it: as the key mode says (raw,
// hashed or omitted), like the lockkit.key span attribute. Error messages
// returned to the caller keep the raw key.
func (c *Client) logKey(key string) string {
	switch c.telOpts.KeyMode {
	case telemetry.KeyHashed:
		return telemetry.HashKey(key, c.telOpts.KeyHashSecret)
	case telemetry.KeyOmitted:
		return "(omitted)"
	}
	return key
}

// breakerChanged makes a breaker's state change visible.
func (c *Client) breakerChanged(name string, from, to breaker.State) {
	level := slog.LevelInfo
	if to == breaker.StateOpen {
		level = slog.LevelWarn
	}
	c.log.Log(context.Background(), level, "lockkit: circuit breaker state changed", "node", name, "from", from.String(), "to", to.String())
	c.tel.BreakerState(context.Background(), name, int(to))
}

// track registers a new lease, or refuses it when the client is closed.
func (c *Client) track(l *Lease) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.leases[l] = struct{}{}
	return true
}

func (c *Client) untrack(l *Lease) {
	c.mu.Lock()
	delete(c.leases, l)
	c.mu.Unlock()
}

// counted runs f on the calling goroutine, counted so that Close waits for
// it. Once the client is closed f still runs, uncounted: the closed check
// and the Add share c.mu with Close, so no Add can race Close's Wait.
func (c *Client) counted(f func()) {
	c.mu.Lock()
	closed := c.closed
	if !closed {
		c.bg.Add(1)
	}
	c.mu.Unlock()
	if !closed {
		defer c.bg.Done()
	}
	f()
}

// background runs f on its own goroutine, which Close waits for.
func (c *Client) background(f func()) { go c.counted(f) }

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}
