package schema

import (
	"fmt"
	"strings"
	"testing"
)

// bigSchema is n domains whose patterns share their leading and trailing
// literals, so the quick filter lets every pair through to the exact search:
// the worst case of the collision check.
func bigSchema(n int) []byte {
	var b strings.Builder
	b.WriteString("version: 1\npackage: big\ndefaults: {ttl: 1s}\ndomains:\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "  - {pattern: \"{tenant}:op%04d:{id:int64}\", name: d%d}\n", i, i)
	}
	return []byte(b.String())
}

// go test ./schema -run '^$' -bench ParseAllPairs -benchmem
func BenchmarkParseAllPairs1000(b *testing.B) {
	src := bigSchema(1000)
	for b.Loop() {
		if _, err := Parse("lockkit.yaml", src); err != nil {
			b.Fatal(err)
		}
	}
}

func TestBigSchemaIsValid(t *testing.T) {
	f, err := Parse("lockkit.yaml", bigSchema(50))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Domains) != 50 {
		t.Fatalf("%d domains", len(f.Domains))
	}
}
