package gen

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"go/format"
	"go/token"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"text/template"
	"time"
	"unicode/utf8"

	"github.com/lockkit/lockkit/internal/policy"
	"github.com/lockkit/lockkit/schema"
)

// Options are the choices Generate leaves to the caller.
type Options struct {
	// Package overrides the file's package name when not empty.
	Package string
	// Config is the schema's path as the header records it, when not
	// empty; the default is the path the schema was loaded from. Run gives
	// the path relative to the generated file's directory, so the header
	// is the same from whatever directory the generator runs.
	Config string
}

//go:embed locks.go.tmpl
var locksTemplate string

var tmpl = template.Must(template.New("locks").Parse(locksTemplate))

// Generate returns the gofmt'd Go source of the typed helpers for f. It is
// pure: the same file gives the same bytes, and nothing is written.
func Generate(f *schema.File, opts Options) ([]byte, error) {
	if f == nil {
		return nil, errors.New("gen: Generate: the schema file is nil; load one with schema.Load or schema.Parse")
	}
	for i, d := range f.Domains {
		if d == nil {
			return nil, fmt.Errorf("gen: Generate: domain %d of %d is nil", i+1, len(f.Domains))
		}
	}
	pkg := f.Package
	if opts.Package != "" {
		pkg = opts.Package
	}
	if err := schema.CheckPackageName(pkg); err != nil {
		return nil, err
	}
	v := newFileView(f, pkg)
	config := f.Path
	if opts.Config != "" {
		config = opts.Config
	}
	v.Command = command(config, opts.Package)
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, v); err != nil {
		return nil, fmt.Errorf("executing the template: %v", err)
	}
	out, err := format.Source(buf.Bytes())
	if err != nil {
		// A bug in the template or the view: show what went wrong where.
		return nil, fmt.Errorf("formatting the generated code: %v\n%s", err, numbered(buf.Bytes()))
	}
	return out, nil
}

func numbered(src []byte) string {
	var b strings.Builder
	for i, line := range strings.Split(string(src), "\n") {
		fmt.Fprintf(&b, "%4d  %s\n", i+1, line)
	}
	return b.String()
}

// The view model: every name, type and expression the template prints is
// computed here, so the template only lays them out.

type fileView struct {
	Command       string // for the header: "lockkit-gen -config ../lockkit.yaml"
	Source        string // the schema's file name, "lockkit.yaml"
	Package       string
	Domains       []*domainView
	SetDefaultDoc []string // comment lines, without "// "
}

type domainView struct {
	GoName   string // "UserDigest": the constructor
	TypeName string // "UserDigestLock", "PartnerAPISemaphore"
	Kind     string // "lock", "election", "semaphore"
	Field    string // "userDigest": its field in Locks
	SpecVar  string // "userDigestSpec"
	Ref      string // "lockkit.yaml:12"
	Spec     []kv   // the DomainSpec's fields but Policy
	Policy   []kv   // the Policy's fields before Retry
	Retry    []kv   // the Retry's fields; none for a single attempt
	Fencing  bool
	Replicas []kv     // the Policy's fields after Fencing: Replicas, ReplicaTimeout, Wait, internal/policy's DurationFields, Kind, Permits
	TypeDoc  []string // comment lines, without "// "
	FuncDoc  []string
	HelpDoc  []string
	Params   string // "job string, hour int64"
	Args     string // "id, hour"
	Recv     string // the method's receiver
	Local    string // the package-level helper's variable
	Build    string // the key: `Key(6 + len(id)).Literal("table:").String(id).Lock()`
	// Embed is the runtime type the domain's type wraps: "Lock", or
	// "Election" for a domain of kind election (whose key Build finishes
	// with Election()).
	Embed       string
	FenceMarker bool // emit LockkitFencing (a fencing lock; an election fences by its term)
}

// kv is one keyed field of a composite literal, with an optional comment.
type kv struct {
	Key, Value, Comment string
}

// command is the command line the header records, as stringer's does: the
// flags that decide the output (-out and -check do not), with their values as
// given, so the header is the same wherever the repository is checked out.
func command(config, pkg string) string {
	args := []string{"lockkit-gen", "-config", shellQuote(config)}
	if pkg != "" {
		args = append(args, "-package", shellQuote(pkg))
	}
	return strings.Join(args, " ")
}

// shellQuote leaves a plain argument as it is and quotes any other, so the
// header stays one line of printable text that a shell reads back as the
// same argument: 'my schemas/lockkit.yaml', or a Go-quoted string for an
// argument holding a quote or a character that is not printable.
func shellQuote(arg string) string {
	plain := arg != ""
	for _, r := range arg {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune("_-./:@%+=,~", r)) {
			plain = false
			break
		}
	}
	switch {
	case plain:
		return arg
	case printable(arg) && !strings.ContainsAny(arg, `'"\`):
		return "'" + arg + "'"
	}
	return strconv.Quote(arg)
}

// printable reports whether s can stand in a line comment as it is: every
// rune is printable (so no newline, no byte order mark), none is a
// replacement for invalid UTF-8.
func printable(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError || !strconv.IsPrint(r) {
			return false
		}
	}
	return true
}

func newFileView(f *schema.File, pkg string) *fileView {
	source := filepath.Base(f.Path)
	if !printable(source) {
		source = strconv.Quote(source) // the doc comments name it
	}
	v := &fileView{Source: source, Package: pkg}

	// Unexported package-level names: each domain's spec variable.
	topLevel := newNamer("defaultLocks", "atomic", "time", "lockkit")
	fields := newNamer()
	var helpers []string
	for _, d := range f.Domains {
		base := lowerInitial(d.GoName)
		dv := &domainView{
			GoName:   d.GoName,
			TypeName: policy.TypeName(d.GoName, d.Kind),
			Kind:     d.Kind,
			Field:    fields.fresh(base),
			SpecVar:  topLevel.fresh(base + "Spec"),
			Ref:      fmt.Sprintf("%s:%d", source, d.Pos.Line),
		}
		v.Domains = append(v.Domains, dv)
		helpers = append(helpers, d.GoName)
	}
	if len(helpers) > 6 {
		helpers = append(helpers[:3:3], fmt.Sprintf("%d more", len(helpers)-3))
	}
	v.SetDefaultDoc = wrap(fmt.Sprintf("SetDefault binds the package-level helpers (%s) to c. Until then, or after SetDefault(nil), their locks return lockkit.ErrNoClient.", joinAnd(helpers)))

	// Identifiers a parameter must not shadow in the generated bodies.
	reserved := newNamer(predeclared...)
	reserved.take("defaultLocks", "atomic", "time", "lockkit", "Locks", "New", "SetDefault")
	for _, dv := range v.Domains {
		reserved.take(dv.GoName, dv.TypeName, dv.SpecVar)
	}
	for i, d := range f.Domains {
		fillDomain(v.Domains[i], d, f.Prefix, reserved)
	}
	return v
}

func fillDomain(dv *domainView, d *schema.Domain, prefix string, reserved *namer) {
	dv.Spec = []kv{
		{Key: "Name", Value: strconv.Quote(d.Name)},
		{Key: "Pattern", Value: strconv.Quote(d.Pattern)},
		{Key: "Prefix", Value: strconv.Quote(prefix)},
	}
	dv.Policy = []kv{{Key: "TTL", Value: durationExpr(d.TTL)}}
	switch {
	case d.Renew < 0:
		dv.Policy = append(dv.Policy, kv{Key: "Renew", Value: "-1", Comment: "never renewed: the lease ends at its deadline"})
	case d.Renew > 0:
		dv.Policy = append(dv.Policy, kv{Key: "Renew", Value: durationExpr(d.Renew)})
	}
	if r := d.Retry; !r.None() {
		if r.Attempts > 0 { // 0: uncounted, MaxWait bounds the wait
			dv.Retry = []kv{{Key: "Attempts", Value: strconv.Itoa(r.Attempts)}}
		}
		if d.Wait != policy.WaitFIFOName { // a FIFO wait uses no backoff
			dv.Retry = append(dv.Retry,
				kv{Key: "Initial", Value: durationExpr(r.Initial)},
				kv{Key: "Max", Value: durationExpr(r.Max)},
				kv{Key: "Multiplier", Value: floatLit(r.Multiplier)},
				kv{Key: "Jitter", Value: floatLit(r.Jitter)},
			)
		}
		if r.MaxWait > 0 {
			dv.Retry = append(dv.Retry, kv{Key: "MaxWait", Value: durationExpr(r.MaxWait)})
		}
	}
	dv.Fencing = d.Fencing
	if d.Replicas > 0 {
		dv.Replicas = []kv{{Key: "Replicas", Value: strconv.Itoa(d.Replicas)}}
		if d.ReplicaTimeout > 0 {
			dv.Replicas = append(dv.Replicas, kv{Key: "ReplicaTimeout", Value: durationExpr(d.ReplicaTimeout)})
		}
	}
	if d.Wait == policy.WaitFIFOName {
		dv.Replicas = append(dv.Replicas, kv{Key: "Wait", Value: strconv.Quote(policy.WaitFIFOName)})
	}
	for _, f := range policy.DurationFields() {
		if v := durationField(d, f); v > 0 {
			dv.Replicas = append(dv.Replicas, kv{Key: f.GoName, Value: durationExpr(v)})
		}
	}
	if d.Kind != "" && d.Kind != policy.KindLock {
		dv.Replicas = append(dv.Replicas, kv{Key: "Kind", Value: strconv.Quote(d.Kind)})
	}
	if d.Permits > 0 {
		dv.Replicas = append(dv.Replicas, kv{Key: "Permits", Value: strconv.Itoa(d.Permits)})
	}

	// Parameters keep their schema names unless one would shadow a name the
	// bodies use; then it gets a "_" suffix.
	taken := reserved.child()
	var params, args []string
	names := map[string]string{}
	ps := d.Params()
	for i, s := range ps {
		name := taken.fresh(s.Param)
		names[s.Param] = name
		args = append(args, name)
		// Group a run of one type: "job, queue string".
		if i+1 < len(ps) && ps[i+1].Type == s.Type {
			params = append(params, name)
		} else {
			params = append(params, name+" "+string(s.Type))
		}
	}
	dv.Params = strings.Join(params, ", ")
	dv.Args = strings.Join(args, ", ")
	dv.Recv = taken.fresh("l")
	dv.Local = dv.Recv

	// An election domain's type wraps lockkit.Election, a lock domain's
	// lockkit.Lock.
	dv.Embed = "Lock"
	switch d.Kind {
	case policy.KindElection:
		dv.Embed = "Election"
	case policy.KindSemaphore:
		dv.Embed = "Semaphore"
	}
	dv.FenceMarker = dv.Fencing && dv.Embed != "Election"
	finish := "." + dv.Embed + "()"

	// The key: literals verbatim, parameters through the runtime's encoders.
	literalLen, fixed := 0, 0
	var lengths, calls []string
	for _, s := range d.Segments {
		if !s.IsParam() {
			literalLen += len(s.Literal)
			calls = append(calls, "Literal("+strconv.Quote(s.Literal)+")")
			continue
		}
		name := names[s.Param]
		switch s.Type {
		case schema.TypeString:
			lengths = append(lengths, "len("+name+")")
			calls = append(calls, "String("+name+")")
		case schema.TypeInt64:
			fixed += 20
			calls = append(calls, "Int("+name+")")
		case schema.TypeInt, schema.TypeInt32:
			fixed += maxDigits(s.Type)
			calls = append(calls, "Int(int64("+name+"))")
		case schema.TypeUint64:
			fixed += 20
			calls = append(calls, "Uint("+name+")")
		case schema.TypeUint, schema.TypeUint32:
			fixed += maxDigits(s.Type)
			calls = append(calls, "Uint(uint64("+name+"))")
		}
	}
	hint := lengths
	if n := literalLen + fixed; n > 0 || len(hint) == 0 {
		hint = append([]string{strconv.Itoa(n)}, hint...)
	}
	key := "Key(" + strings.Join(hint, " + ") + ")"
	if line := strings.Join(append([]string{key}, calls...), "."); len(line) <= 80 {
		dv.Build = line + finish
	} else {
		// A long chain gets a line per literal and the parameters after it.
		lines := []string{key}
		for i, c := range calls {
			if i == 0 || strings.HasPrefix(c, "Literal(") {
				lines = append(lines, c)
			} else {
				lines[len(lines)-1] += "." + c
			}
		}
		lines[len(lines)-1] += finish
		dv.Build = strings.Join(lines, ".\n")
	}

	// Doc comments.
	shape := keyShape(prefix, d.Segments)
	what, methods := "lock", "Its Do, TryDo, Acquire and TryAcquire come from lockkit.Lock."
	switch dv.Embed {
	case "Election":
		what, methods = "election", "Its Lead, Leader and Observe come from lockkit.Election; a term's number is its fence."
	case "Semaphore":
		what, methods = "semaphore", "Its Do, TryDo, Acquire and TryAcquire come from lockkit.Semaphore."
	}
	dv.TypeDoc = wrap(fmt.Sprintf("%s is the %s on one key of the %s domain, %q (%s). %s",
		dv.TypeName, what, d.Name, d.Pattern, dv.Ref, methods))
	if d.Kind == policy.KindSemaphore {
		dv.TypeDoc = append(dv.TypeDoc, "")
		dv.TypeDoc = append(dv.TypeDoc, wrap(fmt.Sprintf("At most %d holders at once, each holding a permit: a lease of its own (Lease.Key names the permit; fence per Lease.Key).", d.Permits))...)
	}
	if d.Description != "" {
		dv.TypeDoc = append(dv.TypeDoc, "")
		for _, line := range strings.Split(d.Description, "\n") {
			dv.TypeDoc = append(dv.TypeDoc, wrap(line)...)
		}
	}
	dv.TypeDoc = append(dv.TypeDoc, "")
	dv.TypeDoc = append(dv.TypeDoc, wrap("Policy: "+policyText(d)+".")...)
	dv.FuncDoc = wrap(fmt.Sprintf("%s returns the %s %s on the key %s (%s). It does no I/O.", d.GoName, d.Name, what, shape, dv.Ref))
	dv.HelpDoc = wrap(fmt.Sprintf("%s returns the %s %s on the key %s (%s) from the Locks set by SetDefault. Before SetDefault, the %s's methods return lockkit.ErrNoClient.",
		d.GoName, d.Name, what, shape, dv.Ref, what))
}

// maxDigits is the longest decimal form of a value of an integer type.
func maxDigits(t schema.ParamType) int {
	switch t {
	case schema.TypeInt32:
		return 11 // -2147483648
	case schema.TypeUint32:
		return 10
	}
	return 20 // -9223372036854775808, 18446744073709551615
}

// keyShape shows a domain's keys: lock:{user:<id>:digest}.
func keyShape(prefix string, segs []schema.Segment) string {
	var b strings.Builder
	for _, s := range segs {
		if s.IsParam() {
			b.WriteString("<" + s.Param + ">")
		} else {
			b.WriteString(s.Literal)
		}
	}
	return strconv.Quote(policy.Key(prefix, b.String()))
}

func policyText(d *schema.Domain) string {
	parts := []string{fmt.Sprintf("ttl %s (%s overrides it)", shortDuration(d.TTL), policy.EnvName(d.Name))}
	switch {
	case d.Renew < 0:
		parts[0] += ", never renewed"
	case d.Renew == 0:
		parts[0] += ", renewed every ttl/3"
	default:
		parts[0] += ", renewed every " + shortDuration(d.Renew)
	}
	if r := d.Retry; r.None() {
		parts = append(parts, "a single attempt")
	} else if d.Wait == policy.WaitFIFOName {
		parts = append(parts, "waits in FIFO order, woken by push, for at most "+shortDuration(r.MaxWait))
	} else {
		parts = append(parts, retryText(r))
	}
	if d.Fencing {
		parts = append(parts, "fencing on (Lease.Fence)")
	}
	if d.Wait == policy.WaitFIFOName && d.Retry.None() {
		parts = append(parts, "FIFO waiting")
	}
	if d.Replicas > 0 {
		noun, timeout := "replicas", d.ReplicaTimeout
		if d.Replicas == 1 {
			noun = "replica"
		}
		if timeout == 0 {
			timeout = policy.DefaultReplicaTimeout
		}
		parts = append(parts, fmt.Sprintf("waits for %d %s (WAIT, up to %s)", d.Replicas, noun, shortDuration(timeout)))
	}
	for _, f := range policy.DurationFields() {
		if v := durationField(d, f); v > 0 {
			env := ""
			if f.EnvPrefix != "" {
				env = policy.EnvNameFor(f, d.Name)
			}
			parts = append(parts, f.Phrase(shortDuration(v), env))
		}
	}
	if d.Permits > 0 {
		parts = append(parts, fmt.Sprintf("%d permits (%s overrides it)", d.Permits, policy.EnvPermitsName(d.Name)))
	}
	return strings.Join(parts, "; ")
}

// durationField is d's value of one of internal/policy's DurationFields,
// read by its GoName.
func durationField(d *schema.Domain, f policy.Field) time.Duration {
	return time.Duration(reflect.ValueOf(d).Elem().FieldByName(f.GoName).Int())
}

// retryText states how long a polling domain waits, exactly: its backoffs
// add up to what policy.BackoffBounds says, and max_wait ends the wait
// first only where it falls short of them (an acquisition's attempts take
// time of their own too).
func retryText(r schema.Retry) string {
	backoff := fmt.Sprintf("backing off from %s to %s (multiplier %s, jitter %s)",
		shortDuration(r.Initial), shortDuration(r.Max), floatLit(r.Multiplier), floatLit(r.Jitter))
	mw := shortDuration(r.MaxWait)
	if r.Attempts <= 0 {
		return "retries until " + mw + " (max_wait) has passed, " + backoff
	}
	lo, hi := policy.BackoffBounds(r.Attempts, r.Initial, r.Max, r.Multiplier, r.Jitter)
	s := fmt.Sprintf("up to %d attempts, %s: %s to %s of backoff in all", r.Attempts, backoff, shortDuration(lo), shortDuration(hi))
	switch {
	case r.MaxWait <= 0:
		return s
	case r.MaxWait < lo:
		return fmt.Sprintf("up to %d attempts, %s, until %s (max_wait) has passed, before the attempts can run out", r.Attempts, backoff, mw)
	case r.MaxWait < hi:
		return s + ", or until " + mw + " (max_wait) has passed if that comes first"
	}
	return s + "; max_wait " + mw + " is longer, so it ends only an acquisition whose attempts are slow"
}

// durationExpr writes d as Go source in its largest whole unit.
func durationExpr(d time.Duration) string {
	units := []struct {
		unit time.Duration
		name string
	}{
		{time.Hour, "time.Hour"},
		{time.Minute, "time.Minute"},
		{time.Second, "time.Second"},
		{time.Millisecond, "time.Millisecond"},
		{time.Microsecond, "time.Microsecond"},
		{time.Nanosecond, "time.Nanosecond"},
	}
	for _, u := range units {
		if d%u.unit == 0 {
			if n := d / u.unit; n != 1 {
				return fmt.Sprintf("%d * %s", n, u.name)
			}
			return u.name
		}
	}
	panic("unreachable")
}

// shortDuration is d.String() without zero trailing units: "1m", not "1m0s".
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func floatLit(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// wrap breaks a line of prose at about 76 columns. Lines that start with
// white space (preformatted text in a description) are kept as they are.
func wrap(line string) []string {
	const width = 76
	line = strings.TrimRight(line, " \t")
	if line == "" || line[0] == ' ' || line[0] == '\t' {
		return []string{line}
	}
	var out []string
	cur := ""
	for _, w := range strings.Fields(line) {
		switch {
		case cur == "":
			cur = w
		case len(cur)+1+len(w) > width:
			out = append(out, cur)
			cur = w
		default:
			cur += " " + w
		}
	}
	return append(out, cur)
}

func joinAnd(xs []string) string {
	switch len(xs) {
	case 0:
		return ""
	case 1:
		return xs[0]
	}
	return strings.Join(xs[:len(xs)-1], ", ") + " and " + xs[len(xs)-1]
}

// lowerInitial lower-cases the leading capitals of a Go name the way Go code
// does: "Table" → "table", "HTTPRoute" → "httpRoute", "ID" → "id".
func lowerInitial(s string) string {
	n := 0
	for n < len(s) && 'A' <= s[n] && s[n] <= 'Z' {
		n++
	}
	switch {
	case n == len(s):
		return strings.ToLower(s)
	case n > 1 && 'a' <= s[n] && s[n] <= 'z':
		n-- // the last capital starts the next word
	}
	return strings.ToLower(s[:n]) + s[n:]
}

// namer hands out identifiers that are not taken and are not keywords, by
// adding "_" to a wanted name until it is free.
type namer struct {
	parent *namer // names taken there are taken here too
	taken  map[string]bool
}

func newNamer(taken ...string) *namer {
	n := &namer{taken: map[string]bool{}}
	n.take(taken...)
	return n
}

func (n *namer) take(names ...string) {
	for _, x := range names {
		n.taken[x] = true
	}
}

// child is a namer that sees n's names, and takes new ones for itself only.
func (n *namer) child() *namer {
	c := newNamer()
	c.parent = n
	return c
}

func (n *namer) isTaken(name string) bool {
	for ; n != nil; n = n.parent {
		if n.taken[name] {
			return true
		}
	}
	return false
}

func (n *namer) fresh(want string) string {
	for n.isTaken(want) || token.IsKeyword(want) {
		want += "_"
	}
	n.taken[want] = true
	return want
}

// predeclared are Go's universe-scope identifiers. A parameter does not get
// one of these names, so the generated bodies can use them and read plainly.
var predeclared = []string{
	"any", "bool", "byte", "comparable", "complex64", "complex128", "error", "float32", "float64",
	"int", "int8", "int16", "int32", "int64", "rune", "string", "uint", "uint8", "uint16", "uint32",
	"uint64", "uintptr", "true", "false", "iota", "nil", "append", "cap", "clear", "close", "complex",
	"copy", "delete", "imag", "len", "make", "max", "min", "new", "panic", "print", "println", "real",
	"recover",
}
