package schema

import (
	"errors"
	"github.com/lockkit/lockkit/internal/policy"
	"reflect"
	"strings"
	"testing"
	"time"
)

const validFile = `# yaml-language-server: $schema=./lockkit.schema.json
version: 1
package: locks
prefix: "app:lock:"
defaults:
  ttl: 10s
  renew: 3s
  retry: {attempts: 5, initial: 50ms, max: 1s, multiplier: 2, jitter: 0.5, max_wait: 5s}
domains:
  - pattern: "table:{id}"
    fencing: true
    description: |
      A restaurant table being booked.
      Second line.
  - pattern: "user:{id:int64}:digest"
    ttl: 30s
    retry: none
  - pattern: cron:{job}:{hour:int64}
    name: cron_run
    go_name: CronRun
    renew: none
    retry: {attempts: 2}
  - pattern: "{id:uint64}"
    name: bare
    ttl: 1500ms
    renew: 900ms
`

func TestParseValid(t *testing.T) {
	f, err := Parse("lockkit.yaml", []byte(validFile))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if f.Package != "locks" || f.Prefix != "app:lock:" || f.Version != 1 || f.Path != "lockkit.yaml" {
		t.Errorf("file = %+v", f)
	}
	defRetry := Retry{Attempts: 5, Initial: 50 * time.Millisecond, Max: time.Second, Multiplier: 2, Jitter: 0.5, MaxWait: 5 * time.Second}
	want := []Domain{
		{
			Name: "table", GoName: "Table", Pattern: "table:{id}",
			Segments:    []Segment{{Literal: "table:"}, {Param: "id", Type: TypeString}},
			Description: "A restaurant table being booked.\nSecond line.",
			TTL:         10 * time.Second, Renew: 3 * time.Second, Retry: defRetry, Fencing: true,
			Wait: "poll", Kind: "lock", Pos: Pos{10, 5}, PatternPos: Pos{10, 14},
		},
		{
			Name: "user_digest", GoName: "UserDigest", Pattern: "user:{id:int64}:digest",
			Segments: []Segment{{Literal: "user:"}, {Param: "id", Type: TypeInt64}, {Literal: ":digest"}},
			TTL:      30 * time.Second, Renew: 3 * time.Second, Retry: Retry{Attempts: 1},
			Wait: "poll", Kind: "lock", Pos: Pos{15, 5}, PatternPos: Pos{15, 14},
		},
		{
			Name: "cron_run", GoName: "CronRun", Pattern: "cron:{job}:{hour:int64}",
			Segments: []Segment{{Literal: "cron:"}, {Param: "job", Type: TypeString}, {Literal: ":"}, {Param: "hour", Type: TypeInt64}},
			TTL:      10 * time.Second, Renew: -1,
			// attempts from the domain, the rest inherited from defaults
			Retry: Retry{Attempts: 2, Initial: 50 * time.Millisecond, Max: time.Second, Multiplier: 2, Jitter: 0.5, MaxWait: 5 * time.Second},
			Wait:  "poll", Kind: "lock", Pos: Pos{18, 5}, PatternPos: Pos{18, 14},
		},
		{
			Name: "bare", GoName: "Bare", Pattern: "{id:uint64}",
			Segments: []Segment{{Param: "id", Type: TypeUint64}},
			TTL:      1500 * time.Millisecond, Renew: 900 * time.Millisecond, Retry: defRetry,
			Wait: "poll", Kind: "lock", Pos: Pos{23, 5}, PatternPos: Pos{23, 14},
		},
	}
	if len(f.Domains) != len(want) {
		t.Fatalf("got %d domains, want %d", len(f.Domains), len(want))
	}
	for i, d := range f.Domains {
		if !reflect.DeepEqual(*d, want[i]) {
			t.Errorf("domain %d:\n got %+v\nwant %+v", i, *d, want[i])
		}
	}
	if ps := f.Domains[2].Params(); len(ps) != 2 || ps[0].Param != "job" || ps[1].Type != TypeInt64 {
		t.Errorf("Params() = %+v", ps)
	}
}

func TestParseBuiltInRetryDefaults(t *testing.T) {
	f, err := Parse("x.yaml", []byte("version: 1\npackage: p\ndomains:\n  - pattern: a\n    ttl: 1s\n    retry: {attempts: 3}\n  - pattern: b\n    ttl: 1s\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := Retry{Attempts: 3, Initial: policy.DefaultInitialInterval, Max: policy.DefaultMaxInterval, Multiplier: policy.DefaultMultiplier, Jitter: policy.DefaultJitter}
	if got := f.Domains[0].Retry; got != want {
		t.Errorf("retry = %+v, want %+v", got, want)
	}
	if got := f.Domains[1].Retry; got != (Retry{Attempts: 1}) || !got.None() {
		t.Errorf("no retry anywhere: got %+v, want a single attempt", got)
	}
	if f.Prefix != policy.DefaultPrefix || f.Domains[0].Renew != 0 || f.Domains[0].Fencing {
		t.Errorf("defaults not applied: prefix %q, renew %v, fencing %v", f.Prefix, f.Domains[0].Renew, f.Domains[0].Fencing)
	}
}

// replicas and replica_timeout come from the domain or from defaults, key by
// key; replicas: 0 on a domain opts out, and drops an inherited timeout.
func TestParseReplicas(t *testing.T) {
	src := `version: 1
package: p
defaults:
  ttl: 1s
  replicas: 1
  replica_timeout: 100ms
domains:
  - pattern: inherited
  - pattern: more
    replicas: 3
  - pattern: quicker
    replica_timeout: 20ms
  - pattern: opted_out
    replicas: 0
  - pattern: shorter_ttl
    ttl: 800ms
`
	f, err := Parse("f.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	type rt struct {
		replicas int
		timeout  time.Duration
	}
	want := map[string]rt{
		"inherited":   {1, 100 * time.Millisecond},
		"more":        {3, 100 * time.Millisecond},
		"quicker":     {1, 20 * time.Millisecond},
		"opted_out":   {0, 0},
		"shorter_ttl": {1, 100 * time.Millisecond},
	}
	for _, d := range f.Domains {
		if got := (rt{d.Replicas, d.ReplicaTimeout}); got != want[d.Name] {
			t.Errorf("domain %q: replicas, replica_timeout = %v, want %v", d.Name, got, want[d.Name])
		}
	}

	// Without defaults: 0 unless set; a timeout left out stays 0 (the
	// runtime's default), and may be longer than the ttl of a domain that
	// does not wait.
	src = "version: 1\npackage: p\ndefaults: {ttl: 1s, renew: none}\ndomains:\n  - pattern: a\n  - pattern: b\n    replicas: 2\n  - pattern: c\n    replicas: 1\n    replica_timeout: 1ms\n    ttl: 12ms\n  - pattern: d\n    ttl: 10ms\n"
	if f, err = Parse("f.yaml", []byte(src)); err != nil {
		t.Fatal(err)
	}
	want = map[string]rt{"a": {0, 0}, "b": {2, 0}, "c": {1, time.Millisecond}, "d": {0, 0}}
	for _, d := range f.Domains {
		if got := (rt{d.Replicas, d.ReplicaTimeout}); got != want[d.Name] {
			t.Errorf("domain %q: replicas, replica_timeout = %v, want %v", d.Name, got, want[d.Name])
		}
	}
}

// Every problem is reported, each at its position, with a message that says
// what would be right. The generator's golden tests check many more.
func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, src string
		want      []string
	}{
		{"empty", "", []string{`f.yaml:1:1: the file is empty; start it with "version: 1"`}},
		{"comments only", "# nothing\n", []string{`f.yaml:1:1: the file is empty; start it with "version: 1"`}},
		{"not a mapping", "- a\n", []string{`f.yaml:1:1: the top level must be a mapping with the keys version, package, prefix, defaults, domains, not a list`}},
		{"syntax", "version: 1\npackage: [\n", []string{`f.yaml:2:1: invalid YAML: did not find expected node content`}},
		{"two documents", "version: 1\npackage: p\ndomains: [{pattern: a, ttl: 1s}]\n---\nversion: 1\n", []string{
			`f.yaml:5:1: a second YAML document (after "---"); a lockkit.yaml holds exactly one`}},
		{"unsupported version stops", "version: 2\npackage: 1x\n", []string{
			`f.yaml:1:10: unsupported version 2; this lockkit-gen reads version 1 only`}},
		{"missing everything", "prefix: x\n", []string{
			`f.yaml:1:1: missing "version"; add "version: 1" as the first line`,
			`f.yaml:1:1: missing "package"; add the Go package name of the generated code, e.g. package: locks`,
			`f.yaml:1:1: missing "domains"; list at least one, e.g. domains: [{pattern: "table:{id}"}]`}},
		{"version as string", "version: \"1\"\npackage: p\ndomains: []\n", []string{
			`f.yaml:1:10: version must be the number 1, not "1"; write version: 1`,
			`f.yaml:3:10: no domains; list at least one, e.g. - pattern: "table:{id}"`}},
		{"unknown keys", "version: 1\npakage: p\ndomains:\n  - pattern: a\n    tll: 1s\n", []string{
			`f.yaml:1:1: missing "package"; add the Go package name of the generated code, e.g. package: locks`,
			`f.yaml:2:1: unknown key "pakage" (did you mean "package"?); valid keys: version, package, prefix, defaults, domains`,
			`f.yaml:4:5: domain "a": no ttl; set ttl on the domain or under defaults, e.g. ttl: 10s`,
			`f.yaml:5:5: domain "a": unknown key "tll" (did you mean "ttl"?); valid keys: pattern, name, go_name, description, ttl, renew, retry, fencing, replicas, replica_timeout, wait, max_hold, kind, permits`}},
		{"duplicate key", "version: 1\npackage: p\npackage: q\ndomains: [{pattern: a, ttl: 1s}]\n", []string{
			`f.yaml:3:1: duplicate key "package" (first at line 2); keep one`}},
		{"renew from defaults too long", "version: 1\npackage: p\ndefaults: {renew: 5s}\ndomains:\n  - pattern: a\n    ttl: 2s\n", []string{
			`f.yaml:6:10: domain "a": renew interval 5s leaves no room to renew a 2s lease: a renewal sent then, answered within the command timeout 500ms, would land after the lease's local deadline (ttl − drift 22ms); renew at most every 1.478s, or use a longer ttl or a shorter command timeout (renew 5s is from defaults, line 3; the command timeout is lockkit's default, 500ms, which lockkit.WithCommandTimeout changes)`}},
		{"ttl not a duration", "version: 1\npackage: p\ndomains:\n  - pattern: a\n    ttl: 10\n  - pattern: b\n    ttl: [1s]\n  - pattern: c\n    ttl: 1.5ms\n", []string{
			`f.yaml:5:10: domain "a": ttl is not a Go duration (got "10"); write a number with a unit, such as "250ms", "10s" or "1m30s"`,
			`f.yaml:7:10: domain "b": ttl must be a Go duration such as "10s", not a list`,
			`f.yaml:9:10: domain "c": ttl must be a whole number of milliseconds (got 1.5ms; such as 10ms)`}},
		{"retry", "version: 1\npackage: p\ndefaults: {ttl: 1s}\ndomains:\n  - pattern: a\n    retry: {initial: 2s}\n  - pattern: b\n    retry: {attempts: 2, initial: 2s}\n  - pattern: c\n    retry: 3\n  - pattern: d\n    retry: {attempts: x, multiplier: .inf}\n", []string{
			`f.yaml:6:12: domain "a": retry has neither attempts nor max_wait; add the total number of tries, e.g. {attempts: 5}, or how long to wait, e.g. {max_wait: 5s}, or write retry: none for a single attempt`,
			`f.yaml:8:12: domain "b": retry initial (2s) is longer than max (1s), the cap on each backoff; make max at least 2s`,
			`f.yaml:10:12: domain "c": retry must be "none" or a mapping, not the number 3; write "none" for a single attempt, or a mapping such as {attempts: 5, initial: 50ms, max: 1s}`,
			`f.yaml:12:23: domain "d": retry: attempts must be a whole number such as 5, not "x"`,
			`f.yaml:12:38: domain "d": retry: multiplier must be a number >= 1 such as 2, not the number .inf`}},
		{"pattern positions", "version: 1\npackage: p\ndefaults: {ttl: 1s}\ndomains:\n  - pattern: \"ab:{x:float}:{}\"\n  - pattern: 'cd:{1x}}'\n  - pattern: {id}\n", []string{
			`f.yaml:5:18: domain: pattern "ab:{x:float}:{}": unknown parameter type "float" in {x:float}; use one of string, int, int32, int64, uint, uint32, uint64`,
			`f.yaml:5:28: domain: pattern "ab:{x:float}:{}": empty parameter "{}"; write {name} or {name:type}, e.g. {id}`,
			`f.yaml:6:18: domain: pattern "cd:{1x}}": parameter name "1x" is not a Go identifier; use ASCII letters, digits and _, starting with a letter, e.g. {p1x}`,
			`f.yaml:6:22: domain: pattern "cd:{1x}}": unmatched "}"; braces only enclose parameters, as in {id}`,
			`f.yaml:7:14: domain: pattern is read as a YAML mapping because it starts with "{"; quote it, e.g. pattern: "{id}"`}},
		{"names", "version: 1\npackage: p\ndefaults: {ttl: 1s}\ndomains:\n  - pattern: \"2fa:{id}\"\n  - pattern: x\n    name: Bad-Name\n  - pattern: y\n    go_name: lower\n  - pattern: z\n    go_name: SetDefault\n  - pattern: w\n    go_name: YLock\n", []string{
			`f.yaml:5:14: domain: cannot derive a name from pattern "2fa:{id}": its literal words give "2fa", not a name matching [a-z][a-z0-9_]*; add one, e.g. name: d2fa`,
			`f.yaml:7:11: domain: name "Bad-Name" must match [a-z][a-z0-9_]* (lower case, as in user_digest); it names the domain in telemetry and in LOCKKIT_TTL_<NAME>`,
			`f.yaml:9:14: domain "y": go_name "lower" must be an exported Go identifier of ASCII letters and digits, such as "Lower"`,
			`f.yaml:11:14: domain "z": Go name "SetDefault" would declare SetDefault, which the generated package already declares (Locks, New, SetDefault, Err); set go_name: to another name`}},
		{"go name collides with a type", "version: 1\npackage: p\ndefaults: {ttl: 1s}\ndomains:\n  - pattern: y\n  - pattern: w\n    go_name: YLock\n", []string{
			`f.yaml:7:14: domain "w": Go name "YLock" would declare the constructor YLock, which the domain at line 5 ("y") already declares as its type YLock; set go_name: to tell them apart`}},
		{"package and prefix", "version: 1\npackage: my-locks\nprefix: \"\"\ndomains: [{pattern: a, ttl: 1s}]\n", []string{
			`f.yaml:2:10: package "my-locks" is not a Go package name; use ASCII letters, digits and _, starting with a letter, e.g. "my_locks"`,
			`f.yaml:3:9: prefix is empty; leave it out for the default "lock:", or write one such as "myapp:lock:"`}},
		{"collisions", "version: 1\npackage: p\ndefaults: {ttl: 1s}\ndomains:\n  - pattern: \"user:{id}\"\n  - pattern: \"user:{name}\"\n    name: user_by_name\n  - pattern: \"job:latest\"\n  - pattern: \"job:{id}\"\n", []string{
			`f.yaml:6:14: domain "user_by_name": pattern "user:{name}" can produce the same key as domain "user" (line 5, pattern "user:{id}"), e.g. "lock:{user:a}"; change the literal parts so that no key fits both`,
			`f.yaml:9:14: domain "job": pattern "job:{id}" can produce the same key as domain "job_latest" (line 8, pattern "job:latest"), e.g. "lock:{job:latest}"; change the literal parts so that no key fits both`}},
		{"ambiguous", "version: 1\npackage: p\ndefaults: {ttl: 1s}\ndomains:\n  - pattern: \"a:{x}{y:int}\"\n  - pattern: \"b:{x}-{y}\"\n", []string{
			`f.yaml:5:14: domain "a": pattern "a:{x}{y:int}" is ambiguous: {x} and {y} are next to each other, so a key cannot tell where one ends; separate them with a literal that contains ":", as in {x}:{y}`,
			`f.yaml:6:14: domain "b": pattern "b:{x}-{y}" is ambiguous: the key suffix "b:a--a" splits into {x}, {y} in two ways; separate parameters with a literal that contains ":", as in {x}:{y}`}},
		{"replicas", "version: 1\npackage: p\ndefaults: {ttl: 1s}\ndomains:\n  - pattern: a\n    replicas: -1\n  - pattern: b\n    replicas: 1.5\n  - pattern: c\n    replicas: [1]\n  - pattern: d\n    replicas: 99999999999999999999\n", []string{
			`f.yaml:6:15: domain "a": replicas must be a whole number >= 0 (got "-1"); 0 means do not wait for replicas`,
			`f.yaml:8:15: domain "b": replicas must be a whole number >= 0 (got "1.5"); 0 means do not wait for replicas`,
			`f.yaml:10:15: domain "c": replicas must be a whole number >= 0 such as 1, not a list`,
			`f.yaml:12:15: domain "d": replicas must be a whole number >= 0 (got "99999999999999999999"); 0 means do not wait for replicas`}},
		{"32-bit limits", "version: 1\npackage: p\ndefaults: {ttl: 1s}\ndomains:\n  - pattern: a\n    retry: {attempts: 9223372036854775807}\n  - pattern: b\n    replicas: 3000000000\n  - pattern: c\n    retry: {attempts: 2147483647, max_wait: 1s}\n    replicas: 2147483647\n", []string{
			`f.yaml:6:23: domain "a": retry: attempts must be at most 2147483647, the largest int of 32-bit Go targets (got 9223372036854775807)`,
			`f.yaml:8:15: domain "b": replicas must be at most 2147483647, the largest int of 32-bit Go targets (got 3000000000)`}},
		{"enums", "version: 1\npackage: p\ndefaults: {ttl: 1s}\ndomains:\n  - pattern: a\n    wait: FIFO\n  - pattern: b\n    wait: 1\n  - pattern: c\n    wait: [fifo]\n", []string{
			`f.yaml:6:11: domain "a": wait must be "poll" (retry with backoff, the default) or "fifo" (a fair queue with push wake-up) (got "FIFO")`,
			`f.yaml:8:11: domain "b": wait must be "poll" (retry with backoff, the default) or "fifo" (a fair queue with push wake-up) (got "1")`,
			`f.yaml:10:11: domain "c": wait must be "poll" or "fifo", not a list`}},
		{"replica_timeout values", "version: 1\npackage: p\ndefaults: {ttl: 1s, replicas: 1}\ndomains:\n  - pattern: a\n    replica_timeout: 0s\n  - pattern: b\n    replica_timeout: 1.5ms\n  - pattern: c\n    replica_timeout: 50\n", []string{
			`f.yaml:6:22: domain "a": replica_timeout must be > 0 (got "0s"); leave it out for the default 50ms, or write a Go duration such as "100ms"`,
			`f.yaml:8:22: domain "b": replica_timeout must be a whole number of milliseconds, as Redis WAIT counts them (got "1.5ms"); such as "2ms"`,
			`f.yaml:10:22: domain "c": replica_timeout is not a Go duration (got "50"); write a number with a unit, such as "250ms", "10s" or "1m30s"`}},
		{"replica_timeout without replicas", "version: 1\npackage: p\ndefaults: {ttl: 1s, replicas: 0, replica_timeout: 10ms}\ndomains:\n  - pattern: a\n    replica_timeout: 20ms\n  - pattern: b\n    replicas: 0\n    replica_timeout: 20ms\n", []string{
			`f.yaml:3:51: defaults: replica_timeout needs replicas > 0, but replicas is 0 (do not wait for replicas); set replicas to 1 or more, or remove replica_timeout`,
			`f.yaml:6:22: domain "a": replica_timeout needs replicas > 0, but replicas is 0 (from defaults, line 3: do not wait for replicas); set replicas to 1 or more, or remove replica_timeout`,
			`f.yaml:9:22: domain "b": replica_timeout needs replicas > 0, but replicas is 0 (do not wait for replicas); set replicas to 1 or more, or remove replica_timeout`}},
		{"replica_timeout vs ttl", "version: 1\npackage: p\ndefaults: {ttl: 40ms, replicas: 1, renew: none}\ndomains:\n  - pattern: a\n    ttl: 1s\n  - pattern: b\n    ttl: 1s\n    replica_timeout: 1s\n  - pattern: c\n    replicas: 0\n  - pattern: d\n    ttl: 10ms\n", []string{
			`f.yaml:3:17: defaults: replica_timeout (50ms, the default) must be shorter than ttl (40ms), or the lease could expire while the acquisition waits for replicas; set a shorter replica_timeout such as "4ms", or a longer ttl`,
			`f.yaml:9:22: domain "b": replica_timeout (1s) must be shorter than ttl (1s), or the lease could expire while the acquisition waits for replicas; set a shorter replica_timeout such as "50ms", or a longer ttl`,
			`f.yaml:13:10: domain "d": replica_timeout (50ms, the default) must be shorter than ttl (10ms), or the lease could expire while the acquisition waits for replicas; set a shorter replica_timeout such as "1ms", or a longer ttl`}},
		{"replica_timeout in defaults without replicas there", "version: 1\npackage: p\ndefaults: {ttl: 40ms, replica_timeout: 10ms, renew: none}\ndomains:\n  - pattern: a\n    replicas: 2\n", []string{
			`f.yaml:3:40: defaults: replica_timeout needs replicas > 0, but replicas is 0 (the default: do not wait for replicas); set replicas to 1 or more, or remove replica_timeout`}},
		{"replica_timeout from defaults vs ttl", "version: 1\npackage: p\ndefaults: {ttl: 1s, replicas: 1, replica_timeout: 500ms, renew: none}\ndomains:\n  - pattern: a\n    ttl: 400ms\n  - pattern: b\n    replicas: 3\n  - pattern: c\n    replicas: 0\n    ttl: 100ms\n", []string{
			`f.yaml:6:10: domain "a": replica_timeout (500ms, from defaults, line 3) must be shorter than ttl (400ms), or the lease could expire while the acquisition waits for replicas; set a shorter replica_timeout such as "40ms", or a longer ttl`}},
		{"default replica_timeout vs inherited ttl", "version: 1\npackage: p\ndefaults: {ttl: 40ms, renew: none}\ndomains:\n  - pattern: a\n    replicas: 3\n  - pattern: b\n", []string{
			`f.yaml:6:15: domain "a": replica_timeout (50ms, the default) must be shorter than ttl (40ms, from defaults, line 3), or the lease could expire while the acquisition waits for replicas; set a shorter replica_timeout such as "4ms", or a longer ttl`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse("f.yaml", []byte(tt.src))
			if err == nil {
				t.Fatalf("Parse succeeded (%+v), want errors", f)
			}
			if f != nil {
				t.Errorf("Parse returned a file along with errors")
			}
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("error is %T, want Errors", err)
			}
			got := strings.Split(err.Error(), "\n")
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			if len(errs) != len(tt.want) {
				t.Errorf("len(Errors) = %d, want %d", len(errs), len(tt.want))
			}
		})
	}
}

func TestDeriveNames(t *testing.T) {
	tests := []struct{ pattern, name, goName string }{
		{"table:{id}", "table", "Table"},
		{"user:{id:int64}:digest", "user_digest", "UserDigest"},
		{"Cron-Job:{job}:{hour:int64}", "cron_job", "CronJob"},
		{"v2.orders/{id}", "v2_orders", "V2Orders"},
		{"{id}", "", ""},
	}
	for _, tt := range tests {
		segs, errs := parsePattern(tt.pattern)
		if len(errs) > 0 {
			t.Fatalf("parsePattern(%q): %v", tt.pattern, errs)
		}
		name := deriveName(segs)
		if name != tt.name {
			t.Errorf("deriveName(%q) = %q, want %q", tt.pattern, name, tt.name)
		}
		if got := deriveGoName(name); got != tt.goName {
			t.Errorf("deriveGoName(%q) = %q, want %q", name, got, tt.goName)
		}
	}
}

func TestCheckPackageName(t *testing.T) {
	for _, ok := range []string{"locks", "my_locks", "Locks2", "_x"} {
		if err := CheckPackageName(ok); err != nil {
			t.Errorf("CheckPackageName(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "_", "func", "1abc", "my-locks", "lócks"} {
		if err := CheckPackageName(bad); err == nil {
			t.Errorf("CheckPackageName(%q) = nil, want an error", bad)
		}
	}
}

// Issue 11, defect 6: policies that validated before and then lost or
// refused every lease. The rules are internal/policy's, shared with the
// runtime; the schema reports them at the offending value.
func TestParseRefusesUnworkablePolicies(t *testing.T) {
	for _, tc := range []struct{ name, domain, want string }{
		{"renew just under the ttl", "ttl: 10s\n    renew: 9950ms", `f.yaml:6:12: domain "a": renew interval 9.95s leaves no room to renew a 10s lease: a renewal sent then, answered within the command timeout 500ms, would land after the lease's local deadline (ttl − drift 102ms); renew at most every 9.398s`},
		{"ttl all drift", "ttl: 2ms", `f.yaml:5:10: domain "a": ttl must be at least 10ms (got 2ms)`},
		{"infinite multiplier", "ttl: 1s\n    retry: {attempts: 2, multiplier: .inf}", `multiplier must be`},
		{"NaN jitter", "ttl: 1s\n    retry: {attempts: 2, jitter: .nan}", `jitter must be`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := "version: 1\npackage: p\ndomains:\n  - pattern: a\n    " + tc.domain + "\n"
			_, err := Parse("f.yaml", []byte(src))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
