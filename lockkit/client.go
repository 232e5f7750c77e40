package lockkit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockkit/lockkit/internal/obs"

	"github.com/lockkit/lockkit/breaker"
	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/internal/errcheck"
	"github.com/lockkit/lockkit/internal/holder"
	"github.com/lockkit/lockkit/internal/keylang"
	"github.com/lockkit/lockkit/internal/policy"
	"github.com/lockkit/lockkit/telemetry"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// SupportPackageIsVersion1 is referenced by generated code
// (const _ = lockkit.SupportPackageIsVersion1). A runtime that can no longer
// serve code generated for version 1 drops the constant, so a stale
// generated file fails to compile instead of misbehaving at run time.
const SupportPackageIsVersion1 = true

// Client runs lock operations on one backend (see Backend). It is safe for
// concurrent use. Create one per process with New and Close it on shutdown.
type Client struct {
	be         driver.Backend            // guarded by the Client's breakers (a quorum backend: its members)
	noFencing  error                     // why fencing domains are refused, for a backend that cannot fence
	caps       driver.Capabilities       // what the backend declared when it was opened
	kind       string                    // the Spec's name ("redis", "postgres"), for errors
	queue      driver.Queue              // the guarded backend's FIFO queues; nil when it keeps none
	waiter     driver.Waiter             // the guarded backend's waits in its store's own queue; nil when it has none
	noQueue    error                     // why FIFO domains are refused, when queue is nil
	checkTTL   func(time.Duration) error // the backend's own TTL limit; nil when it has none
	holders    driver.HolderReader       // reads a key's holder (elections); nil when the backend cannot
	log        *slog.Logger
	cmdTimeout time.Duration
	brSettings breaker.Settings
	telOpts    obs.Options
	tel        *obs.Instruments
	env        map[string]envOverride // the LOCKKIT_* overrides, by variable

	// replicated names the deployment when it fails over to asynchronous
	// replicas (Sentinel, Cluster); quietReplicas are the domains whose
	// warning about it is silenced; warned holds the warnings given once
	// (a domain name for the replicas, renewMarginWarned for the renew margin).
	replicated    string
	quietReplicas map[string]bool
	// sharedEnv: overrides naming no domain of this program are logged
	// and ignored (WithSharedEnvironment), not refused.
	sharedEnv bool
	warned    sync.Map

	// who is what the client records with each lock it takes (host, pid,
	// owner); whoDesc is its description, made once (see internal/holder).
	who     holder.Holder
	whoDesc string

	sched scheduler // lease deadlines and renewals

	brMu   sync.Mutex
	guards []*guarded // every breaker-guarded backend or member, for health reports

	mu     sync.Mutex
	closed bool
	// closeDone is closed when the first Close has finished, closeErr
	// being what it returned: a concurrent Close waits for it and returns
	// the same, so no lease the first is still releasing is counted as
	// left.
	closeDone chan struct{}
	closeErr  error
	// closeCtx ends when Close starts: it ends every wait between
	// acquisition attempts, which then returns ErrClosed.
	closeCtx    context.Context
	closeCancel context.CancelFunc
	leases      map[*Lease]struct{}
	bg          sync.WaitGroup // renewals

	// acquiring counts, by key, the acquisitions under way: a wait, an
	// attempt in flight, a grant being given back because the client
	// closed, a give-back of a token whose acquire went unanswered (such a
	// token may hold its key). Close waits for them, so that it returns only
	// once no key is held by this client's tokens, or names the keys still
	// in doubt. nAcquiring is their sum; acquired, when Close waits, is
	// closed as it drops to 0.
	acquiring  map[string]int
	nAcquiring int
	acquired   chan struct{}
}

// Option configures a Client: one of the With functions below. The zero
// Option is refused by New.
type Option struct{ set func(*Client) }

// WithOwner names this client in the description recorded with each lock it
// takes (beside the host name, the process id and, when the acquire is
// traced, its trace id), which `lockkit inspect` shows as the holder: a
// service or replica name, say. Long names are cut to 64 bytes. Recording it
// costs no round trip: it is part of the value the acquire writes.
func WithOwner(name string) Option {
	return Option{func(c *Client) { c.who.Owner = name }}
}

// WithLogger sets where the client logs lost leases, failed releases and
// other events that no caller sees as an error. Default: slog.Default().
func WithLogger(l *slog.Logger) Option {
	return Option{func(c *Client) {
		if l != nil {
			c.log = l
		}
	}}
}

// WithCommandTimeout bounds each backend command (acquire, extend, release).
// Keep it well under the shortest TTL. Default: 500ms.
//
// On Redis, the timeout reaches the network only when the go-redis client has
// ContextTimeoutEnabled set; otherwise go-redis applies its own read and
// write timeouts. Lease deadlines are tracked locally either way.
func WithCommandTimeout(d time.Duration) Option {
	return Option{func(c *Client) {
		if d > 0 {
			c.cmdTimeout = d
		}
	}}
}

// WithTracerProvider sets where lockkit's spans go. Default: the global
// provider (otel.GetTracerProvider), followed if it is replaced later.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return Option{func(c *Client) { c.telOpts.TracerProvider = tp }}
}

// WithMeterProvider sets where lockkit's metrics go. Default: the global
// provider, followed if it is replaced later.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return Option{func(c *Client) { c.telOpts.MeterProvider = mp }}
}

// WithKeyMode says how lock keys appear in spans (the lockkit.key
// attribute), for keys that hold personal data: telemetry.KeyRaw (default),
// telemetry.KeyHashed (HMAC-SHA-256 with hashSecret, or SHA-256 when nil:
// searchable, not readable) or telemetry.KeyOmitted. Log lines follow the
// same mode. Metrics never carry keys.
func WithKeyMode(mode telemetry.KeyMode, hashSecret []byte) Option {
	return Option{func(c *Client) { c.telOpts.KeyMode, c.telOpts.KeyHashSecret = mode, hashSecret }}
}

// WithoutReplicaWarning silences, for the named domains, the warning a
// Client on Redis Sentinel or Cluster logs when a fencing domain sets no
// replicas: a failover to a replica that had not received the grant can
// give the lock to a second holder (docs/deployments.md#when-to-use-which). Use it
// where fences alone are the protection you chose.
func WithoutReplicaWarning(domains ...string) Option {
	return Option{func(c *Client) {
		if c.quietReplicas == nil {
			c.quietReplicas = map[string]bool{}
		}
		for _, d := range domains {
			c.quietReplicas[d] = true
		}
	}}
}

// WithSharedEnvironment is for services that share one environment (one
// Kubernetes ConfigMap, say) and so see each other's overrides: an
// override (LOCKKIT_TTL_*, LOCKKIT_PERMITS_*, or another policy field's,
// docs/schema.md) that names no domain of this program is logged at Warn by
// New, once, and ignored, instead of making New fail. The variables that
// name this program's domains are checked as always. Without it New refuses
// such a variable, since a mistyped name would otherwise override nothing in
// silence.
func WithSharedEnvironment() Option {
	return Option{func(c *Client) { c.sharedEnv = true }}
}

// WithBreaker sets the circuit breakers' settings (zero fields keep the
// defaults documented in package breaker). There is one breaker per backend
// node. It gates acquisitions only: while it is open an acquisition fails at
// once with an error matching ErrUnavailable and no lease is granted.
// Renewals and releases go through regardless, since they cannot grant a lock
// and should succeed the moment the node is back; a held lease whose
// renewals fail is lost at its local deadline as always.
func WithBreaker(s breaker.Settings) Option {
	return Option{func(c *Client) { c.brSettings = s }}
}

// New returns a client whose locks live in b: goredis.New(rdb),
// goredis.Redlock(nodes...), postgres.New(pool), or any backend written
// against package driver. The Client applies retries, circuit breakers (one
// per node), telemetry, lease tracking, renewal and deadlines the same way
// for every backend, and reports the same errors: contention is
// ErrNotAcquired, a backend failure ErrUnavailable, a loss ErrLockLost. It opens no
// connections of its own and does not close the clients b was made from. It
// reads the override variables (LOCKKIT_TTL_*, LOCKKIT_PERMITS_* and the
// other policy fields' that docs/schema.md lists) once and fails if one of
// them is invalid.
func New(b driver.Spec, opts ...Option) (*Client, error) {
	c := &Client{
		log:        slog.Default(),
		cmdTimeout: policy.DefaultCommandTimeout,
		leases:     make(map[*Lease]struct{}),
		acquiring:  make(map[string]int),
		closeDone:  make(chan struct{}),
	}
	for i, o := range opts {
		if o.set == nil {
			return nil, fmt.Errorf("lockkit: New: option %d is the zero Option; use one of the With functions", i+1)
		}
		o.set(c)
	}
	if m := c.telOpts.KeyMode; m > telemetry.KeyOmitted {
		return nil, fmt.Errorf("lockkit: New: WithKeyMode: unknown key mode %d (telemetry.KeyRaw, KeyHashed or KeyOmitted)", m)
	}
	c.closeCtx, c.closeCancel = context.WithCancel(context.Background())
	c.who.Host, _ = os.Hostname()
	c.who.PID = os.Getpid()
	c.whoDesc = string(holder.AppendDescription(nil, c.who))
	// Every log line of a lease carries its trace and span ids.
	c.log = slog.New(telemetry.NewLogHandler(c.log.Handler()))
	tel, err := obs.New(c.telOpts)
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
	if err := c.open(b); err != nil {
		return nil, err
	}
	raw := environ()
	if c.sharedEnv {
		raw = c.dropOthersOverrides(raw)
	}
	env, err := readOverrides(raw)
	if err == nil {
		err = checkOverridesNameDomains(env)
	}
	if err == nil {
		err = checkRegisteredOverlaps()
	}
	if err != nil {
		_ = c.be.Close() // what the backend started of its own (Redlock's workers)
		return nil, err
	}
	c.env = env
	return c, nil
}

// open opens spec's backend and puts the Client's breakers in front of it:
// one per node (per Cluster master), or, for a quorum backend, one per
// member, through cfg.Guard.
func (c *Client) open(spec driver.Spec) error {
	if spec.Err != nil {
		return spec.Err
	}
	if spec.Open == nil {
		return errors.New("lockkit: New: no backend (use goredis.New(rdb), goredis.Redlock(nodes...) or postgres.New(pool))")
	}
	be, err := spec.Open(driver.Config{CommandTimeout: c.cmdTimeout, Guard: c.guard, Warn: c.log.Warn})
	if err != nil {
		return err
	}
	caps := be.Capabilities()
	if err := checkCapabilities(spec.Name, be, caps); err != nil {
		_ = be.Close()
		return err
	}
	c.caps = caps
	c.kind = spec.Name
	c.replicated = caps.Failover
	if !caps.Fences {
		c.noFencing = fmt.Errorf("fencing is not available on the %s backend", spec.Name)
		if caps.NoFences != "" {
			c.noFencing = errors.New(caps.NoFences)
		}
	}
	if tc, ok := be.(driver.TTLChecker); ok {
		c.checkTTL = tc.CheckTTL
	}
	if caps.Holders {
		// A read grants nothing: it bypasses the breakers, as extend and
		// release do.
		c.holders, _ = be.(driver.HolderReader)
	}
	if caps.Quorum {
		c.noQueue = errors.New("wait fifo is not available on Redlock: the queue lives on one deployment, and over N independent nodes there is no single order to be first in (N queues can disagree, and the head of a majority need not exist); use wait poll, or the Redis backend")
	} else {
		name := spec.Name
		if caps.Name != "" {
			name = caps.Name
		}
		g := c.guard(name, be).(*guarded)
		switch {
		case g.queue != nil:
			c.queue = g
		case g.waiter != nil:
			c.waiter = g
		default:
			c.noQueue = fmt.Errorf("wait fifo is not available on the %s backend: it keeps no FIFO queue (the Redis, PostgreSQL, etcd and ZooKeeper backends do); use wait poll", spec.Name)
		}
		be = g
	}
	c.be = be
	return nil
}

// checkCapabilities refuses a backend whose declared capabilities and
// methods disagree: a flag for an optional operation is a promise that the
// backend implements its interface.
func checkCapabilities(name string, be driver.Backend, caps driver.Capabilities) error {
	missing := func(flag, iface string) error {
		return fmt.Errorf("lockkit: New: the %s backend declares %s but does not implement driver.%s", name, flag, iface)
	}
	if _, ok := be.(driver.Queue); caps.FairQueue && !ok {
		return missing("FairQueue", "Queue")
	}
	if _, ok := be.(driver.Waiter); caps.ServerQueue && !ok {
		return missing("ServerQueue", "Waiter")
	}
	if caps.FairQueue && caps.ServerQueue {
		return fmt.Errorf("lockkit: New: the %s backend declares both FairQueue and ServerQueue; a backend waits in one queue", name)
	}
	if _, ok := be.(driver.Batcher); caps.Batching && !ok {
		return missing("Batching", "Batcher")
	}
	if _, ok := be.(driver.Router); caps.Routing && !ok {
		return missing("Routing", "Router")
	}
	if _, ok := be.(driver.HolderReader); caps.Holders && !ok {
		return missing("Holders", "HolderReader")
	}
	if caps.MinTTL < 0 || caps.TTLGranularity < 0 || caps.MaxTTL < 0 || (caps.MaxTTL > 0 && caps.MaxTTL < caps.MinTTL) {
		return fmt.Errorf("lockkit: New: the %s backend declares impossible TTL limits (min %v, granularity %v, max %v)", name, caps.MinTTL, caps.TTLGranularity, caps.MaxTTL)
	}
	return nil
}

// registered holds the domains this program declares: their names, by the
// name of their TTL override variable, and the key language of each that
// has a pattern, with the package that declared it.
var registered struct {
	sync.Mutex
	byEnv    map[string]string
	domains  []registeredDomain
	overlaps []error // domains of two packages that share keys; New reports them
}

type registeredDomain struct {
	pkg, name, prefix, pattern string
	keys                       *keylang.Compiled
}

// maxOverlapErrors bounds what New reports of overlapping domains.
const maxOverlapErrors = 20

// RegisterDomains declares the lock domains this program uses, so that New
// can tell a LOCKKIT_TTL_* variable that names one of them from a mistyped
// one, which would otherwise be ignored in silence, and can refuse two
// packages (two lockkit.yaml files) whose domains can produce the same key:
// their locks would exclude each other. Generated code registers its domains
// when its package is initialized; call RegisterDomains for DomainSpecs
// written by hand, before New.
func RegisterDomains(specs ...DomainSpec) {
	pkg := callerPackage()
	registered.Lock()
	defer registered.Unlock()
	if registered.byEnv == nil {
		registered.byEnv = make(map[string]string)
	}
	for _, s := range specs {
		for _, f := range policy.EnvFields() {
			registered.byEnv[policy.EnvNameFor(f, s.Name)] = s.Name
		}
		registerKeys(pkg, s)
		registered.byEnv[policy.EnvPermitsName(s.Name)] = s.Name
	}
}

// registerKeys records the key language of s, declared by package pkg, and
// each domain of another package whose keys it shares. One schema's own
// domains were checked against each other by the generator; a pattern that
// does not parse (DomainSpec.Pattern is documentation) is not compared.
func registerKeys(pkg string, s DomainSpec) {
	segs, ok := keylang.Parse(s.Pattern)
	if s.Pattern == "" || !ok {
		return
	}
	d := registeredDomain{pkg: pkg, name: s.Name, prefix: s.Prefix, pattern: s.Pattern, keys: keylang.Compile(segs)}
	if d.prefix == "" {
		d.prefix = policy.DefaultPrefix
	}
	for _, o := range registered.domains {
		if o.pkg == pkg && o.name == d.name {
			return // declared again by the same package
		}
	}
	for _, o := range registered.domains {
		// A prefix never holds a brace, so keys with different prefixes differ.
		if o.pkg == pkg || o.prefix != d.prefix || len(registered.overlaps) > maxOverlapErrors {
			continue
		}
		if suffix, shared := o.keys.Overlap(d.keys); shared {
			registered.overlaps = append(registered.overlaps, fmt.Errorf(
				"lockkit: domain %q (%s, pattern %q) and domain %q (%s, pattern %q) can produce the same key, e.g. %q: their locks would exclude each other; give each schema its own prefix (prefix: in lockkit.yaml, such as \"billing:lock:\")",
				d.name, d.pkg, d.pattern, o.name, o.pkg, o.pattern, policy.Key(d.prefix, suffix)))
		}
	}
	registered.domains = append(registered.domains, d)
}

// callerPackage is the import path of the package that called the caller
// of callerPackage: "example.com/app/locks" for a generated init.
func callerPackage() string {
	pc, _, _, ok := runtime.Caller(2)
	if !ok {
		return ""
	}
	name := runtime.FuncForPC(pc).Name() // example.com/app/locks.init.0
	slash := strings.LastIndexByte(name, '/') + 1
	if dot := strings.IndexByte(name[slash:], '.'); dot >= 0 {
		return name[:slash+dot]
	}
	return name
}

// checkRegisteredOverlaps reports the domains of two packages that share keys.
func checkRegisteredOverlaps() error {
	registered.Lock()
	defer registered.Unlock()
	errs := registered.overlaps
	if len(errs) > maxOverlapErrors {
		errs = append(errs[:maxOverlapErrors:maxOverlapErrors], errors.New("lockkit: and more domains that share keys"))
	}
	return errors.Join(errs...)
}

// checkOverridesNameDomains fails, naming the variable, when a TTL override
// names no registered domain.
func checkOverridesNameDomains(env map[string]envOverride) error {
	registered.Lock()
	defer registered.Unlock()
	var errs []error
	for name := range env {
		if _, ok := registered.byEnv[name]; ok {
			continue
		}
		known := make([]string, 0, len(registered.byEnv))
		for env := range registered.byEnv {
			known = append(known, env)
		}
		slices.Sort(known)
		hint := "no domain is registered (generated code registers its domains; call lockkit.RegisterDomains for hand-written ones)"
		if len(known) > 0 {
			hint = "the domains' variables are " + strings.Join(known, ", ")
		}
		errs = append(errs, fmt.Errorf("lockkit: %s names no lock domain of this program, so it would override nothing; %s", name, hint))
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errors.Join(errs...)
}

// dropOthersOverrides is environ without the overrides that name no
// registered domain (other services' under WithSharedEnvironment), each
// logged at Warn.
func (c *Client) dropOthersOverrides(environ []string) []string {
	registered.Lock()
	defer registered.Unlock()
	kept := environ[:0:0]
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if isOverride(name) {
			if _, ok := registered.byEnv[name]; !ok {
				c.log.Warn("lockkit: ignoring an override that names no lock domain of this program (WithSharedEnvironment)", "variable", name)
				continue
			}
		}
		kept = append(kept, kv)
	}
	return kept
}

// DomainSpec declares a lock domain: generated code holds one per domain of
// lockkit.yaml.
type DomainSpec struct {
	// Name is the domain's low-cardinality name ("table", "user_digest"):
	// used in telemetry and in the LOCKKIT_TTL_<NAME> override.
	Name string
	// Pattern is the key pattern from the schema ("user:{id:int64}:digest").
	// It is documentation only: the key is built by generated code.
	Pattern string
	// Prefix starts every key of the domain; "" means "lock:".
	Prefix string
	// Policy is the domain's TTL, renewal, retry and fencing.
	Policy Policy
}

// Domain is a DomainSpec bound to a client, with its environment override
// applied and its policy validated.
type Domain struct {
	c      *Client
	tel    *obs.Domain
	name   string
	prefix string
	policy Policy
	drift  time.Duration
	err    error // a spec error, returned by every operation
	// renewLag is a decaying high mark of how late after they were due
	// this domain's renewals were answered, in ns (observeRenewLag).
	renewLag atomic.Int64
}

// Domain binds spec to c. It never fails: an invalid spec yields a Domain
// whose locks return the validation error from every operation (see Err; the
// error is also logged once, here), and a nil client yields a nil Domain,
// whose locks return ErrNoClient.
//
// When LOCKKIT_TTL_<NAME> overrides the TTL, an explicit Renew keeps
// its share of the TTL (ttl 30s, renew 10s → renew 3s under a 9s override).
// The policy is validated after the override, against the client's command
// timeout: a renewal must be able to land before the lease's local deadline.
func (c *Client) Domain(spec DomainSpec) *Domain {
	if c == nil {
		return nil
	}
	d := &Domain{c: c, name: spec.Name, prefix: spec.Prefix, tel: c.tel.DomainKind(spec.Name, spec.Policy.Kind)}
	if d.prefix == "" {
		d.prefix = policy.DefaultPrefix
	}
	p := spec.Policy
	var scaleErr error
	env := policy.EnvName(spec.Name)
	ttlOverride, overridden := c.env[env]
	ttl := ttlOverride.d
	if overridden {
		// Keep the renew interval's share of the TTL: a schema saying
		// ttl 30s, renew 10s renews every 3s under LOCKKIT_TTL_X=9s.
		if p.Renew > 0 && p.TTL > 0 {
			p.Renew, scaleErr = scaleRenew(p.Renew, p.TTL, ttl)
		}
		p.TTL = ttl
	}
	// The other duration fields' overrides (internal/policy's
	// DurationFields with an EnvPrefix), each named in the error of a
	// policy that fails with it.
	var fieldOverrides []string
	for _, f := range policy.DurationFields() {
		if f.EnvPrefix == "" {
			continue
		}
		fenv := policy.EnvNameFor(f, spec.Name)
		if o, ok := c.env[fenv]; ok {
			reflect.ValueOf(&p).Elem().FieldByName(f.GoName).SetInt(int64(o.d))
			fieldOverrides = append(fieldOverrides, fmt.Sprintf("with the %s %v from %s", f.Words(), o.d, fenv))
		}
	}
	permitsEnv := policy.EnvPermitsName(spec.Name)
	permits, permitsOverridden := c.env[permitsEnv]
	if permitsOverridden {
		p.Permits = permits.n
	}
	d.policy = p.withDefaults()
	var errs []error
	if spec.Name == "" {
		errs = append(errs, errors.New("name must not be empty"))
	}
	if err := policy.CheckPrefix(d.prefix); err != nil {
		errs = append(errs, err)
	}
	if scaleErr != nil {
		errs = append(errs, fmt.Errorf("%w (with the TTL %v from %s)", scaleErr, ttl, env))
	} else if err := d.policy.validate(c.cmdTimeout); err != nil {
		if overridden {
			err = fmt.Errorf("%w (with the TTL %v from %s)", err, ttl, env)
		}
		for _, o := range fieldOverrides {
			err = fmt.Errorf("%w (%s)", err, o)
		}
		if permitsOverridden {
			err = fmt.Errorf("%w (with the permits %d from %s)", err, permits.n, permitsEnv)
		}
		errs = append(errs, err)
	}
	if c.noFencing != nil && d.policy.Fencing {
		errs = append(errs, c.noFencing)
	}
	if err := policy.CheckStoreTTL(d.policy.TTL, c.kind, c.caps.MinTTL, c.caps.TTLGranularity, c.caps.MaxTTL); err != nil {
		errs = append(errs, err)
	}
	if c.checkTTL != nil && d.policy.TTL > 0 {
		if err := c.checkTTL(d.policy.TTL); err != nil {
			errs = append(errs, err)
		}
	}
	if c.noQueue != nil && d.policy.fifo() {
		errs = append(errs, c.noQueue)
	}
	if err := c.checkKind(d.policy.Kind); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		d.err = fmt.Errorf("lockkit: domain %q: %w", spec.Name, err)
		if c.log != nil {
			c.log.Error("lockkit: invalid lock domain; its locks return this error", "domain", spec.Name, "error", d.err)
		}
	}
	d.drift = policy.Drift(d.policy.TTL)
	if d.err == nil {
		if err := policy.CheckRenewMargin(d.policy.TTL, d.policy.Renew, d.extendTimeout()); err != nil {
			if _, dup := c.warned.LoadOrStore(renewMarginWarned{spec.Name}, true); !dup && c.log != nil {
				c.log.Warn("lockkit: "+err.Error()+"; see docs/deployments.md#cpu-limits", "domain", spec.Name)
			}
		}
	}
	if d.err == nil && c.replicated != "" && d.policy.Fencing && d.policy.Replicas == 0 && !c.quietReplicas[spec.Name] {
		if _, dup := c.warned.LoadOrStore(spec.Name, true); !dup && c.log != nil {
			c.log.Warn("lockkit: a fencing domain on a replicated deployment sets no replicas: a failover to a replica that had not received a grant can give the lock to a second holder; the fence still orders their writes at the resource. Set replicas: 1 (or more) on the domain, or silence this with lockkit.WithoutReplicaWarning; see docs/deployments.md#when-to-use-which",
				"domain", spec.Name, "deployment", c.replicated)
		}
	}
	return d
}

// scaleRenew is renew's share of from applied to to, or an error when that
// overflows a time.Duration (converting such a float to an integer is
// undefined in Go, and on amd64 gives MinInt64: "never renew").
func scaleRenew(renew, from, to time.Duration) (time.Duration, error) {
	scaled := float64(renew) * float64(to) / float64(from)
	if !(scaled < math.MaxInt64) {
		return 0, fmt.Errorf("renew interval %v of a %v ttl, scaled to the override, overflows a time.Duration (about 292 years)", renew, from)
	}
	return time.Duration(scaled), nil
}

// renewMarginWarned keys c.warned for a domain warned about its renew
// margin (policy.CheckRenewMargin).
type renewMarginWarned struct{ domain string }

// Err is the domain's configuration error, or nil: every lock of an invalid
// domain returns it.
func (d *Domain) Err() error {
	if d == nil {
		return ErrNoClient
	}
	return d.err
}

// Name is the domain's name.
func (d *Domain) Name() string {
	if d == nil {
		return ""
	}
	return d.name
}

// Policy is the domain's effective policy: defaults and the environment
// override applied.
func (d *Domain) Policy() Policy {
	if d == nil {
		return Policy{}
	}
	return d.policy
}

// usable reports why c cannot serve calls: nil, or a zero Client that New
// did not make.
func (c *Client) usable() error {
	if c == nil || c.be == nil {
		return ErrNoClient
	}
	return nil
}

// Ping checks that the backend answers.
func (c *Client) Ping(ctx context.Context) error {
	if err := c.usable(); err != nil {
		return err
	}
	if ctx == nil {
		return fmt.Errorf("lockkit: ping: %w", errNilCtx)
	}
	ctx, cancel := context.WithTimeout(ctx, c.cmdTimeout)
	defer cancel()
	if err := c.be.Ping(ctx); err != nil {
		return fmt.Errorf("%w: ping: %w", ErrUnavailable, err)
	}
	return nil
}

// Close shuts the client down without ever releasing a lock under work that
// still relies on it:
//
//   - New acquisitions fail with ErrClosed from the moment Close starts, and
//     every waiting acquisition ends with ErrClosed; a FIFO waiter leaves its
//     queue, so a handover skips it.
//   - Every fn running under Do or TryDo has its ctx cancelled, with a cause
//     matching ErrClosed, and Close waits for it to return; Do then releases
//     its lock as usual. Until fn returns, its lease is still renewed. A
//     release that fails then is counted in Close's error, as for the
//     leases Close releases itself.
//   - Leases from Acquire are released at once (their Done closes, and Err
//     reports a loss matching both ErrLockLost and ErrClosed).
//   - An acquisition attempt in flight is waited for: a grant that arrives
//     is given back, and so is the token of an attempt whose reply was lost
//     (the store may have run it), until the store confirms it.
//
// Releases run in parallel and everything is bounded by ctx. When ctx ends
// first, Close stops renewing whatever it could not release, so those locks
// expire by their TTL (a Do still running then returns ErrLockLost at its
// deadline), and returns an error saying how many leases were left and
// naming the keys whose acquisition had not finished giving them back; the
// backend's own resources are then freed once those Do calls have released
// their leases. Close does not close the clients the backend was made from
// (go-redis client, pgx pool). A Close called while another runs waits for
// it (within its own ctx) and returns what the first returned. Do not call
// Close from inside a fn it waits for: it waits until its own ctx ends.
func (c *Client) Close(ctx context.Context) error {
	if err := c.usable(); err != nil {
		return err
	}
	if ctx == nil {
		return fmt.Errorf("lockkit: close: %w", errNilCtx)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		select {
		case <-c.closeDone:
			return c.closeErr
		case <-ctx.Done():
			return fmt.Errorf("lockkit: close: waiting for a concurrent Close: %w", ctx.Err())
		}
	}
	c.closed = true
	defer close(c.closeDone)
	c.closeCancel() // waiting acquisitions end now, with ErrClosed
	all := make([]*Lease, 0, len(c.leases))
	for l := range c.leases {
		all = append(all, l)
	}
	acquired := make(chan struct{})
	if c.nAcquiring == 0 {
		close(acquired)
	} else {
		c.acquired = acquired
	}
	c.mu.Unlock()

	closing := fmt.Errorf("%w: the client is closing; return from fn so that its lock can be released", ErrClosed)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		failed   int   // releases sent that did not succeed
		firstErr error // one of them, for the message
	)
	// Acquisitions under way end within a round trip, and give back what
	// they may hold; wait for them beside the releases.
	wg.Go(func() {
		select {
		case <-acquired:
		case <-ctx.Done():
		}
	})
	for _, l := range all {
		wg.Add(1)
		if l.fnCancel != nil {
			l.fnCancel(closing)
			go func() {
				defer wg.Done()
				select {
				case <-l.runDone: // Do released it, or says why not
					if l.runErr != nil {
						mu.Lock()
						failed++
						if firstErr == nil {
							firstErr = l.runErr
						}
						mu.Unlock()
					}
				case <-ctx.Done():
				}
			}()
			continue
		}
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, c.cmdTimeout)
			defer cancel()
			lostErr := fmt.Errorf("%w: %w: %s: released by Client.Close", ErrLockLost, ErrClosed, l.lock.key)
			l.mu.Lock()
			if l.state == held {
				l.lostErr = lostErr
			}
			l.mu.Unlock()
			if err := l.release(ctx, cctx, lostErr); err != nil && !errors.Is(err, ErrNotHeld) {
				mu.Lock()
				failed++
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	// A backend that goes on giving keys back after the call that started it
	// returned (Redlock: a node whose acquire answered after its lease was
	// released) is waited for too, within ctx; it names the keys left.
	var beDoubt []string
	if gb, ok := c.be.(givingBack); ok {
		beDoubt = gb.GivingBack(ctx)
	}

	// Whatever is still tracked was not released (a Do whose fn has not
	// returned): stop renewing it, so it expires by its TTL.
	c.mu.Lock()
	left := make([]*Lease, 0, len(c.leases))
	for l := range c.leases {
		left = append(left, l)
	}
	inDoubt := make([]string, 0, len(c.acquiring)+len(beDoubt))
	for key := range c.acquiring {
		inDoubt = append(inDoubt, key)
	}
	for _, key := range beDoubt {
		if c.acquiring[key] == 0 {
			inDoubt = append(inDoubt, key)
		}
	}
	c.mu.Unlock()
	for _, l := range left {
		l.mu.Lock()
		l.noRenew = true
		c.sched.stop(&l.renew)
		l.mu.Unlock()
	}
	var errs []error
	if n := len(left) + failed; n > 0 {
		var longest time.Duration
		for _, l := range all {
			longest = max(longest, l.lock.d.policy.TTL)
		}
		why := ctx.Err()
		if why == nil {
			why = firstErr
		} else if firstErr != nil {
			why = fmt.Errorf("%w (e.g. %w)", why, firstErr)
		}
		if why == nil { // never wrap a nil: it would print as %!w(<nil>)
			why = errors.New("still held by a running fn")
		}
		errs = append(errs, fmt.Errorf("lockkit: close: %d of %d leases were not released; they expire by their TTL (the longest within %v): %w", n, len(all), longest, why))
	}
	if len(inDoubt) > 0 {
		// Only ctx ending leaves an acquisition under way.
		why := ctx.Err()
		if why == nil { // never wrap a nil
			why = errors.New("still under way")
		}
		errs = append(errs, fmt.Errorf("lockkit: close: the acquisitions of %s had not finished giving back what they may hold; such a key expires by its TTL: %w", quoteKeys(inDoubt), why))
	}

	done := make(chan struct{})
	go func() { c.bg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		if len(errs) == 0 {
			errs = append(errs, fmt.Errorf("lockkit: close: waiting for renewals: %w", ctx.Err()))
		}
	}
	if len(left) == 0 {
		// The backend's own resources go only once nothing runs on them:
		// closing a PostgreSQL backend ends the sessions of the leases it
		// still holds, which would free a lock under a running fn before its
		// deadline. Left leases stop renewing and expire by their TTL (on
		// PostgreSQL, the idle limit of their sessions), as on Redis. An
		// acquisition still in doubt holds no lease: it runs no fn, and its
		// give-back stops now (on PostgreSQL, the session's end frees what
		// it may hold). Close waits for it only while ctx lasts: a
		// stalled server may hold a backend's goodbye (go-zookeeper waits
		// up to a second per session for the server's answer). The closing
		// then finishes in the background; no lease is left for it to end,
		// so nothing is lost and Close reports nothing for it.
		closed := make(chan struct{})
		go func() {
			defer close(closed)
			_ = c.be.Close()
		}()
		select {
		case <-closed:
		case <-ctx.Done():
		}
	} else {
		// Leases left under running work: the backend is closed once each
		// has ended (its Do returned and released it, or it expired), so
		// that its connections, sessions and subscriptions do not outlive
		// the client. Nothing waits for this closing.
		go func() {
			for _, l := range left {
				if l.runDone != nil {
					<-l.runDone
				} else {
					<-l.leaseCtx().Done()
				}
			}
			_ = c.be.Close()
		}()
	}
	c.closeErr = errcheck.Returned(errors.Join(errs...))
	return c.closeErr
}

// givingBack is a backend that goes on giving keys back after the call that
// started it returned (goredis's Redlock backend): GivingBack waits until it
// is done or ctx ends, and returns the keys still in doubt then.
type givingBack interface {
	GivingBack(ctx context.Context) []string
}

// maxQuotedKeys bounds the keys an error names.
const maxQuotedKeys = 20

// quoteKeys names keys, sorted and quoted (`keys "a", "b"`), at most
// maxQuotedKeys of them, then how many more.
func quoteKeys(keys []string) string {
	slices.Sort(keys)
	var b strings.Builder
	b.WriteString("key")
	if len(keys) > 1 {
		b.WriteString("s")
	}
	for i, k := range keys {
		if i == maxQuotedKeys {
			fmt.Fprintf(&b, " and %d more", len(keys)-i)
			break
		}
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, " %q", k)
	}
	return b.String()
}

// beginAcquire counts an acquisition of key, which Close waits for; false
// when the client is closed (the caller returns ErrClosed). endAcquire
// ends it.
func (c *Client) beginAcquire(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.acquiring[key]++
	c.nAcquiring++
	return true
}

// joinAcquire counts a give-back of key started by an acquisition that is
// itself counted (so Close, if it has started, is still waiting): it is
// counted even once the client is closed. endAcquire ends it.
func (c *Client) joinAcquire(key string) {
	c.mu.Lock()
	c.acquiring[key]++
	c.nAcquiring++
	c.mu.Unlock()
}

func (c *Client) endAcquire(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.acquiring[key]--; c.acquiring[key] <= 0 {
		delete(c.acquiring, key)
	}
	if c.nAcquiring--; c.nAcquiring == 0 && c.acquired != nil {
		close(c.acquired)
		c.acquired = nil
	}
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

// logErr is an error's message as log lines show it: every occurrence of
// the lock key, and of the part between its braces (the caller's
// parameters), is replaced by the key as logKey shows it, so a log line
// quotes no raw key under KeyHashed or KeyOmitted. The error returned to
// the caller keeps the key.
func (c *Client) logErr(key string, err error) string {
	if err == nil {
		return ""
	}
	return c.logMsg(err.Error(), key)
}

// logMsg is msg with every occurrence of each key, and of the part between
// its braces, replaced as logErr replaces them.
func (c *Client) logMsg(msg string, keys ...string) string {
	if c.telOpts.KeyMode == telemetry.KeyRaw {
		return msg
	}
	for _, key := range keys {
		shown := c.logKey(key)
		msg = strings.ReplaceAll(msg, key, shown)
		if tag := policy.HashTag(key); tag != key {
			msg = strings.ReplaceAll(msg, tag, shown)
		}
	}
	return msg
}

// breakerChanged makes a breaker's state change visible. It runs inside the
// breaker's Do (OnStateChange), never under the guards' locks, so it may
// list the breakers.
func (c *Client) breakerChanged(name string, from, to breaker.State) {
	level := slog.LevelInfo
	if to == breaker.StateOpen {
		level = slog.LevelWarn
	}
	args := []any{"node", name, "from", from.String(), "to", to.String()}
	if to == breaker.StateOpen {
		// The cause, e.g. a refused dial: one line per opening, so at
		// most one per OpenTimeout and node while a node stays down
		// (docs/deployments.md, "Redis down").
		for _, b := range c.breakers() {
			if b.Name() == name {
				if err := b.LastFailure(); err != nil {
					args = append(args, "error", err.Error())
				}
				break
			}
		}
	}
	c.log.Log(context.Background(), level, "lockkit: circuit breaker state changed", args...)
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
	l.start()
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

// pause waits d between acquisition attempts, or until ctx ends or the
// client closes; it reports whether d passed.
func (c *Client) pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-c.closeCtx.Done():
		return false
	case <-t.C:
		return true
	}
}

// waitCtx is ctx, also ended when the client closes: what a FIFO waiter
// waits on between attempts. stop releases it.
func (c *Client) waitCtx(ctx context.Context) (wctx context.Context, stop func()) {
	wctx, cancel := context.WithCancel(ctx)
	unhook := context.AfterFunc(c.closeCtx, cancel)
	return wctx, func() { unhook(); cancel() }
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}
