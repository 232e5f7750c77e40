package schema

import (
	"fmt"
	"sort"
	"strings"
)

// Pos is a position in the schema file: 1-based line and column, as yaml.v3
// counts them (the column counts characters, not bytes).
type Pos struct {
	Line, Col int
}

// Error is one problem found in a schema file, at a position.
type Error struct {
	File string // the file name as given to Parse or Load
	Pos
	Msg string // what is wrong and what would be right
}

// Error formats the problem as "file:line:col: message", the form editors and
// terminals turn into links.
func (e *Error) Error() string {
	if e == nil {
		return "schema: <nil error>"
	}
	return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Col, e.Msg)
}

// Errors is every problem found in one schema file, sorted by position. Parse
// and Load return an Errors (never an empty one) when the file is invalid.
type Errors []*Error

// Error joins the problems, one per line.
func (es Errors) Error() string {
	var b strings.Builder
	for _, e := range es {
		if e == nil {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// errorList collects problems while a file is checked.
type errorList struct {
	file string
	errs Errors
}

func (l *errorList) add(pos Pos, format string, args ...any) {
	if pos.Line < 1 {
		pos.Line = 1
	}
	if pos.Col < 1 {
		pos.Col = 1
	}
	l.errs = append(l.errs, &Error{File: l.file, Pos: pos, Msg: fmt.Sprintf(format, args...)})
}

// result sorts the problems by position, keeping the order in which problems
// at one position were found, and returns nil when there are none.
func (l *errorList) result() error {
	if len(l.errs) == 0 {
		return nil
	}
	sort.SliceStable(l.errs, func(i, j int) bool {
		a, b := l.errs[i].Pos, l.errs[j].Pos
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Col < b.Col
	})
	// The same problem at the same place (one YAML node reached through
	// many aliases) is reported once, with the count.
	var out Errors
	for i := 0; i < len(l.errs); {
		j := i + 1
		for j < len(l.errs) && l.errs[j].Pos == l.errs[i].Pos && l.errs[j].Msg == l.errs[i].Msg {
			j++
		}
		e := l.errs[i]
		if n := j - i; n > 1 {
			e.Msg += fmt.Sprintf(" (found %d times here: once for each use of this YAML node through an alias)", n)
		}
		out = append(out, e)
		i = j
	}
	// A cap on the output: a broken file gets its first problems, not
	// megabytes of them.
	if len(out) > maxErrors {
		rest := len(out) - maxErrors
		last := out[maxErrors-1]
		out = append(out[:maxErrors:maxErrors], &Error{File: l.file, Pos: last.Pos,
			Msg: fmt.Sprintf("and %d more problems not shown; fix these first", rest)})
	}
	l.errs = out
	return l.errs
}

// maxErrors is how many problems one file reports at most.
const maxErrors = 50
