package vet_test

import (
	"testing"

	"github.com/lockkit/lockkit/vet"
	"golang.org/x/tools/go/analysis/analysistest"
)

func TestLeak(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), vet.Analyzer, "leak")
}

func TestContext(t *testing.T) {
	analysistest.RunWithSuggestedFixes(t, analysistest.TestData(), vet.Analyzer, "ctxcheck")
}

func TestDiscard(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), vet.Analyzer, "discard")
}

func TestUseAfterRelease(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), vet.Analyzer, "release")
}

func TestFencing(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), vet.Analyzer, "fencing")
}

func TestOddCode(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), vet.Analyzer, "odd")
}

// The runtime implements Release and its tests break the rules on purpose:
// its package is skipped (the stub's misuse.go would be reported otherwise).
func TestRuntimeSkipped(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), vet.Analyzer, "github.com/lockkit/lockkit/lockkit")
}

// The case table: realistic misuse and correct patterns, for precision and
// recall (docs/tools.md).
func TestTable(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), vet.Analyzer, "table")
}

// An election's Lead: its fn's ctx, its error and its term's number (the
// fence), as for a lock's Do.
func TestElection(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), vet.Analyzer, "election")
}
