package gen

import (
	"bytes"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/lockkit/lockkit/schema"
)

// FuzzGenerate: no schema that the parser accepts makes the generator fail.
// The whole path runs, schema → Generate → go/format: an accepted schema
// yields a file that is Go (it parses, carries the generated-code header), is
// already gofmt'd, and is the same bytes on a second run.
//
//	go test ./gen -run '^$' -fuzz FuzzGenerate -fuzztime 60s -parallel 1
func FuzzGenerate(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "golden", "*", "lockkit.yaml"))
	seeds = append(seeds, filepath.Join("..", "lockkit.yaml"), filepath.Join("internal", "e2etest", "lockkit.yaml"))
	for _, path := range seeds {
		src, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(src)
	}
	if len(seeds) < 20 {
		f.Fatalf("only %d seed schemas", len(seeds))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkGenerates(t, data)
	})
}

// FuzzGenerateText aims at the free text the generator copies into the
// generated file, which byte mutations of whole files rarely reach inside an
// accepted schema: a domain's description, name, pattern and the key prefix,
// each any string (written as a YAML double-quoted scalar, so every
// character is possible).
//
//	go test ./gen -run '^$' -fuzz FuzzGenerateText -fuzztime 60s -parallel 1
func FuzzGenerateText(f *testing.F) {
	f.Add("A table being booked.\nPass lease.Fence() to the write.", "table:{id}", "table", "lock:")
	f.Add("x\ufeffy", "user:{id:int64}:digest", "user_digest", "app/")
	f.Add("\tpreformatted\n\n# Heading\n- item", "cron:{job}:{hour:int64}", "", "")
	f.Add("emoji 👩\u200d💻 and */ and // and \"quotes\"", "ünïcode:{név}", "ünïcode", "\u00e9:")
	f.Fuzz(func(t *testing.T, description, pattern, name, prefix string) {
		var b strings.Builder
		b.WriteString("version: 1\npackage: p\n")
		if prefix != "" {
			b.WriteString("prefix: " + strconv.QuoteToASCII(prefix) + "\n")
		}
		b.WriteString("domains:\n  - pattern: " + strconv.QuoteToASCII(pattern) + "\n    ttl: 1s\n")
		if name != "" {
			b.WriteString("    name: " + strconv.QuoteToASCII(name) + "\n")
		}
		b.WriteString("    description: " + strconv.QuoteToASCII(description) + "\n")
		checkGenerates(t, []byte(b.String()))
	})
}

// checkGenerates: when the parser accepts data, Generate succeeds and its
// output is Go, gofmt-stable and deterministic.
func checkGenerates(t *testing.T, data []byte) {
	t.Helper()
	file, err := schema.Parse("lockkit.yaml", data)
	if err != nil {
		return // the parser's own fuzz test checks its errors
	}
	out, err := Generate(file, Options{})
	if err != nil {
		t.Fatalf("the parser accepted the schema, the generator failed: %v", err)
	}
	pf, err := parser.ParseFile(token.NewFileSet(), "locks_gen.go", out, parser.ParseComments)
	if err != nil {
		t.Fatalf("generated code does not parse: %v", err)
	}
	if !ast.IsGenerated(pf) || pf.Name.Name != file.Package {
		t.Fatalf("no generated-code header, or package %q, want %q", pf.Name.Name, file.Package)
	}
	if again, err := format.Source(out); err != nil || !bytes.Equal(again, out) {
		t.Fatalf("generated code is not gofmt-stable (err %v)", err)
	}
	if again, err := Generate(file, Options{}); err != nil || !bytes.Equal(again, out) {
		t.Fatalf("a second Generate differs (err %v)", err)
	}
}
