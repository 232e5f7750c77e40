package vet

import (
	"go/token"
	"strings"

	"golang.org/x/tools/go/analysis"
)

// ignoreDirective silences one report: a comment
//
//	//lockkit-vet:ignore why this is deliberate
//
// on the line of the report or on the line above it. The reason is
// required; a directive without one silences nothing.
const ignoreDirective = "//lockkit-vet:ignore"

// withIgnores returns a copy of pass whose Report drops the diagnostics
// that an ignore directive covers.
func withIgnores(pass *analysis.Pass) *analysis.Pass {
	type fileLine struct {
		file string
		line int
	}
	ignored := map[fileLine]bool{}
	for _, f := range pass.Files {
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				reason, ok := strings.CutPrefix(c.Text, ignoreDirective)
				if !ok || strings.TrimSpace(reason) == "" || !strings.HasPrefix(reason, " ") {
					continue
				}
				p := pass.Fset.Position(c.Pos())
				ignored[fileLine{p.Filename, p.Line}] = true
				ignored[fileLine{p.Filename, p.Line + 1}] = true
			}
		}
	}
	if len(ignored) == 0 {
		return pass
	}
	report := pass.Report
	p := *pass
	p.Report = func(d analysis.Diagnostic) {
		pos := pass.Fset.Position(d.Pos)
		if d.Pos != token.NoPos && ignored[fileLine{pos.Filename, pos.Line}] {
			return
		}
		report(d)
	}
	return &p
}
