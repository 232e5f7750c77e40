package policy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/gen"
	"github.com/lockkit/lockkit/internal/policy"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/lockkit/lockkit/lockkittest"
	"github.com/lockkit/lockkit/schema"
)

// The places that restate the policy fields are tested against their one
// declaration, policy.Fields: each test walks the declaration, so a field
// added there fails every place that does not have it yet.

// typeName is t as a Field's Type spells it: a mapping by its bare name.
func typeName(t reflect.Type) string {
	if t.Kind() == reflect.Struct {
		return t.Name()
	}
	return t.String()
}

// checkStruct checks that st has a field GoName of the declared type for
// every declared field, in the declared order among st's fields.
func checkStruct(t *testing.T, st reflect.Type, fields []policy.Field) {
	t.Helper()
	last := -1
	for _, f := range fields {
		sf, ok := st.FieldByName(f.GoName)
		if !ok {
			t.Errorf("%v has no field %s for %s", st, f.GoName, f.Name)
			continue
		}
		if got := typeName(sf.Type); got != f.Type {
			t.Errorf("%v.%s is a %s; the declaration of %s says %s", st, f.GoName, got, f.Name, f.Type)
		}
		if sf.Index[0] < last {
			t.Errorf("%v.%s is out of the declared order", st, f.GoName)
		}
		last = sf.Index[0]
		if f.Fields != nil {
			checkStruct(t, sf.Type, f.Fields)
		}
	}
}

// The runtime's Policy and the schema's Domain name every field as the
// declaration does, with its type; lockkit.Policy has no other field.
func TestDeclarationMatchesGoModels(t *testing.T) {
	checkStruct(t, reflect.TypeFor[lockkit.Policy](), policy.Fields)
	checkStruct(t, reflect.TypeFor[schema.Domain](), policy.Fields)
	if n := reflect.TypeFor[lockkit.Policy]().NumField(); n != len(policy.Fields) {
		t.Errorf("lockkit.Policy has %d fields, the declaration %d: declare the new one in internal/policy", n, len(policy.Fields))
	}
	// A backend's request carries some fields: under the same name and type.
	for _, st := range []reflect.Type{reflect.TypeFor[driver.Request]()} {
		for i := range st.NumField() {
			sf := st.Field(i)
			for _, f := range policy.Fields {
				if strings.EqualFold(sf.Name, f.GoName) && (sf.Name != f.GoName || typeName(sf.Type) != f.Type) {
					t.Errorf("%v.%s %v restates the policy field %s (%s %s) differently", st, sf.Name, sf.Type, f.Name, f.GoName, f.Type)
				}
			}
		}
	}
}

// The JSON Schema describes every field with the declaration's words
// (Description: doc, rule, default), and lets defaults and a domain set it.
func TestDeclarationMatchesJSONSchema(t *testing.T) {
	var doc struct {
		Properties struct {
			Defaults struct {
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"defaults"`
		} `json:"properties"`
		Definitions map[string]struct {
			Description string `json:"description"`
			AnyOf       []struct {
				Properties map[string]struct {
					Description string `json:"description"`
				} `json:"properties"`
			} `json:"anyOf"`
			Properties map[string]json.RawMessage `json:"properties"`
		} `json:"definitions"`
	}
	if err := json.Unmarshal(schema.JSONSchema(), &doc); err != nil {
		t.Fatal(err)
	}
	for _, f := range policy.Fields {
		def, ok := doc.Definitions[f.Name]
		if !ok {
			t.Errorf("the JSON Schema has no definition %q", f.Name)
			continue
		}
		if def.Description != f.Description() {
			t.Errorf("JSON Schema %s:\n  description %q\n  declared    %q", f.Name, def.Description, f.Description())
		}
		ref := `{"$ref":"#/definitions/` + f.Name + `"}`
		for where, props := range map[string]map[string]json.RawMessage{
			"defaults": doc.Properties.Defaults.Properties,
			"domain":   doc.Definitions["domain"].Properties,
		} {
			got := strings.Join(strings.Fields(string(props[f.Name])), "")
			switch {
			case where == "defaults" && f.DomainOnly:
				if got != "" {
					t.Errorf("JSON Schema defaults.%s = %s; %s is set on a domain only", f.Name, got, f.Name)
				}
			case got != ref:
				t.Errorf("JSON Schema %s.%s = %s, want %s", where, f.Name, got, ref)
			}
		}
		for _, sub := range f.Fields {
			var got string
			for _, alt := range def.AnyOf {
				if p, ok := alt.Properties[sub.Name]; ok {
					got = p.Description
				}
			}
			if got != sub.Description() {
				t.Errorf("JSON Schema %s.%s:\n  description %q\n  declared    %q", f.Name, sub.Name, got, sub.Description())
			}
		}
	}
}

// The annotated lockkit.yaml in docs/schema.md, the only one, is a valid
// file that sets every declared field under defaults and states each
// field's declared default in its comment.
func TestDeclarationMatchesAnnotatedDocs(t *testing.T) {
	md, err := os.ReadFile("../../docs/schema.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```yaml\n(# yaml-language-server.*?)```").FindSubmatch(md)
	if m == nil {
		t.Fatal("docs/schema.md has no annotated lockkit.yaml")
	}
	if n := len(regexp.MustCompile("(?m)^# yaml-language-server").FindAll(md, -1)); n != 1 {
		t.Errorf("docs/schema.md has %d annotated files; keep one", n)
	}
	if _, err := schema.Parse("docs/schema.md", m[1]); err != nil {
		t.Fatalf("the annotated file does not parse: %v", err)
	}
	lines := strings.Split(string(m[1]), "\n")
	// comment is the comment of the line setting key at indent, with the
	// comment-only lines that continue it; ok is false when none sets it.
	comment := func(indent, key string) (string, bool) {
		for i, l := range lines {
			if !strings.HasPrefix(l, indent+key+":") {
				continue
			}
			_, c, _ := strings.Cut(l, "#")
			for _, next := range lines[i+1:] {
				if t := strings.TrimSpace(next); !strings.HasPrefix(t, "#") {
					break
				}
				c += " " + strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(next), "#"))
			}
			return strings.Join(strings.Fields(c), " "), true
		}
		return "", false
	}
	var check func(indent string, fields []policy.Field)
	check = func(indent string, fields []policy.Field) {
		for _, f := range fields {
			where, in := "under defaults", indent
			if f.DomainOnly {
				where, in = "on a domain", indent+"  " // a domain's keys, after "  - "
			}
			c, ok := comment(in, f.Name)
			switch {
			case !ok:
				t.Errorf("docs/schema.md: the annotated file does not show %s %s", f.Name, where)
			case f.Default != "" && !strings.Contains(c, "default "+f.Default):
				t.Errorf("docs/schema.md: %s's comment %q does not state the declared default %q", f.Name, c, "default "+f.Default)
			}
			check(indent+"  ", f.Fields)
		}
	}
	check("  ", policy.Fields)
}

// The generator writes every field a file sets into the DomainSpec's
// Policy, under its declared Go name.
func TestDeclarationMatchesGenerator(t *testing.T) {
	f, err := schema.Parse("all.yaml", []byte(`version: 1
package: locks
domains:
  - pattern: "all:{id}"
    ttl: 1m
    renew: 10s
    retry: {attempts: 3, max_wait: 5s}
    fencing: true
    replicas: 1
    replica_timeout: 20ms
    max_hold: 10m
  - pattern: "fifo:{id}"
    ttl: 1m
    retry: {attempts: 3, max_wait: 5s}
    wait: fifo
  - pattern: "partner:{id}"
    ttl: 1m
    kind: semaphore
    permits: 3
`))
	if err != nil {
		t.Fatal(err)
	}
	out, err := gen.Generate(f, gen.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var check func(fields []policy.Field)
	check = func(fields []policy.Field) {
		for _, fd := range fields {
			if !regexp.MustCompile(`(?m)^\t+` + fd.GoName + `: `).Match(out) {
				t.Errorf("the generated DomainSpecs never set %s (%s)", fd.GoName, fd.Name)
			}
			if fd.Name == "retry" {
				continue // a FIFO wait and a backoff write different subsets; the golden cases hold them
			}
			check(fd.Fields)
		}
	}
	check(policy.Fields)
}

// Each field's run-time override names its variable from the domain name
// in the same way.
func TestEnvNames(t *testing.T) {
	f, _ := policy.FieldNamed("max_hold")
	if got := policy.EnvNameFor(f, "user_digest"); got != "LOCKKIT_MAX_HOLD_USER_DIGEST" {
		t.Errorf("EnvNameFor(max_hold) = %q", got)
	}
	f, _ = policy.FieldNamed("ttl")
	if got, want := policy.EnvNameFor(f, "user_digest"), policy.EnvName("user_digest"); got != want {
		t.Errorf("EnvNameFor(ttl) = %q, want %q", got, want)
	}
	if got := policy.EnvPermitsName("partner_api"); got != "LOCKKIT_PERMITS_PARTNER_API" {
		t.Errorf("EnvPermitsName = %q", got)
	}
}

// The fields handled by loop (DurationFields, EnvFields) are durations with
// a Check, as the loops in schema, gen and lockkit assume; a field handled
// whole by its declaration documents itself in generated code; and the
// loops cover max_hold.
func TestDurationFieldsDeclared(t *testing.T) {
	names := map[string]bool{}
	for _, f := range append(policy.DurationFields(), policy.EnvFields()...) {
		names[f.Name] = true
		if f.Type != "time.Duration" || f.Check == nil {
			t.Errorf("%s: type %s, Check set %v; the loops over it need a time.Duration with a Check", f.Name, f.Type, f.Check != nil)
		}
	}
	for _, f := range policy.DurationFields() {
		if f.Phrase == nil {
			t.Errorf("%s has no Phrase for the generated doc comment", f.Name)
		}
		if err := f.Check(0, 0); err != nil && f.NoneMeans != "" {
			t.Errorf("%s: 0 means %s, but Check(0) = %v", f.Name, f.NoneMeans, err)
		}
	}
	for _, name := range []string{"ttl", "max_hold"} {
		if !names[name] {
			t.Errorf("%s is in neither DurationFields nor EnvFields", name)
		}
	}
}

// Each of the DurationFields goes the whole way from its declaration alone:
// lockkit.yaml (on a domain, under defaults, none) → schema.Domain →
// the generated DomainSpec and its doc → lockkit.Policy, and an
// EnvPrefix'd one is overridden at run time by EnvNameFor's variable. A
// field added to the declaration with a Check is carried by every loop, or
// this fails where it is not.
func TestDurationFieldsRoundTrip(t *testing.T) {
	const ttl, v, env = 10 * time.Second, time.Minute, 2 * time.Minute
	for _, f := range policy.DurationFields() {
		t.Run(f.Name, func(t *testing.T) {
			if err := f.Check(v, ttl); err != nil {
				t.Fatalf("Check(%v, ttl %v) = %v; choose values this test can use", v, ttl, err)
			}
			name := "rt_" + f.Name
			yml := fmt.Sprintf("version: 1\npackage: locks\ndefaults: {%[1]s: 1m}\ndomains:\n  - {pattern: \"own:{id}\", name: %[2]s, ttl: 10s, %[1]s: 1m}\n  - {pattern: \"inherited:{id}\", ttl: 10s}\n", f.Name, name)
			if f.NoneMeans != "" {
				yml += fmt.Sprintf("  - {pattern: \"none:{id}\", ttl: 10s, %s: none}\n", f.Name)
			}
			file, err := schema.Parse("rt.yaml", []byte(yml))
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range []time.Duration{v, v, 0}[:len(file.Domains)] {
				d := file.Domains[i]
				if got := time.Duration(reflect.ValueOf(d).Elem().FieldByName(f.GoName).Int()); got != want {
					t.Errorf("schema: domain %s's %s = %v, want %v", d.Name, f.GoName, got, want)
				}
			}
			out, err := gen.Generate(file, gen.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(string(out), "\t"+f.GoName+": time.Minute,\n"); n != 2 {
				t.Errorf("gen: %s: time.Minute is written %d times, want 2 (own, inherited):\n%s", f.GoName, n, out)
			}
			variable := ""
			if f.EnvPrefix != "" {
				variable = policy.EnvNameFor(f, name)
			}
			comments := strings.ReplaceAll(string(out), "\n// ", " ")
			if phrase := f.Phrase("1m", variable); !strings.Contains(comments, phrase) {
				t.Errorf("gen: the doc comments do not say %q:\n%s", phrase, out)
			}
			if f.EnvPrefix == "" {
				return
			}
			spec := lockkit.DomainSpec{Name: name, Policy: lockkit.Policy{TTL: ttl}}
			reflect.ValueOf(&spec.Policy).Elem().FieldByName(f.GoName).SetInt(int64(v))
			lockkit.RegisterDomains(spec)
			t.Setenv(variable, env.String())
			d := lockkittest.NewClient(t).Domain(spec)
			if d.Err() != nil {
				t.Fatal(d.Err())
			}
			p := d.Policy()
			if got := time.Duration(reflect.ValueOf(p).FieldByName(f.GoName).Int()); got != env {
				t.Errorf("lockkit: %s under %s=%v is %v", f.GoName, variable, env, got)
			}
		})
	}
}
