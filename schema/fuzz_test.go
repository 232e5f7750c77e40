package schema

import (
	"bytes"
	"cmp"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/policy"
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
		checkParsed(t, "f.yaml", file, err, func() error { _, err := Parse("f.yaml", data); return err })
	})
}

// FuzzLoad: Load, the entry that reads a schema from disk, keeps Parse's
// promises (checkParsed) for the bytes it reads, naming the file's path, and
// agrees with Parse on them; a file over its size limit is refused with a
// one-line error naming the path (TestLoadSizeLimit pins the boundary: a
// fuzzed input is rarely that large).
//
//	go test ./schema -run '^$' -fuzz FuzzLoad -fuzztime 30s
func FuzzLoad(f *testing.F) {
	for _, seed := range []string{"minimal", "anchors", "limits_32bit", "err_unknown_keys", "err_colliding_patterns"} {
		src, err := os.ReadFile(filepath.Join("..", "gen", "testdata", "golden", seed, "lockkit.yaml"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(src)
	}
	f.Add([]byte("\x00\xff{")) // not YAML
	dir := f.TempDir()
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "lockkit-"+strconv.FormatInt(n.Add(1), 10)+".yaml")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(path)
		checkLoaded(t, path, data)
	})
}

// checkLoaded loads path, which holds data, and checks the result.
func checkLoaded(t *testing.T, path string, data []byte) {
	t.Helper()
	file, err := Load(path)
	if len(data) > maxFileSize {
		if file != nil || err == nil || !strings.HasPrefix(err.Error(), path+": ") || strings.ContainsAny(err.Error(), "\n\r") {
			t.Fatalf("a file of %d bytes over the limit %d: %v", len(data), maxFileSize, err)
		}
		return
	}
	checkParsed(t, path, file, err, func() error { _, err := Load(path); return err })
	parsed, perr := Parse(path, data)
	if (err == nil) != (perr == nil) || err != nil && err.Error() != perr.Error() || !reflect.DeepEqual(file, parsed) {
		t.Fatalf("Load and Parse disagree on the same bytes: %v / %v", err, perr)
	}
}

// TestLoadSizeLimit: a valid schema padded with newlines to the size limit
// loads; one byte more is refused, as is a file that never ends.
func TestLoadSizeLimit(t *testing.T) {
	dir := t.TempDir()
	for _, size := range []int{maxFileSize - 1, maxFileSize, maxFileSize + 1} {
		data := append([]byte(validFile), bytes.Repeat([]byte("\n"), size-len(validFile))...)
		path := filepath.Join(dir, strconv.Itoa(size)+".yaml")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		checkLoaded(t, path, data)
		if _, err := Load(path); (err == nil) != (size <= maxFileSize) {
			t.Fatalf("%d bytes (limit %d): %v", size, maxFileSize, err)
		}
	}
	if _, err := os.Stat("/dev/zero"); err == nil {
		if _, err := Load("/dev/zero"); err == nil || !strings.HasPrefix(err.Error(), "/dev/zero: ") {
			t.Fatalf("/dev/zero: %v", err)
		}
	}
}

// checkParsed holds what every entry that parses a schema (Parse, Load)
// promises for its result: a rejected file yields a non-empty Errors of
// positioned one-line messages naming name, the same on a second run
// (again); an accepted one satisfies every rule.
func checkParsed(t *testing.T, name string, file *File, err error, again func() error) {
	t.Helper()
	if err != nil {
		if file != nil {
			t.Fatal("a file and an error")
		}
		var errs Errors
		if !errors.As(err, &errs) || len(errs) == 0 {
			t.Fatalf("error %T %v, want a non-empty Errors", err, err)
		}
		for _, e := range errs {
			if e.File != name || e.Line < 1 || e.Col < 1 || e.Msg == "" || strings.ContainsAny(e.Msg, "\n\r") {
				t.Fatalf("bad error %q", e.Error())
			}
		}
		if second := again(); second == nil || second.Error() != err.Error() {
			t.Fatalf("errors differ between two runs:\n%v\n---\n%v", err, second)
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
