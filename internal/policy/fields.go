package policy

import (
	"fmt"
	"strings"
	"time"
)

// Field declares one setting of a domain's policy, once: its key in
// lockkit.yaml, its Go name and type, its default, its rule and its doc. The
// declaration is the reference the other places are built from or tested
// against: the schema parser and its model (schema.Domain), the JSON Schema
// (schema/lockkit.schema.json, whose description of the field is
// Description()), the annotated file in docs/schema.md, the generator (which
// writes GoName: value into a DomainSpec) and the runtime's lockkit.Policy.
// A field has the same name everywhere: Name in YAML and JSON, GoName in Go.
type Field struct {
	// Name is the key in lockkit.yaml and the JSON Schema: "max_hold".
	Name string
	// GoName is the field's name in lockkit.Policy and schema.Domain (and
	// in driver.Request, where the backend needs it): "MaxHold".
	GoName string
	// Type is the field's Go type, as reflect prints it outside its
	// package ("time.Duration", "string"); a mapping's type has no
	// package ("Retry": lockkit.Retry and schema.Retry).
	Type string
	// Default is the value a file that leaves the field out gets, as
	// lockkit.yaml would write it; "" when the field is required.
	Default string
	// Rule is what a value must satisfy, in words; the Check functions of
	// this package enforce it, in the schema and at run time.
	Rule string
	// Doc says what the field does.
	Doc string
	// Fields are a mapping's own fields (retry's).
	Fields []Field
	// DomainOnly marks a field that only a domain may set, never defaults:
	// what the domain is (its kind) rather than how it behaves.
	DomainOnly bool

	// The fields below are set on duration fields only.

	// Check reports a value that breaks Rule, for a domain whose ttl is
	// ttl; with ttl 0 (not known yet: a value read from the environment or
	// from defaults without a ttl) it checks the value's own rule only.
	// The schema (at load) and lockkit.Policy (when a client binds the
	// domain) both call it.
	Check func(v, ttl time.Duration) error
	// EnvPrefix, when set, starts the environment variables that override
	// the field at run time: EnvPrefix + NAME = <Go duration>, NAME spelled
	// as EnvName spells it (EnvNameFor).
	EnvPrefix string
	// NoneMeans, when set, is what the value none means ("no cap"): none,
	// like leaving the field out, is 0, and an explicit 0 is refused.
	NoneMeans string
	// Phrase is the field's part of a generated domain's doc comment, for
	// a value > 0 written as v ("2m") and its variable env ("" when the
	// field has no EnvPrefix).
	Phrase func(v, env string) string
}

// DurationFields are the duration fields declared whole here, every one
// with a Check but ttl (whose rules shape renew's and the others', and
// which every domain has): their rules, none, environment override and
// generated doc come from their declarations, and the schema parser, the
// generator and lockkit handle them in one loop, reading and writing
// schema.Domain and lockkit.Policy by GoName. A domain that leaves one out
// gets 0.
func DurationFields() []Field {
	var fs []Field
	for _, f := range Fields {
		if f.Check != nil && f.Name != "ttl" {
			fs = append(fs, f)
		}
	}
	return fs
}

// EnvFields are the fields the environment may override at run time (with
// an EnvPrefix), in order.
func EnvFields() []Field {
	var fs []Field
	for _, f := range Fields {
		if f.EnvPrefix != "" {
			fs = append(fs, f)
		}
	}
	return fs
}

// EnvNameFor is the variable that overrides f on domain: f.EnvPrefix and
// the domain spelled as EnvName spells it (max_hold on user_digest →
// LOCKKIT_MAX_HOLD_USER_DIGEST).
func EnvNameFor(f Field, domain string) string {
	return f.EnvPrefix + strings.TrimPrefix(EnvName(domain), EnvTTLPrefix)
}

// Words is the field's name in prose: its Name with spaces for
// underscores ("max hold").
func (f Field) Words() string { return strings.ReplaceAll(f.Name, "_", " ") }

// Description is the field's text in the JSON Schema: its doc, its rule,
// its default.
func (f Field) Description() string {
	s := f.Doc
	if f.Rule != "" {
		s += " " + f.Rule
	}
	if f.Default != "" {
		s += " Default: " + f.Default + "."
	}
	return s
}

// Fields is every policy setting of a domain, in the order lockkit.yaml
// and lockkit.Policy show them. Each may be set on a domain or under
// defaults.
var Fields = []Field{
	{
		Name: "ttl", GoName: "TTL", Type: "time.Duration",
		Doc:       "How long a lease lives on the server without renewal, e.g. 10s.",
		Rule:      "A Go duration, whole milliseconds, at least 10ms; required on the domain or under defaults.",
		Check:     func(v, _ time.Duration) error { return CheckTTL(v) },
		EnvPrefix: EnvTTLPrefix,
	},
	{
		Name: "renew", GoName: "Renew", Type: "time.Duration", Default: "ttl/3",
		Doc:  "How often a held lease is extended, or none to never renew (the lease is lost at its deadline).",
		Rule: "A Go duration that leaves room for a renewal to be answered before the lease's local deadline: at most ttl less 1% + 2ms of drift less one command timeout (lockkit's default 500ms in the schema, the client's at run time).",
	},
	{
		Name: "retry", GoName: "Retry", Type: "Retry", Default: "none",
		Doc: "How acquiring retries while the lock is held by someone else: none (a single attempt) or a backoff policy.",
		Fields: []Field{
			{Name: "attempts", GoName: "Attempts", Type: "int", Doc: "Total number of attempts, the first included.", Rule: "At least 1 and at most 2147483647 (the largest int of 32-bit targets). Left out here and in defaults.retry, attempts are not counted and max_wait, then required, bounds the wait."},
			{Name: "initial", GoName: "Initial", Type: "time.Duration", Default: "50ms", Doc: "First backoff between attempts.", Rule: "Above 0."},
			{Name: "max", GoName: "Max", Type: "time.Duration", Default: "1s", Doc: "Cap on one backoff.", Rule: "At least initial."},
			{Name: "multiplier", GoName: "Multiplier", Type: "float64", Default: "2", Doc: "Growth of the backoff after each attempt.", Rule: "At least 1."},
			{Name: "jitter", GoName: "Jitter", Type: "float64", Default: "0.5", Doc: "Randomization of each backoff.", Rule: "A fraction above 0 and at most 1 (it cannot be 0: contenders without jitter retry in lockstep)."},
			{Name: "max_wait", GoName: "MaxWait", Type: "time.Duration", Default: "0s", Doc: "Bound on the total time spent acquiring; 0s means no bound beyond attempts and the context. Without attempts, retries go on until it has passed.", Rule: "A Go duration, at least 0."},
		},
	},
	{
		Name: "fencing", GoName: "Fencing", Type: "bool", Default: "false",
		Doc: "Issue a fencing number with every lease (strictly increasing per key), for the protected resource to reject stale writers.",
	},
	{
		Name: "replicas", GoName: "Replicas", Type: "int", Default: "0",
		Doc:  "How many replicas must hold the lock before a lease is granted: each acquisition waits for them (Redis WAIT), and if fewer acknowledge within replica_timeout the lock is released and the acquisition fails with ErrUnavailable. 0 means do not wait.",
		Rule: "At least 0 and at most 2147483647 (the largest int of 32-bit targets).",
	},
	{
		Name: "replica_timeout", GoName: "ReplicaTimeout", Type: "time.Duration", Default: DefaultReplicaTimeout.String(),
		Doc:  "Bound on the wait for replicas, e.g. 50ms.",
		Rule: "A Go duration above 0, whole milliseconds as WAIT counts them, shorter than ttl; only with replicas > 0.",
	},
	{
		Name: "wait", GoName: "Wait", Type: "string", Default: WaitPollName,
		Doc:  "How an acquisition waits for a held lock: poll retries with jittered backoff per retry; fifo queues the waiters in arrival order (Redis, etcd and ZooKeeper hand the lock to the next one on release and wake it by push; PostgreSQL queues them in its own lock manager).",
		Rule: "poll or fifo; fifo is refused by Redlock, needs retry max_wait when attempts > 1, ignores retry's backoff fields, and excludes replicas.",
	},
	{
		Name: "max_hold", GoName: "MaxHold", Type: "time.Duration", Default: "none",
		Doc:       "Cap on how long one lease may be held in total, counted from the start of its acquisition: renewal never extends the lease past it, and at the cap the lease is lost (fn's ctx is cancelled with a cause matching ErrLockLost that names the max hold).",
		Rule:      "A Go duration above ttl, whole milliseconds; none (the default) means no cap.",
		EnvPrefix: "LOCKKIT_MAX_HOLD_",
		NoneMeans: "no cap",
		// It must be above the TTL (a lease is granted for a whole TTL),
		// and counted in whole milliseconds, the unit of every backend's
		// expiries. 0 means no cap.
		Check: func(maxHold, ttl time.Duration) error {
			switch {
			case maxHold == 0:
				return nil
			case maxHold < 0:
				return fmt.Errorf("max_hold must be > 0, or left out for no cap (got %v)", maxHold)
			case maxHold%time.Millisecond != 0:
				return fmt.Errorf("max_hold must be a whole number of milliseconds (got %v)", maxHold)
			case ttl > 0 && maxHold <= ttl:
				return fmt.Errorf("max_hold %v must be above the ttl %v: a lease is granted for a whole ttl, so a cap not above it would end every lease at its first grant", maxHold, ttl)
			}
			return nil
		},
		Phrase: func(v, env string) string { return fmt.Sprintf("held at most %s (%s overrides it)", v, env) },
	},
	{
		Name: "kind", GoName: "Kind", Type: "string", Default: KindLock, DomainOnly: true,
		Doc:  "What the domain's keys are: lock (mutual exclusion, one holder), election (one leader per term) or semaphore (at most permits holders at once, each permit a lease).",
		Rule: "lock, election or semaphore; set on the domain, not under defaults; the backend must serve it (checked when the client binds the domain).",
	},
	{
		Name: "permits", GoName: "Permits", Type: "int", DomainOnly: true,
		Doc:  "How many holders a semaphore admits at once; LOCKKIT_PERMITS_<NAME> overrides it at run time.",
		Rule: "A whole number, at least 1 and at most 2147483647 (the largest int of 32-bit targets); required with kind semaphore and refused with any other kind.",
	},
}

// FieldNamed is the declared field called name ("max_hold"), and whether
// there is one.
func FieldNamed(name string) (Field, bool) {
	for _, f := range Fields {
		if f.Name == name {
			return f, true
		}
	}
	return Field{}, false
}

// FieldNames are the declared fields' names, in order: the keys a domain
// may set besides its own (pattern, name...).
func FieldNames() []string {
	names := make([]string, len(Fields))
	for i, f := range Fields {
		names[i] = f.Name
	}
	return names
}

// DefaultsFieldNames are the names of the fields defaults may set: all but
// the DomainOnly ones, in order.
func DefaultsFieldNames() []string {
	var names []string
	for _, f := range Fields {
		if !f.DomainOnly {
			names = append(names, f.Name)
		}
	}
	return names
}
