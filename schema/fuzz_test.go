package schema

import (
	"cmp"
	"errors"
	"github.com/lockkit/lockkit/internal/policy"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// FuzzParse: no input makes Parse panic or hang; an accepted file satisfies
// every rule; a rejected one yields positioned, one-line messages.
//
//	go test ./schema -run '^$' -fuzz FuzzParse -fuzztime 30s
func FuzzParse(f *testing.F) {
	f.Add([]byte(validFile))
	f.Add([]byte(""))
	f.Add([]byte("version: 1\npackage: p\ndomains: [{pattern: \"a:{x}{y}\", ttl: 1s}, {pattern: \"a:{z:int}\", ttl: 0s}]\n"))
	f.Add([]byte("version: 1\npackage: p\ndefaults: &d {ttl: 1s, retry: {attempts: 2}}\ndomains: [{pattern: *d}]\n"))
	f.Add([]byte("version: 1\npackage: p\ndomains:\n- {pattern: 'x:{a}:{b:uint64}', renew: none, ttl: 2s, retry: {attempts: 3, jitter: 1, multiplier: 1.5}}\n- {pattern: 'x:{a}', ttl: 1s}\n"))
	f.Add([]byte("version: 1\npackage: p\ndefaults: {ttl: 1s, replicas: 2, replica_timeout: 100ms}\ndomains:\n- {pattern: 'a:{x}', replicas: 0}\n- {pattern: 'b:{x:int}', replica_timeout: 20ms, ttl: 200ms}\n- {pattern: c, replicas: 1, ttl: 50ms, replica_timeout: 49ms}\n- {pattern: d, replicas: -1, replica_timeout: 2s}\n"))
	if src, err := os.ReadFile(filepath.Join("..", "lockkit.yaml")); err == nil {
		f.Add(src)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse("f.yaml", data)
		if err != nil {
			if file != nil {
				t.Fatal("a file and an error")
			}
			var errs Errors
			if !errors.As(err, &errs) || len(errs) == 0 {
				t.Fatalf("error %T %v, want a non-empty Errors", err, err)
			}
			for _, e := range errs {
				if e.File != "f.yaml" || e.Line < 1 || e.Col < 1 || e.Msg == "" || strings.ContainsAny(e.Msg, "\n\r") {
					t.Fatalf("bad error %q", e.Error())
				}
			}
			if _, again := Parse("f.yaml", data); again == nil || again.Error() != err.Error() {
				t.Fatalf("errors differ between two runs:\n%v\n---\n%v", err, again)
			}
			return
		}
		if file == nil || len(file.Domains) == 0 || CheckPackageName(file.Package) != nil || file.Prefix == "" || strings.ContainsAny(file.Prefix, "{}") {
			t.Fatalf("accepted an invalid file: %+v", file)
		}
		names, goNames := map[string]bool{}, map[string]bool{}
		for i, d := range file.Domains {
			if !validName(d.Name) || !validGoName(d.GoName) || names[d.Name] || goNames[d.GoName] {
				t.Fatalf("domain %d: bad or duplicate names %q %q", i, d.Name, d.GoName)
			}
			names[d.Name], goNames[d.GoName] = true, true
			if d.TTL <= 0 || d.Renew >= d.TTL || d.Retry.Attempts < 1 || len(d.Segments) == 0 {
				t.Fatalf("domain %q: invalid policy %+v", d.Name, d)
			}
			if r := d.Retry; !r.None() && (r.Initial <= 0 || r.Initial > r.Max || r.Multiplier < 1 || r.Jitter < 0 || r.Jitter > 1 || r.MaxWait < 0) {
				t.Fatalf("domain %q: invalid retry %+v", d.Name, r)
			}
			if wait := cmp.Or(d.ReplicaTimeout, policy.DefaultReplicaTimeout); d.Replicas < 0 || d.ReplicaTimeout < 0 || d.ReplicaTimeout%time.Millisecond != 0 ||
				d.Replicas == 0 && d.ReplicaTimeout != 0 || d.Replicas > 0 && wait >= d.TTL {
				t.Fatalf("domain %q: invalid replicas %d, replica timeout %v (ttl %v)", d.Name, d.Replicas, d.ReplicaTimeout, d.TTL)
			}
			if _, _, amb := ambiguity(d.Segments); amb {
				t.Fatalf("domain %q: ambiguous pattern %q accepted", d.Name, d.Pattern)
			}
			for _, prev := range file.Domains[:i] {
				if _, ov := overlap(prev.Segments, d.Segments); ov {
					t.Fatalf("overlapping patterns %q and %q accepted", prev.Pattern, d.Pattern)
				}
			}
		}
	})
}

// FuzzPatterns: the pattern parser never panics, and the collision checks'
// example keys are real: an overlap example fits both patterns, an ambiguity
// example has two splits (checked by independent brute force).
//
//	go test ./schema -run '^$' -fuzz FuzzPatterns -fuzztime 30s
func FuzzPatterns(f *testing.F) {
	f.Add("user:{id}", "user:{name}")
	f.Add("user:{id:int64}:digest", "user:{id}")
	f.Add("job:{id:int64}", "job:latest")
	f.Add("{a}-{b}", "{x:int}-{y:uint64}")
	f.Add("a{x}b{y:int}c", "a1b{z}")
	f.Add("table:{", "{}")
	f.Fuzz(func(t *testing.T, a, b string) {
		sa, errsA := parsePattern(a)
		sb, errsB := parsePattern(b)
		for _, e := range append(errsA, errsB...) {
			if e.msg == "" || e.off < 0 || e.off > max(len(a), len(b)) {
				t.Fatalf("bad pattern error %+v", e)
			}
		}
		if len(errsA) > 0 || len(errsB) > 0 {
			return
		}
		for _, segs := range [][]Segment{sa, sb} {
			if key, params, amb := ambiguity(segs); amb {
				if countSplits(segs, key) < 2 || len(params) == 0 {
					t.Fatalf("ambiguity example %q (params %v) has fewer than two splits", key, params)
				}
			}
		}
		if key, ov := overlap(sa, sb); ov {
			if !keyRegexp(t, a).MatchString(key) || !keyRegexp(t, b).MatchString(key) {
				t.Fatalf("overlap example %q does not fit %q and %q", key, a, b)
			}
		} else if a == b {
			t.Fatalf("a pattern does not overlap itself: %q", a)
		}
	})
}
