package policy

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
}

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
		Doc:  "How long a lease lives on the server without renewal, e.g. 10s.",
		Rule: "A Go duration, whole milliseconds, at least 10ms; required on the domain or under defaults.",
	},
	{
		Name: "renew", GoName: "Renew", Type: "time.Duration", Default: "ttl/3",
		Doc:  "How often a held lease is extended, or none to never renew (the lease is lost at its deadline).",
		Rule: "A Go duration that leaves room before the lease's local deadline (ttl less 1% + 2ms of drift, and at run time less the client's command timeout).",
	},
	{
		Name: "retry", GoName: "Retry", Type: "Retry", Default: "none",
		Doc: "How acquiring retries while the lock is held by someone else: none (a single attempt) or a backoff policy.",
		Fields: []Field{
			{Name: "attempts", GoName: "Attempts", Type: "int", Doc: "Total number of attempts, the first included.", Rule: "At least 1; required here or in defaults.retry."},
			{Name: "initial", GoName: "Initial", Type: "time.Duration", Default: "50ms", Doc: "First backoff between attempts.", Rule: "Above 0."},
			{Name: "max", GoName: "Max", Type: "time.Duration", Default: "1s", Doc: "Cap on one backoff.", Rule: "At least initial."},
			{Name: "multiplier", GoName: "Multiplier", Type: "float64", Default: "2", Doc: "Growth of the backoff after each attempt.", Rule: "At least 1."},
			{Name: "jitter", GoName: "Jitter", Type: "float64", Default: "0.5", Doc: "Randomization of each backoff.", Rule: "A fraction above 0 and at most 1 (it cannot be 0: contenders without jitter retry in lockstep)."},
			{Name: "max_wait", GoName: "MaxWait", Type: "time.Duration", Default: "0s", Doc: "Bound on the total time spent acquiring; 0s means no bound beyond attempts and the context.", Rule: "A Go duration, at least 0."},
		},
	},
	{
		Name: "fencing", GoName: "Fencing", Type: "bool", Default: "false",
		Doc: "Issue a fencing number with every lease (strictly increasing per key), for the protected resource to reject stale writers.",
	},
	{
		Name: "replicas", GoName: "Replicas", Type: "int", Default: "0",
		Doc:  "How many replicas must hold the lock before a lease is granted: each acquisition waits for them (Redis WAIT), and if fewer acknowledge within replica_timeout the lock is released and the acquisition fails with ErrUnavailable. 0 means do not wait.",
		Rule: "At least 0.",
	},
	{
		Name: "replica_timeout", GoName: "ReplicaTimeout", Type: "time.Duration", Default: DefaultReplicaTimeout.String(),
		Doc:  "Bound on the wait for replicas, e.g. 50ms.",
		Rule: "A Go duration above 0, whole milliseconds as WAIT counts them, shorter than ttl; only with replicas > 0.",
	},
	{
		Name: "wait", GoName: "Wait", Type: "string", Default: WaitPollName,
		Doc:  "How an acquisition waits for a held lock: poll retries with jittered backoff per retry; fifo queues the waiters in Redis in arrival order, hands the lock to the next one on release and wakes it by push.",
		Rule: "poll or fifo; fifo is for the Redis backend only, needs retry max_wait when attempts > 1, ignores retry's backoff fields, and excludes replicas.",
	},
	{
		Name: "max_hold", GoName: "MaxHold", Type: "time.Duration", Default: "none",
		Doc:  "Cap on how long one lease may be held in total, counted from the start of its acquisition: renewal never extends the lease past it, and at the cap the lease is lost (fn's ctx is cancelled with a cause matching ErrLockLost that names the max hold).",
		Rule: "A Go duration above ttl, whole milliseconds; none (the default) means no cap.",
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
// and defaults may set besides a domain's own (pattern, name...).
func FieldNames() []string {
	names := make([]string, len(Fields))
	for i, f := range Fields {
		names[i] = f.Name
	}
	return names
}
