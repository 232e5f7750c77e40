package schema

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// A small JSON Schema validator, for the keywords lockkit.schema.json uses;
// it refuses any other keyword, so the schema cannot quietly grow beyond what
// the test checks.
type jsValidator struct {
	root map[string]any
}

var jsAnnotations = map[string]bool{"$schema": true, "$id": true, "title": true, "description": true, "default": true, "examples": true}

func (v *jsValidator) validate(schema map[string]any, x any, path string) []string {
	var errs []string
	fail := func(format string, args ...any) { errs = append(errs, path+": "+fmt.Sprintf(format, args...)) }
	keys := make([]string, 0, len(schema))
	for k := range schema {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		kw := schema[k]
		switch k {
		case "$ref":
			ref := kw.(string)
			name, ok := strings.CutPrefix(ref, "#/definitions/")
			target, found := v.root["definitions"].(map[string]any)[name].(map[string]any)
			if !ok || !found {
				fail("unresolvable $ref %q", ref)
				continue
			}
			errs = append(errs, v.validate(target, x, path)...)
		case "type":
			if !jsHasType(x, kw.(string)) {
				fail("%v is not of type %s", x, kw)
			}
		case "const":
			if !jsEqual(x, kw) {
				fail("%v is not %v", x, kw)
			}
		case "enum":
			found := false
			for _, e := range kw.([]any) {
				found = found || jsEqual(x, e)
			}
			if !found {
				fail("%v is not one of %v", x, kw)
			}
		case "not":
			if len(v.validate(kw.(map[string]any), x, path)) == 0 {
				fail("%v matches a schema it must not", x)
			}
		case "allOf":
			for _, sub := range kw.([]any) {
				errs = append(errs, v.validate(sub.(map[string]any), x, path)...)
			}
		case "anyOf":
			ok := false
			for _, sub := range kw.([]any) {
				ok = ok || len(v.validate(sub.(map[string]any), x, path)) == 0
			}
			if !ok {
				fail("%v matches none of anyOf", x)
			}
		case "pattern":
			if s, ok := x.(string); ok && !regexp.MustCompile(kw.(string)).MatchString(s) {
				fail("%q does not match %s", s, kw)
			}
		case "minLength", "maxLength":
			if s, ok := x.(string); ok {
				n, lim := len([]rune(s)), int(kw.(float64))
				if k == "minLength" && n < lim || k == "maxLength" && n > lim {
					fail("length %d breaks %s %d", n, k, lim)
				}
			}
		case "minimum", "maximum", "exclusiveMinimum":
			if f, ok := jsNumber(x); ok {
				lim := kw.(float64)
				if k == "minimum" && f < lim || k == "maximum" && f > lim || k == "exclusiveMinimum" && f <= lim {
					fail("%v breaks %s %v", f, k, lim)
				}
			}
		case "required":
			if m, ok := x.(map[string]any); ok {
				for _, r := range kw.([]any) {
					if _, present := m[r.(string)]; !present {
						fail("missing required %q", r)
					}
				}
			}
		case "properties", "additionalProperties":
			m, ok := x.(map[string]any)
			if !ok || k == "additionalProperties" {
				continue
			}
			props := kw.(map[string]any)
			names := make([]string, 0, len(m))
			for name := range m {
				names = append(names, name)
			}
			sort.Strings(names)
			for _, name := range names {
				if sub, known := props[name]; known {
					errs = append(errs, v.validate(sub.(map[string]any), m[name], path+"."+name)...)
				} else if schema["additionalProperties"] == false {
					fail("unknown property %q", name)
				}
			}
		case "items":
			if list, ok := x.([]any); ok {
				for i, item := range list {
					errs = append(errs, v.validate(kw.(map[string]any), item, fmt.Sprintf("%s[%d]", path, i))...)
				}
			}
		case "minItems":
			if list, ok := x.([]any); ok && len(list) < int(kw.(float64)) {
				fail("%d items, want at least %v", len(list), kw)
			}
		case "definitions":
		default:
			if !jsAnnotations[k] {
				fail("the test's validator does not know the keyword %q", k)
			}
		}
	}
	return errs
}

func jsNumber(x any) (float64, bool) {
	switch n := x.(type) {
	case int:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

func jsHasType(x any, typ string) bool {
	switch typ {
	case "object":
		_, ok := x.(map[string]any)
		return ok
	case "array":
		_, ok := x.([]any)
		return ok
	case "string":
		_, ok := x.(string)
		return ok
	case "boolean":
		_, ok := x.(bool)
		return ok
	case "number":
		_, ok := jsNumber(x)
		return ok
	case "integer":
		f, ok := jsNumber(x)
		return ok && f == math.Trunc(f)
	case "null":
		return x == nil
	}
	return false
}

func jsEqual(a, b any) bool {
	if fa, ok := jsNumber(a); ok {
		fb, ok := jsNumber(b)
		return ok && fa == fb
	}
	return reflect.DeepEqual(a, b)
}

func loadJSONSchema(t *testing.T) *jsValidator {
	t.Helper()
	var root map[string]any
	if err := json.Unmarshal(JSONSchema(), &root); err != nil {
		t.Fatalf("lockkit.schema.json: %v", err)
	}
	return &jsValidator{root: root}
}

// validateYAML checks a YAML document against the JSON Schema.
func (v *jsValidator) validateYAML(t *testing.T, src []byte) []string {
	t.Helper()
	var doc any
	if err := yaml.Unmarshal(src, &doc); err != nil {
		t.Fatalf("yaml: %v", err)
	}
	// JSON has no non-string keys; the schema speaks of JSON.
	data, err := json.Marshal(doc)
	if err != nil {
		t.Fatalf("json: %v", err)
	}
	var x any
	if err := json.Unmarshal(data, &x); err != nil {
		t.Fatal(err)
	}
	return v.validate(v.root, x, "$")
}

// repoRoot is the module root, one directory up.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod at %s: %v", root, err)
	}
	return root
}

// exampleSchemas lists every lockkit.yaml in the repository that is meant to
// be valid: all of them but the failing cases of the generator's golden tests
// (a folder with a stderr.txt).
func exampleSchemas(t *testing.T) []string {
	t.Helper()
	root := repoRoot(t)
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || d.Name() != "lockkit.yaml" {
			return nil
		}
		if _, err := os.Stat(filepath.Join(filepath.Dir(path), "stderr.txt")); err == nil {
			return nil
		}
		files = append(files, path)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func TestExampleSchemasMatchJSONSchema(t *testing.T) {
	v := loadJSONSchema(t)
	files := exampleSchemas(t)
	// At least the repo's own lockkit.yaml must be there.
	found := false
	for _, f := range files {
		found = found || f == filepath.Join(repoRoot(t), "lockkit.yaml")
	}
	if !found {
		t.Fatalf("the top-level lockkit.yaml is not among the examples %v", files)
	}
	for _, path := range files {
		rel, _ := filepath.Rel(repoRoot(t), path)
		t.Run(rel, func(t *testing.T) {
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range v.validateYAML(t, src) {
				t.Error(e)
			}
			if _, err := Parse(rel, src); err != nil {
				t.Errorf("Parse: %v", err)
			}
		})
	}
}

func TestJSONSchemaRejects(t *testing.T) {
	v := loadJSONSchema(t)
	valid := "version: 1\npackage: locks\ndomains:\n  - pattern: \"table:{id}\"\n    ttl: 10s\n"
	if errs := v.validateYAML(t, []byte(valid)); len(errs) != 0 {
		t.Fatalf("a valid file fails: %v", errs)
	}
	bad := map[string]string{
		"version 2":        strings.Replace(valid, "version: 1", "version: 2", 1),
		"unknown key":      valid + "    tll: 1s\n",
		"no domains":       "version: 1\npackage: locks\ndomains: []\n",
		"bad duration":     strings.Replace(valid, "10s", "10", 1),
		"bad pattern":      strings.Replace(valid, "table:{id}", "table:{id:float}", 1),
		"keyword package":  strings.Replace(valid, "locks", "func", 1),
		"bad retry":        valid + "    retry: {attempts: 0}\n",
		"jitter > 1":       valid + "    retry: {attempts: 2, jitter: 1.5}\n",
		"jitter 0":         valid + "    retry: {attempts: 2, jitter: 0}\n",
		"reserved go_name": valid + "    go_name: New\n",
		"brace prefix":     valid + "prefix: \"a{\"\n",
		"no package":       strings.Replace(valid, "package: locks\n", "", 1),
		"replicas < 0":     valid + "    replicas: -1\n",
		"replicas 1.5":     valid + "    replicas: 1.5\n",
		"replica_timeout":  valid + "    replicas: 1\n    replica_timeout: 50\n",
		"BOM description":  valid + "    description: \"a\ufeffb\"\n",
		"NUL description":  valid + "    description: \"a\\0b\"\n",
		"bidi description": valid + "    description: \"a\u202eb\"\n",
	}
	for name, src := range bad {
		if errs := v.validateYAML(t, []byte(src)); len(errs) == 0 {
			t.Errorf("%s: the JSON Schema accepts\n%s", name, src)
		}
		// Every file the JSON Schema rejects, Parse rejects too.
		if _, err := Parse("f.yaml", []byte(src)); err == nil {
			t.Errorf("%s: Parse accepts what the JSON Schema rejects", name)
		}
	}
}

// JSONSchema hands out a copy: a caller that edits what it got changes
// nothing for the next caller (or the parser).
func TestAccessorsReturnCopies(t *testing.T) {
	js := JSONSchema()
	if !json.Valid(js) {
		t.Fatal("JSONSchema is not JSON")
	}
	js[0] = 'x'
	if again := JSONSchema(); again[0] == 'x' || !json.Valid(again) {
		t.Error("editing JSONSchema's result changed the embedded schema")
	}
}
