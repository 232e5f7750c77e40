package schema

import (
	"bytes"
	"errors"
	"fmt"
	"go/token"
	"io"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/lockkit/lockkit/internal/policy"
	"gopkg.in/yaml.v3"
)

// The keys each mapping may hold, in the order messages list them.
var (
	topKeys      = []string{"version", "package", "prefix", "defaults", "domains"}
	defaultsKeys = policy.DefaultsFieldNames() // internal/policy declares the policy fields
	domainKeys   = append([]string{"pattern", "name", "go_name", "description"}, policy.FieldNames()...)
	retryKeys    = retryFieldNames()
)

// retryFieldNames are the keys of a retry mapping, as internal/policy
// declares them.
func retryFieldNames() []string {
	f, _ := policy.FieldNamed("retry")
	names := make([]string, len(f.Fields))
	for i, sub := range f.Fields {
		names[i] = sub.Name
	}
	return names
}

// Names the generated package declares itself; a domain's Go name must differ.
var reservedGoNames = []string{"Locks", "New", "SetDefault", "Err"}

// Parse parses and checks a lockkit.yaml. filename is used in positions only.
// On any problem it returns every problem found, as Errors; it never panics.
func Parse(filename string, data []byte) (*File, error) {
	p := &parser{errs: errorList{file: filename}, lines: bytes.Split(data, []byte("\n"))}
	root := p.decode(data)
	var f *File
	if root != nil {
		f = p.file(root)
	}
	if err := p.errs.result(); err != nil {
		return nil, err
	}
	return f, nil
}

type parser struct {
	errs    errorList
	lines   [][]byte       // the source, to place errors inside scalars
	entries []*domainEntry // the domains read so far
	prefix  string         // the key prefix, for example keys in messages
}

// fullKey is the Redis key of a key suffix.
func (p *parser) fullKey(suffix string) string { return policy.Key(p.prefix, suffix) }

func (p *parser) add(pos Pos, format string, args ...any) { p.errs.add(pos, format, args...) }

// addIn reports a problem inside a part of the file named by where ("defaults",
// `domain "table"`); where is empty at the top level.
func (p *parser) addIn(pos Pos, where, format string, args ...any) {
	if where != "" {
		format = where + ": " + format
	}
	p.errs.add(pos, format, args...)
}

func pos(n *yaml.Node) Pos { return Pos{n.Line, n.Column} }

// decode reads the one YAML document of the file.
func (p *parser) decode(data []byte) (root *yaml.Node) {
	defer func() {
		// yaml.v3 is not ours; should it ever panic, report rather than crash.
		if r := recover(); r != nil {
			p.add(Pos{1, 1}, "the YAML parser failed on this file (%v)", r)
			root = nil
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.add(Pos{1, 1}, `the file is empty; start it with "version: 1"`)
		} else {
			p.yamlError(err)
		}
		return nil
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		at := pos(&extra)
		if len(extra.Content) > 0 {
			at = pos(extra.Content[0])
		}
		p.add(at, `a second YAML document (after "---"); a lockkit.yaml holds exactly one`)
	case !errors.Is(err, io.EOF):
		p.yamlError(err)
	}
	if len(doc.Content) == 0 {
		p.add(Pos{1, 1}, `the file is empty; start it with "version: 1"`)
		return nil
	}
	return doc.Content[0]
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlError reports a YAML syntax error. yaml.v3 gives only a line; the column
// is that of the line's first non-blank character.
func (p *parser) yamlError(err error) {
	msg := err.Error()
	at := Pos{1, 1}
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		at = Pos{line, p.firstCol(line)}
		msg = m[2]
		if line >= 1 && line <= len(p.lines) && bytes.HasPrefix(bytes.TrimLeft(p.lines[line-1], " "), []byte("\t")) {
			msg += " (a tab: YAML indents with spaces only)"
		}
	} else {
		msg = strings.TrimPrefix(msg, "yaml: ")
	}
	p.add(at, "invalid YAML: %s", msg)
}

func (p *parser) firstCol(line int) int {
	if line < 1 || line > len(p.lines) {
		return 1
	}
	text := p.lines[line-1]
	trimmed := bytes.TrimLeft(text, " ")
	return utf8.RuneCount(text[:len(text)-len(trimmed)]) + 1
}

// resolve follows aliases (*name) to the node they stand for.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && n.Alias != nil && i < 64; i++ {
		n = n.Alias
	}
	return n
}

// describe names what a node is, for "… not a mapping" messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "empty"
		case "!!int", "!!float":
			return "the number " + n.Value
		case "!!bool":
			return n.Value
		}
		return strconv.Quote(n.Value)
	}
	return "an alias"
}

// entry is one key and its value in a mapping.
type entry struct {
	key, val *yaml.Node
}

// fields checks that n is a mapping whose keys are all in known, and returns
// its entries by key. where names the mapping in messages.
func (p *parser) fields(n *yaml.Node, where string, known []string) map[string]entry {
	m, report := p.fieldsLater(n, known)
	report(where)
	return m
}

// fieldsLater is fields, with the problems reported by the returned function,
// once the caller knows how to name the mapping.
func (p *parser) fieldsLater(n *yaml.Node, known []string) (map[string]entry, func(where string)) {
	out := map[string]entry{}
	var problems []func(where string)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		at := pos(k)
		if k.Kind != yaml.ScalarNode {
			what := describe(k)
			problems = append(problems, func(where string) {
				p.addIn(at, where, "a key must be a plain word, not %s; valid keys: %s", what, strings.Join(known, ", "))
			})
			continue
		}
		name := k.Value
		if !slices.Contains(known, name) {
			if k.ShortTag() == "!!merge" {
				problems = append(problems, func(where string) {
					p.addIn(at, where, "YAML merge keys (<<) are not supported; put shared settings under defaults")
				})
				continue
			}
			problems = append(problems, func(where string) {
				p.addIn(at, where, "unknown key %q%s; valid keys: %s", name, didYouMean(name, known), strings.Join(known, ", "))
			})
			continue
		}
		if prev, dup := out[name]; dup {
			first := prev.key.Line
			problems = append(problems, func(where string) {
				p.addIn(at, where, "duplicate key %q (first at line %d); keep one", name, first)
			})
			continue
		}
		out[name] = entry{k, v}
	}
	return out, func(where string) {
		for _, report := range problems {
			report(where)
		}
	}
}

// didYouMean suggests the known key closest to a misspelt one.
func didYouMean(name string, known []string) string {
	best, bestDist := "", 3
	for _, k := range known {
		if d := editDistance(strings.ToLower(name), k); d < bestDist {
			best, bestDist = k, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// --- scalars ---------------------------------------------------------------

// scalar returns e's value node when it is a non-empty scalar, else reports
// that the key wants an example of the right kind.
func (p *parser) scalar(e entry, where, want string) (*yaml.Node, bool) {
	v := e.val
	if v.Kind != yaml.ScalarNode || v.ShortTag() == "!!null" {
		p.addIn(pos(v), where, "%s must be %s, not %s", e.key.Value, want, describe(v))
		return nil, false
	}
	return v, true
}

func (p *parser) str(e entry, where, want string) (string, bool) {
	v, ok := p.scalar(e, where, want)
	if !ok {
		return "", false
	}
	return v.Value, true
}

func (p *parser) boolean(e entry, where string) (bool, bool) {
	v, ok := p.scalar(e, where, "true or false")
	if !ok {
		return false, false
	}
	var b bool
	if v.ShortTag() != "!!bool" || v.Decode(&b) != nil {
		p.addIn(pos(v), where, "%s must be true or false, not %s", e.key.Value, describe(v))
		return false, false
	}
	return b, true
}

func (p *parser) integer(e entry, where, want string) (int, bool) {
	v, ok := p.scalar(e, where, want)
	if !ok {
		return 0, false
	}
	var i int64 // not int: the limit below is the same on every GOARCH
	if v.ShortTag() != "!!int" || v.Decode(&i) != nil {
		p.addIn(pos(v), where, "%s must be %s, not %s", e.key.Value, want, describe(v))
		return 0, false
	}
	if err := policy.CheckCount(e.key.Value, i); err != nil {
		p.addIn(pos(v), where, "%v", err)
		return 0, false
	}
	return int(i), true
}

func (p *parser) float(e entry, where, want string) (float64, bool) {
	v, ok := p.scalar(e, where, want)
	if !ok {
		return 0, false
	}
	var f float64
	tag := v.ShortTag()
	if tag != "!!int" && tag != "!!float" || v.Decode(&f) != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		p.addIn(pos(v), where, "%s must be %s, not %s", e.key.Value, want, describe(v))
		return 0, false
	}
	return f, true
}

const durationHint = `write a number with a unit, such as "250ms", "10s" or "1m30s"`

func (p *parser) duration(e entry, where string) (time.Duration, bool) {
	return p.durationOr(e, where, "")
}

// durationOr reads a duration; alternative is added to the hint.
func (p *parser) durationOr(e entry, where, alternative string) (time.Duration, bool) {
	v, ok := p.scalar(e, where, `a Go duration such as "10s"`+alternative)
	if !ok {
		return 0, false
	}
	d, err := time.ParseDuration(v.Value)
	if err != nil {
		p.addIn(pos(v), where, "%s is not a Go duration (got %q); %s%s", e.key.Value, v.Value, durationHint, alternative)
		return 0, false
	}
	return d, true
}

// --- the file --------------------------------------------------------------

// setting is one optional value with the node it came from.
type setting[T any] struct {
	val  T
	set  bool       // present and valid
	node *yaml.Node // the value, when present (valid or not)
}

// settings are the policy keys a domain shares with defaults.
type settings struct {
	ttl, renew     setting[time.Duration] // renew < 0: "none"
	fencing        setting[bool]
	retry          retrySettings
	replicas       setting[int]
	replicaTimeout setting[time.Duration]
	wait           setting[policy.Wait]
	// durations are internal/policy's DurationFields, by name: 0 is none.
	durations map[string]setting[time.Duration]
}

type retrySettings struct {
	present  bool       // the key is there, valid or not
	valid    bool       // every field present is valid
	none     bool       // retry: none
	node     *yaml.Node // the retry value
	attempts setting[int]
	initial  setting[time.Duration]
	max      setting[time.Duration]
	maxWait  setting[time.Duration]
	mult     setting[float64]
	jitter   setting[float64]
}

func (p *parser) file(root *yaml.Node) *File {
	root = resolve(root)
	if root.Kind != yaml.MappingNode {
		p.add(pos(root), "the top level must be a mapping with the keys %s, not %s", strings.Join(topKeys, ", "), describe(root))
		return nil
	}
	const where = "" // messages about top-level keys need no prefix
	top := p.fields(root, where, topKeys)
	f := &File{Version: version, Path: p.errs.file}

	// Read the version first: a file of another version is not read further.
	if e, ok := top["version"]; !ok {
		p.add(pos(root), `missing "version"; add "version: 1" as the first line`)
	} else if v, ok := p.scalar(e, where, "1"); ok {
		if v.ShortTag() != "!!int" {
			p.add(pos(v), "version must be the number 1, not %s; write version: 1", describe(v))
		} else if v.Value != "1" {
			p.add(pos(v), "unsupported version %s; this lockkit-gen reads version 1 only", v.Value)
			return nil
		}
	}

	if e, ok := top["package"]; !ok {
		p.add(pos(root), `missing "package"; add the Go package name of the generated code, e.g. package: locks`)
	} else if s, ok := p.str(e, where, "a Go package name such as locks"); ok {
		if err := CheckPackageName(s); err != nil {
			p.add(pos(e.val), "%v", err)
		}
		f.Package = s
	}

	f.Prefix = policy.DefaultPrefix
	if e, ok := top["prefix"]; ok {
		if s, ok := p.str(e, where, `a string such as "lock:"`); ok {
			switch {
			case s == "":
				p.add(pos(e.val), `prefix is empty; leave it out for the default %q, or write one such as "myapp:lock:"`, policy.DefaultPrefix)
			case strings.ContainsAny(s, "{}"):
				p.add(pos(e.val), `prefix %q contains a brace; braces mark the Redis Cluster hash tag of each key and cannot appear in the prefix`, s)
			case strings.IndexFunc(s, isControl) >= 0:
				p.add(pos(e.val), "prefix %q contains a control character; use printable characters", s)
			default:
				f.Prefix = s
			}
		}
	}

	var defaults settings
	defaultRetry := Retry{Attempts: 1}
	if e, ok := top["defaults"]; ok {
		if e.val.Kind != yaml.MappingNode {
			p.add(pos(e.val), "defaults must be a mapping of %s, not %s", strings.Join(defaultsKeys, ", "), describe(e.val))
		} else {
			const label = "defaults"
			defaults = p.settings(p.fields(p.withoutDomainOnly(e.val), label, defaultsKeys), label)
			defaultRetry, _ = p.checkRetry(label, defaults.retry, retrySettings{})
			if defaults.ttl.set && (defaults.renew.set || defaults.renew.node == nil) {
				p.checkRenew(label, defaults.ttl, defaults.renew, nil)
			}
			p.checkReplicas(label, defaults, settings{})
			for _, fd := range policy.DurationFields() {
				p.checkAgainstTTL(fd, label, defaults.ttl, defaults.durations[fd.Name], false)
			}
		}
	}

	e, ok := top["domains"]
	switch {
	case !ok:
		p.add(pos(root), `missing "domains"; list at least one, e.g. domains: [{pattern: "table:{id}"}]`)
	case e.val.Kind != yaml.SequenceNode:
		p.add(pos(e.val), `domains must be a list such as [{pattern: "table:{id}"}], not %s`, describe(e.val))
	case len(e.val.Content) == 0:
		p.add(pos(e.val), `no domains; list at least one, e.g. - pattern: "table:{id}"`)
	default:
		for _, item := range e.val.Content {
			if d := p.domain(resolve(item), defaults, defaultRetry); d != nil {
				f.Domains = append(f.Domains, d)
			}
		}
	}
	p.prefix = f.Prefix
	p.checkDomains()
	return f
}

// CheckPackageName reports whether name can be the package name of generated
// code: an ASCII Go identifier, not a keyword, not "_".
func CheckPackageName(name string) error {
	switch {
	case name == "_" || !isASCIIIdent(name):
		return fmt.Errorf("package %q is not a Go package name; use ASCII letters, digits and _, starting with a letter, e.g. %q", name, strings.ToLower(suggestIdent(name)))
	case token.IsKeyword(name):
		return fmt.Errorf("package %q is a Go keyword; choose another name, e.g. %q", name, name+"s")
	}
	return nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// commentUnsafe finds the first character of a description that its doc
// comment in the generated code must not carry, and returns its byte offset
// and what is wrong, or "" when there is none. A description may hold any
// printable text, tabs and newlines. It may not hold:
//   - U+FEFF, the byte order mark: Go source allows it only as the first
//     character of a file, and go/format rejects the generated file;
//   - control characters (C0, DEL, C1) but tab and newline: NUL is illegal in
//     Go source, and the others are invisible or end lines in some tools;
//   - U+2028 and U+2029, which some editors show as line breaks that Go
//     does not see;
//   - the bidirectional embeddings, overrides and isolates (U+202A–U+202E,
//     U+2066–U+2069), which make a comment display differently from what it
//     says ("Trojan Source").
func commentUnsafe(s string) (int, string) {
	for i, r := range s {
		switch {
		case r == '\t' || r == '\n':
		case r == 0xFEFF:
			return i, "U+FEFF (a byte order mark) is not allowed: Go source cannot hold one past the start of a file; delete it (editors often show nothing there)"
		case r == '\r' && strings.HasPrefix(s[i:], "\r\n"):
		case r < 0x20 || 0x7f <= r && r <= 0x9f:
			return i, fmt.Sprintf("the control character %U is not allowed; use plain text (tabs and newlines are fine)", r)
		case r == 0x2028 || r == 0x2029:
			return i, fmt.Sprintf("%U (a line or paragraph separator) is not allowed; use a newline", r)
		case 0x202A <= r && r <= 0x202E || 0x2066 <= r && r <= 0x2069:
			return i, fmt.Sprintf("%U (a bidirectional control) is not allowed: it makes the generated comment display differently from its text", r)
		}
	}
	return -1, ""
}

func (p *parser) settings(m map[string]entry, label string) settings {
	var s settings
	if e, ok := m["ttl"]; ok {
		s.ttl.node = e.val
		if d, ok := p.duration(e, label); ok {
			if err := policy.CheckTTL(d); err != nil {
				p.add(pos(e.val), "%s: %v", label, err)
			} else {
				s.ttl = setting[time.Duration]{d, true, e.val}
			}
		}
	}
	if e, ok := m["renew"]; ok {
		s.renew.node = e.val
		if e.val.Kind == yaml.ScalarNode && e.val.Value == "none" {
			s.renew = setting[time.Duration]{-1, true, e.val}
		} else if d, ok := p.durationOr(e, label, `, or "none" to never renew`); ok {
			if d <= 0 {
				p.add(pos(e.val), `%s: renew must be > 0 (got %q); leave it out to renew every ttl/3, or write "none" to never renew`, label, e.val.Value)
			} else {
				s.renew = setting[time.Duration]{d, true, e.val}
			}
		}
	}
	if e, ok := m["fencing"]; ok {
		if b, ok := p.boolean(e, label); ok {
			s.fencing = setting[bool]{b, true, e.val}
		}
	}
	if e, ok := m["retry"]; ok {
		s.retry = p.retry(e, label)
	}
	if e, ok := m["wait"]; ok {
		s.wait.node = e.val
		if v, ok := p.str(e, label, `"poll" or "fifo"`); ok {
			if w, err := policy.ParseWait(v); err != nil {
				p.add(pos(e.val), "%s: %v", label, err)
			} else {
				s.wait = setting[policy.Wait]{w, true, e.val}
			}
		}
	}
	if e, ok := m["replicas"]; ok {
		s.replicas.node = e.val
		const want = "a whole number >= 0 such as 1"
		if v, ok := p.scalar(e, label, want); ok {
			var n int64 // not int: the limit below is the same on every GOARCH
			if v.ShortTag() != "!!int" || v.Decode(&n) != nil || n < 0 {
				p.add(pos(v), "%s: replicas must be a whole number >= 0 (got %q); 0 means do not wait for replicas", label, v.Value)
			} else if err := policy.CheckCount("replicas", n); err != nil {
				p.add(pos(v), "%s: %v", label, err)
			} else {
				s.replicas = setting[int]{int(n), true, v}
			}
		}
	}
	if e, ok := m["replica_timeout"]; ok {
		s.replicaTimeout.node = e.val
		if d, ok := p.duration(e, label); ok {
			switch {
			case d <= 0:
				p.add(pos(e.val), "%s: replica_timeout must be > 0 (got %q); leave it out for the default %s, or write a Go duration such as \"100ms\"", label, e.val.Value, policy.DefaultReplicaTimeout)
			case d%time.Millisecond != 0:
				p.add(pos(e.val), "%s: replica_timeout must be a whole number of milliseconds, as Redis WAIT counts them (got %q); such as %q", label, e.val.Value, max(d.Round(time.Millisecond), time.Millisecond).String())
			default:
				s.replicaTimeout = setting[time.Duration]{d, true, e.val}
			}
		}
	}
	s.durations = make(map[string]setting[time.Duration])
	for _, fd := range policy.DurationFields() {
		if e, ok := m[fd.Name]; ok {
			s.durations[fd.Name] = p.durationField(fd, e, label)
		}
	}
	return s
}

// durationField reads one of internal/policy's DurationFields: none (when
// its declaration allows it) or a duration that passes its Check. The rule
// against the ttl is checked where both are known (checkAgainstTTL).
func (p *parser) durationField(fd policy.Field, e entry, label string) setting[time.Duration] {
	s := setting[time.Duration]{node: e.val}
	alternative := ""
	if fd.NoneMeans != "" {
		if e.val.Kind == yaml.ScalarNode && e.val.Value == "none" {
			return setting[time.Duration]{0, true, e.val}
		}
		alternative = `, or "none" for ` + fd.NoneMeans
	}
	d, ok := p.durationOr(e, label, alternative)
	if !ok {
		return s
	}
	err := fd.Check(d, 0)
	if err == nil && d == 0 && fd.NoneMeans != "" {
		err = fmt.Errorf(`%s must be > 0 (got %q); write "none" or leave it out for %s`, fd.Name, e.val.Value, fd.NoneMeans)
	}
	if err != nil {
		p.add(pos(e.val), "%s: %v", label, err)
		return s
	}
	return setting[time.Duration]{d, true, e.val}
}

// checkAgainstTTL checks one of internal/policy's DurationFields, v, against
// the ttl (its Check). It reports at v, or at the ttl when the ttl is the
// domain's own and v comes from defaults.
func (p *parser) checkAgainstTTL(fd policy.Field, label string, ttl, v setting[time.Duration], ttlOwnOnly bool) {
	if !ttl.set || !v.set {
		return
	}
	err := fd.Check(v.val, ttl.val)
	if err == nil {
		return
	}
	at, note := v.node, ""
	if ttlOwnOnly {
		at, note = ttl.node, fmt.Sprintf(" (%s %s is from defaults, line %d)", fd.Name, v.node.Value, v.node.Line)
	}
	p.add(pos(at), "%s: %v%s", label, err, note)
}

const retryHint = `write "none" for a single attempt, or a mapping such as {attempts: 5, initial: 50ms, max: 1s}`

func (p *parser) retry(e entry, label string) retrySettings {
	r := retrySettings{present: true, node: e.val}
	v := e.val
	if v.Kind == yaml.ScalarNode && v.Value == "none" && v.ShortTag() == "!!str" {
		r.none, r.valid = true, true
		return r
	}
	if v.Kind != yaml.MappingNode {
		p.add(pos(v), "%s: retry must be \"none\" or a mapping, not %s; %s", label, describe(v), retryHint)
		return r
	}
	where := label + ": retry"
	m := p.fields(v, where, retryKeys)
	before := len(p.errs.errs)
	if e, ok := m["attempts"]; ok {
		if n, ok := p.integer(e, where, "a whole number such as 5"); ok {
			if n < 1 {
				p.addIn(pos(e.val), where, `attempts must be at least 1 (got %d); it counts the first attempt too (write retry: none for a single attempt)`, n)
			} else {
				r.attempts = setting[int]{n, true, e.val}
			}
		}
	}
	positive := func(key string, dst *setting[time.Duration], allowZero bool) {
		e, ok := m[key]
		if !ok {
			return
		}
		d, ok := p.duration(e, where)
		if !ok {
			return
		}
		switch {
		case d < 0 || d == 0 && !allowZero:
			cmp := "> 0"
			if allowZero {
				cmp = ">= 0 (0 means no bound)"
			}
			p.addIn(pos(e.val), where, "%s must be %s (got %q); %s", key, cmp, e.val.Value, durationHint)
		default:
			*dst = setting[time.Duration]{d, true, e.val}
		}
	}
	positive("initial", &r.initial, false)
	positive("max", &r.max, false)
	positive("max_wait", &r.maxWait, true)
	if e, ok := m["multiplier"]; ok {
		if f, ok := p.float(e, where, "a number >= 1 such as 2"); ok {
			if err := policy.CheckMultiplier(f); err != nil {
				p.addIn(pos(e.val), where, "%v; such as 2", err)
			} else {
				r.mult = setting[float64]{f, true, e.val}
			}
		}
	}
	if e, ok := m["jitter"]; ok {
		if f, ok := p.float(e, where, "a number above 0, at most 1, such as 0.5"); ok {
			if err := policy.CheckJitter(f); err != nil {
				p.addIn(pos(e.val), where, "%v; it cannot be 0, since contenders without jitter retry in lockstep", err)
			} else {
				r.jitter = setting[float64]{f, true, e.val}
			}
		}
	}
	r.valid = len(p.errs.errs) == before
	return r
}

// checkRetry applies the defaults' retry fields, then the built-in ones, to
// a retry mapping, and checks the result. own is the mapping being checked
// (the domain's, or the defaults' themselves), inherited the defaults'.
func (p *parser) checkRetry(label string, own, inherited retrySettings) (Retry, bool) {
	if !own.present || own.none {
		return Retry{Attempts: 1}, own.valid || !own.present
	}
	if !own.valid {
		return Retry{}, false
	}
	base := inherited
	if base.none || !base.valid {
		base = retrySettings{}
	}
	pickD := func(a, b setting[time.Duration], def time.Duration) time.Duration {
		if a.set {
			return a.val
		}
		if b.set {
			return b.val
		}
		return def
	}
	pickF := func(a, b setting[float64], def float64) float64 {
		if a.set {
			return a.val
		}
		if b.set {
			return b.val
		}
		return def
	}
	r := Retry{
		Initial:    pickD(own.initial, base.initial, policy.DefaultInitialInterval),
		Max:        pickD(own.max, base.max, policy.DefaultMaxInterval),
		MaxWait:    pickD(own.maxWait, base.maxWait, 0),
		Multiplier: pickF(own.mult, base.mult, policy.DefaultMultiplier),
		Jitter:     pickF(own.jitter, base.jitter, policy.DefaultJitter),
	}
	switch {
	case own.attempts.set:
		r.Attempts = own.attempts.val
	case base.attempts.set:
		r.Attempts = base.attempts.val
	case r.MaxWait > 0:
		r.Attempts = 0 // wait up to max_wait, attempts uncounted
	default:
		p.add(pos(own.node), "%s: retry has neither attempts nor max_wait; add the total number of tries, e.g. {attempts: 5}, or how long to wait, e.g. {max_wait: 5s}, or write retry: none for a single attempt", label)
		return Retry{}, false
	}
	if r.Initial > r.Max {
		p.add(pos(own.node), "%s: retry initial (%s) is longer than max (%s), the cap on each backoff; make max at least %s", label, r.Initial, r.Max, r.Initial)
		return Retry{}, false
	}
	if r.Attempts == 1 {
		return Retry{Attempts: 1}, true
	}
	return r, true
}

// checkRenew checks that renew (ttl/3 when not set) leaves room to renew
// before the lease's local deadline, by the runtime's rule and in its words
// (policy.CheckRenew) against the default command timeout, as Client.Domain
// checks it with a client's own; "none" is fine. It reports at the renew
// value, or at reportAt when not nil (the domain's ttl, when the renew
// interval it breaks comes from defaults), or at the ttl for ttl/3.
func (p *parser) checkRenew(label string, ttl, renew setting[time.Duration], reportAt *yaml.Node) {
	interval, note := renew.val, ""
	if renew.node == nil {
		interval, note = policy.DefaultRenew(ttl.val), "renew is the default, ttl/3; "
	}
	err := policy.CheckRenew(ttl.val, interval, policy.DefaultCommandTimeout)
	if err == nil {
		return
	}
	at := renew.node
	switch {
	case reportAt != nil:
		at = reportAt
		if renew.node != nil {
			note = fmt.Sprintf("renew %s is from defaults, line %d; ", renew.node.Value, renew.node.Line)
		}
	case at == nil:
		at = ttl.node
	}
	p.add(pos(at), "%s: %v (%sthe command timeout is lockkit's default, %s, which lockkit.WithCommandTimeout changes)",
		label, err, note, policy.DefaultCommandTimeout)
}

// checkReplicas resolves and checks a policy's replicas and replica_timeout:
// the timeout needs replicas > 0, and the wait it bounds (or the default one)
// must be shorter than the ttl. own are the keys the policy sets itself;
// inherited are those of defaults (empty when own are the defaults). It
// returns the replicas and the timeout, 0 for the runtime's default; the
// timeout is 0 too when replicas is 0.
//
// A check on values that all come from defaults was made there, once; a
// domain that sets replicas: 0 itself opts out, and an inherited timeout is
// then moot.
func (p *parser) checkReplicas(label string, own, inherited settings) (int, time.Duration) {
	replicas, timeout, ttl := own.replicas, own.replicaTimeout, own.ttl
	if replicas.node == nil {
		replicas = inherited.replicas
	}
	if timeout.node == nil {
		timeout = inherited.replicaTimeout
	}
	if ttl.node == nil {
		ttl = inherited.ttl
	}
	if replicas.node != nil && !replicas.set || timeout.node != nil && !timeout.set {
		return 0, 0 // reported where the invalid value is
	}
	fromDefaults := func(n *yaml.Node) string { return fmt.Sprintf("from defaults, line %d", n.Line) }
	if replicas.val == 0 {
		if own.replicaTimeout.set {
			why := "the default: do not wait for replicas"
			switch {
			case own.replicas.node != nil:
				why = "do not wait for replicas"
			case replicas.node != nil:
				why = fromDefaults(replicas.node) + ": do not wait for replicas"
			}
			p.add(pos(timeout.node), "%s: replica_timeout needs replicas > 0, but replicas is 0 (%s); set replicas to 1 or more, or remove replica_timeout", label, why)
		}
		return 0, 0
	}
	if !ttl.set || !own.ttl.set && own.replicaTimeout.node == nil && inherited.replicas.val > 0 {
		// No valid ttl (reported elsewhere), or nothing to check that was
		// not checked in defaults.
		return replicas.val, timeout.val
	}
	wait, waitFrom, ttlFrom := timeout.val, "", ""
	switch {
	case !timeout.set:
		wait, waitFrom = policy.DefaultReplicaTimeout, ", the default"
	case !own.replicaTimeout.set:
		waitFrom = ", " + fromDefaults(timeout.node)
	}
	if wait < ttl.val {
		return replicas.val, timeout.val
	}
	if !own.ttl.set {
		ttlFrom = ", " + fromDefaults(ttl.node)
	}
	// Report at the key this policy sets that takes part, best first.
	at := replicas.node
	switch {
	case own.replicaTimeout.set:
		at = timeout.node
	case own.ttl.set:
		at = ttl.node
	}
	fix := "use a longer ttl"
	if suggest := max(min(ttl.val/10, policy.DefaultReplicaTimeout).Truncate(time.Millisecond), time.Millisecond); suggest < ttl.val {
		fix = fmt.Sprintf("set a shorter replica_timeout such as %q, or a longer ttl", suggest.String())
	}
	waitText := policy.DefaultReplicaTimeout.String()
	if timeout.set {
		waitText = timeout.node.Value
	}
	p.add(pos(at), "%s: replica_timeout (%s%s) must be shorter than ttl (%s%s), or the lease could expire while the acquisition waits for replicas; %s",
		label, waitText, waitFrom, ttl.node.Value, ttlFrom, fix)
	return replicas.val, timeout.val
}

// domainEntry is a domain as parsed, before the checks across domains.
type domainEntry struct {
	*Domain
	patternOK bool       // the pattern parsed without errors
	nameNode  *yaml.Node // where the name was set, or the pattern it derives from
	goNode    *yaml.Node // where the Go name was set, or as nameNode
	goNameSet bool       // go_name is given, not derived
	label     string     // how messages name the domain
}

func (p *parser) domain(n *yaml.Node, defaults settings, defaultRetry Retry) *Domain {
	if n.Kind != yaml.MappingNode {
		p.add(pos(n), `a domain must be a mapping with at least a pattern, e.g. - pattern: "table:{id}"; not %s`, describe(n))
		return nil
	}
	m, reportKeys := p.fieldsLater(n, domainKeys)
	d := &Domain{Pos: pos(n), PatternPos: pos(n)}
	de := &domainEntry{Domain: d, label: "domain"}
	p.entries = append(p.entries, de)

	// An explicit name first, so that every later message can say which domain.
	if e, ok := m["name"]; ok {
		if s, ok := p.str(e, "domain", "a name such as user_digest"); ok {
			de.nameNode = e.val
			if !validName(s) {
				p.add(pos(e.val), "domain: name %q must match [a-z][a-z0-9_]* (lower case, as in user_digest); it names the domain in telemetry and in LOCKKIT_TTL_<NAME>", s)
			} else {
				d.Name = s
				de.label = fmt.Sprintf("domain %q", s)
			}
		}
	}
	if e, ok := m["pattern"]; !ok {
		p.add(pos(n), `%s: missing "pattern"; add the key pattern, e.g. pattern: "table:{id}"`, de.label)
	} else if e.val.Kind == yaml.MappingNode && e.val.Style&yaml.FlowStyle != 0 {
		p.add(pos(e.val), `%s: pattern is read as a YAML mapping because it starts with "{"; quote it, e.g. pattern: "{id}"`, de.label)
	} else if s, ok := p.str(e, de.label, `a key pattern such as "table:{id}"`); ok {
		d.Pattern, d.PatternPos = s, pos(e.val)
		segs, errs := parsePattern(s)
		for _, pe := range errs {
			p.add(p.posIn(e.val, pe.off), "%s: pattern %q: %s", de.label, s, pe.msg)
		}
		if len(errs) == 0 && canBeEmpty(segs) {
			p.add(d.PatternPos, `%s: pattern %q can produce an empty key (string parameters only, no literal text); start it with a word naming the domain, e.g. "table:%s"`, de.label, s, s)
			errs = append(errs, patternError{})
		}
		d.Segments, de.patternOK = segs, len(errs) == 0
		if de.nameNode == nil {
			de.nameNode = e.val
		}
	}
	if _, explicit := m["name"]; !explicit && de.patternOK {
		if name := deriveName(d.Segments); validName(name) {
			d.Name = name
			de.label = fmt.Sprintf("domain %q", name)
		} else if name == "" {
			p.add(d.PatternPos, "domain: pattern %q has no literal words to derive a name from; add one, e.g. name: my_lock", d.Pattern)
		} else {
			p.add(d.PatternPos, "domain: cannot derive a name from pattern %q: its literal words give %q, not a name matching [a-z][a-z0-9_]*; add one, e.g. name: %s",
				d.Pattern, name, nameSuggestion(name))
		}
	}
	reportKeys(de.label)
	de.goNode = de.nameNode
	if e, ok := m["go_name"]; ok {
		de.goNameSet = true
		if s, ok := p.str(e, de.label, "an exported Go name such as UserDigest"); ok {
			de.goNode = e.val
			if !validGoName(s) {
				p.add(pos(e.val), "%s: go_name %q must be an exported Go identifier of ASCII letters and digits, such as %q", de.label, s, goNameSuggestion(s))
			} else {
				d.GoName = s
			}
		}
	} else if d.Name != "" {
		d.GoName = deriveGoName(d.Name)
	}
	if e, ok := m["description"]; ok {
		if s, ok := p.str(e, de.label, "text"); ok {
			// Offsets into the value as written, for the error's position.
			lead := len(s) - len(strings.TrimLeftFunc(s, unicode.IsSpace))
			s = strings.TrimSpace(s)
			if i, problem := commentUnsafe(s); problem != "" {
				p.add(p.posIn(e.val, lead+i), "%s: description: %s", de.label, problem)
			}
			d.Description = strings.ReplaceAll(s, "\r\n", "\n")
		}
	}

	own := p.settings(m, de.label)
	ttl, renew := own.ttl, own.renew
	if ttl.node == nil {
		ttl = defaults.ttl
	}
	if renew.node == nil {
		renew = defaults.renew
	}
	switch {
	case ttl.set:
		d.TTL = ttl.val
	case ttl.node == nil: // set nowhere (an invalid one is reported where it is)
		p.add(pos(n), "%s: no ttl; set ttl on the domain or under defaults, e.g. ttl: 10s", de.label)
	}
	if renew.set {
		d.Renew = renew.val
	}
	// renew leaves room; when both come from defaults it was checked there,
	// once. An invalid renew was reported where it is.
	if ttl.set && (renew.set || renew.node == nil) && (own.ttl.set || own.renew.set) {
		var at *yaml.Node
		if !own.renew.set {
			at = own.ttl.node
		}
		p.checkRenew(de.label, ttl, renew, at)
	}
	for _, fd := range policy.DurationFields() {
		v := own.durations[fd.Name]
		if v.node == nil {
			v = defaults.durations[fd.Name]
		}
		if v.set {
			reflect.ValueOf(d).Elem().FieldByName(fd.GoName).SetInt(int64(v.val))
		}
		// When both come from defaults it was checked there, once.
		if own.ttl.set || own.durations[fd.Name].set {
			p.checkAgainstTTL(fd, de.label, ttl, v, own.ttl.set && !own.durations[fd.Name].set)
		}
	}
	d.Fencing = defaults.fencing.val
	if own.fencing.set {
		d.Fencing = own.fencing.val
	}
	d.Replicas, d.ReplicaTimeout = p.checkReplicas(de.label, own, defaults)
	switch {
	case own.retry.present:
		d.Retry, _ = p.checkRetry(de.label, own.retry, defaults.retry)
	case defaults.retry.present:
		d.Retry = defaultRetry
	default:
		d.Retry = Retry{Attempts: 1}
	}
	wait := own.wait
	if wait.node == nil {
		wait = defaults.wait
	}
	d.Wait = policy.WaitPollName
	if wait.set {
		d.Wait = wait.val.String()
		// internal/policy's rule, where the wait is set: fifo needs a
		// max_wait when it may wait, and no replicas.
		if err := policy.CheckWait(wait.val, d.Retry.Attempts, d.Retry.MaxWait, d.Replicas); err != nil {
			at := wait.node
			if own.wait.node == nil {
				at = n
			}
			msg := err.Error()
			if own.wait.node == nil {
				msg += " (" + fmt.Sprintf("wait from defaults, line %d", wait.node.Line) + ")"
			}
			p.add(pos(at), "%s: %s", de.label, msg)
		}
	}
	d.Kind, d.Permits = p.kind(m, de.label)
	if d.Kind == policy.KindElection {
		// An election's term number is its fence: it always fences. An
		// explicit fencing: false on the domain says otherwise, and is refused
		// where it is written; one from defaults does not apply to it.
		if own.fencing.set && !own.fencing.val {
			p.add(pos(own.fencing.node), "%s: kind election always fences (a term's number is its fence); remove fencing: false", de.label)
		}
		d.Fencing = true
	}
	return d
}

// withoutDomainOnly is the defaults mapping n without the keys that only a
// domain may set (internal/policy's DomainOnly fields), each reported.
func (p *parser) withoutDomainOnly(n *yaml.Node) *yaml.Node {
	out := *n
	out.Content = nil
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := resolve(n.Content[i])
		if f, ok := policy.FieldNamed(k.Value); ok && f.DomainOnly && k.Kind == yaml.ScalarNode {
			p.add(pos(k), "defaults: %s is set on each domain, not under defaults: it says what the domain is", k.Value)
			continue
		}
		out.Content = append(out.Content, n.Content[i], n.Content[i+1])
	}
	return &out
}

// kind reads a domain's kind and permits (internal/policy's rules), each
// problem reported where it is written: an unknown kind at the kind, permits
// below 1 or on a kind other than semaphore at the permits, missing permits
// at the kind.
func (p *parser) kind(m map[string]entry, label string) (string, int) {
	kind, permits := policy.KindLock, 0
	var kindNode *yaml.Node
	if e, ok := m["kind"]; ok {
		if v, ok := p.str(e, label, fmt.Sprintf("%q, %q or %q", policy.KindLock, policy.KindElection, policy.KindSemaphore)); ok {
			if err := policy.CheckKind(v, 0); err != nil && v != policy.KindSemaphore {
				p.add(pos(e.val), "%s: %v", label, err)
				return policy.KindLock, 0
			}
			kind, kindNode = v, e.val
		}
	}
	e, ok := m["permits"]
	switch {
	case ok:
		v, ok := p.scalar(e, label, "a whole number >= 1 such as 3")
		if !ok {
			break
		}
		var n int
		if v.ShortTag() != "!!int" || v.Decode(&n) != nil {
			p.add(pos(v), "%s: permits must be a whole number >= 1 (got %q)", label, v.Value)
			break
		}
		if err := policy.CheckKind(kind, n); err != nil {
			p.add(pos(v), "%s: %v", label, err)
			break
		}
		permits = n
	case kind == policy.KindSemaphore:
		p.add(pos(kindNode), "%s: kind %s needs permits, how many holders it admits at once, e.g. permits: 3", label, policy.KindSemaphore)
	}
	return kind, permits
}

// posIn is the position of byte off of a scalar's value, when the scalar is
// written on one line as is (plain, or quoted without escapes) or is a literal
// block (|); otherwise the scalar's own position.
func (p *parser) posIn(n *yaml.Node, off int) Pos {
	at := pos(n)
	if off <= 0 || off > len(n.Value) || n.Line < 1 || n.Line > len(p.lines) {
		return at
	}
	line := string(p.lines[n.Line-1])
	// Find the byte where the node starts: columns count characters.
	start, col := 0, 1
	for start < len(line) && col < n.Column {
		_, size := utf8.DecodeRuneInString(line[start:])
		start += size
		col++
	}
	raw := line[start:]
	if n.Style == yaml.LiteralStyle {
		return p.posInLiteral(n, off, at)
	}
	switch n.Style {
	case yaml.DoubleQuotedStyle, yaml.SingleQuotedStyle:
		if raw == "" {
			return at
		}
		raw = raw[1:]
		at.Col++
	case 0, yaml.TaggedStyle:
	default:
		return at
	}
	if !strings.HasPrefix(raw, n.Value[:off]) {
		return at
	}
	at.Col += utf8.RuneCountInString(n.Value[:off])
	return at
}

// posInLiteral is posIn for a literal block scalar, whose lines are the
// source lines below the indicator, as written after the block's indentation
// (that of its first non-empty line). It returns at when the source does not
// read as expected.
func (p *parser) posInLiteral(n *yaml.Node, off int, at Pos) Pos {
	before := n.Value[:off]
	k := strings.Count(before, "\n")
	lineNo := n.Line + 1 + k
	if lineNo > len(p.lines) {
		return at
	}
	indent := -1
	for l := n.Line + 1; l <= len(p.lines); l++ {
		if t := strings.TrimLeft(string(p.lines[l-1]), " "); t != "" && t != "\r" {
			indent = len(p.lines[l-1]) - len(t)
			break
		}
	}
	src := string(p.lines[lineNo-1])
	prefix := before[strings.LastIndexByte(before, '\n')+1:]
	if indent < 0 || len(src) < indent || !strings.HasPrefix(src[indent:], prefix) {
		return at
	}
	return Pos{Line: lineNo, Col: indent + 1 + utf8.RuneCountInString(prefix)}
}
