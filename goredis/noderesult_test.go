package goredis

import (
	"slices"
	"testing"

	"github.com/lockkit/lockkit/internal/telnames"
	"github.com/lockkit/lockkit/telemetry"
)

// Every Redlock node result is spelled as the catalog lists
// lockkit.node.result's values, and a refused node is "breaker_open", the
// spelling of the outcome breaker_open (one spelling per value, issue 34;
// it was "breaker-open").
func TestNodeResultSpelling(t *testing.T) {
	var values []string
	for _, e := range telemetry.Catalog() {
		if e.Name == string(telnames.AttrNodeResult) {
			values = e.Values
		}
	}
	for r := nodePending; r <= nodeQuarantined; r++ {
		if !slices.Contains(values, r.String()) {
			t.Errorf("node result %q is not among the catalog's %v", r, values)
		}
	}
	if got, want := nodeRefused.String(), telnames.OutcomeBreakerOpen.String(); got != want {
		t.Errorf("a refused node is %q, the outcome %q", got, want)
	}
}
