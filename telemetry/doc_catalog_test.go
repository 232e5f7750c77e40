package telemetry

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// catalogDoc is the page that documents the catalog, and catalogMarker
// precedes its table there.
var catalogDoc = filepath.Join("..", "docs", "telemetry.md")

const catalogMarker = "<!-- telemetry-table -->"

// tableOut, when set, makes TestDocListsCatalog write the table generated
// from Catalog to that file, for pasting under the marker:
//
//	go test ./telemetry -run TestDocListsCatalog -args -telemetry-table=/tmp/table.md
var tableOut = flag.String("telemetry-table", "", "write docs/telemetry.md's table, generated from Catalog, to this file")

// TestDocListsCatalog checks that docs/telemetry.md documents every span,
// event, attribute and metric that Catalog lists: each name in backquotes,
// each metric's unit on its line, each enumerated attribute's values on its
// line. A missing page or marker is a failure: the table must not drift away
// unnoticed.
func TestDocListsCatalog(t *testing.T) {
	if *tableOut != "" {
		if err := os.WriteFile(*tableOut, []byte(catalogMarkdown()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(catalogDoc)
	if err != nil {
		t.Fatalf("the catalog's page: %v", err)
	}
	_, table, ok := strings.Cut(string(b), catalogMarker)
	if !ok {
		t.Fatalf("%s has no %s marker before the catalog's table", catalogDoc, catalogMarker)
	}
	checkDocumentsCatalog(t, catalogDoc+" (after "+catalogMarker+")", table)
}

// The README stays the front page: it links the telemetry page rather than
// carrying a second copy of the catalog that could drift.
func TestREADMELinksCatalogDoc(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "(docs/telemetry.md") {
		t.Error("README.md does not link docs/telemetry.md")
	}
	if strings.Contains(string(b), catalogMarker) || strings.Contains(string(b), "`lockkit.acquire.duration`") {
		t.Error("README.md carries (part of) the catalog's table; it belongs to docs/telemetry.md only")
	}
}

// The generated table documents the whole catalog, so pasting it satisfies
// TestDocListsCatalog.
func TestCatalogMarkdownComplete(t *testing.T) {
	md := catalogMarkdown()
	checkDocumentsCatalog(t, "catalogMarkdown", md)
	if n, want := strings.Count(md, "\n| `"), len(Catalog()); n != want {
		t.Errorf("%d table rows, want one per catalog entry (%d)", n, want)
	}
}

// checkDocumentsCatalog reports every Catalog entry that doc does not list.
func checkDocumentsCatalog(t *testing.T, what, doc string) {
	t.Helper()
	lines := strings.Split(doc, "\n")
	lineOf := func(name string) (string, bool) {
		for _, l := range lines {
			if strings.Contains(l, "`"+name+"`") {
				return l, true
			}
		}
		return "", false
	}
	for _, e := range Catalog() {
		line, ok := lineOf(e.Name)
		if !ok {
			t.Errorf("%s does not list the %s `%s`", what, e.Kind, e.Name)
			continue
		}
		if e.Unit != "" && !strings.Contains(line, "`"+e.Unit+"`") {
			t.Errorf("%s: the line of metric `%s` does not give its unit `%s`: %s", what, e.Name, e.Unit, line)
		}
		for _, v := range e.Values {
			if !strings.Contains(line, "`"+v+"`") {
				t.Errorf("%s: the line of attribute `%s` does not list its value `%s`: %s", what, e.Name, v, line)
			}
		}
	}
}

// catalogMarkdown renders Catalog as docs/telemetry.md's tables: spans, events,
// attributes, metrics.
func catalogMarkdown() string {
	var b strings.Builder
	code := func(s string) string { return "`" + s + "`" }
	cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	section := func(kind Kind, header string, row func(Entry) string) {
		fmt.Fprintf(&b, "%s\n", header)
		fmt.Fprintf(&b, "|%s\n", strings.Repeat("---|", strings.Count(header, "|")-1))
		for _, e := range Catalog() {
			if e.Kind == kind {
				fmt.Fprintf(&b, "%s\n", row(e))
			}
		}
		b.WriteString("\n")
	}
	section(KindSpan, "| Span (name pattern) | What it covers |", func(e Entry) string {
		return fmt.Sprintf("| %s | %s |", code(e.Name), cell(e.Description))
	})
	section(KindEvent, "| Span event | When, and its attributes |", func(e Entry) string {
		return fmt.Sprintf("| %s | %s |", code(e.Name), cell(e.Description))
	})
	section(KindAttribute, "| Attribute | Type | Values | Meaning |", func(e Entry) string {
		vals := make([]string, len(e.Values))
		for i, v := range e.Values {
			vals[i] = code(v)
		}
		values := strings.Join(vals, ", ")
		if values == "" {
			values = "—"
		}
		return fmt.Sprintf("| %s | %s | %s | %s |", code(e.Name), e.Type, values, cell(e.Description))
	})
	section(KindMetric, "| Metric | Instrument | Unit | Meaning |", func(e Entry) string {
		return fmt.Sprintf("| %s | %s | %s | %s |", code(e.Name), e.Type, code(e.Unit), cell(e.Description))
	})
	return strings.TrimSuffix(b.String(), "\n")
}
