// Package errcheck lets a test binary check every error lockkit hands to
// its caller. A nil wrapped with %w, or any other formatting fault, shows
// in an error's text as "%!" (fmt's "%!w(<nil>)", "%!d(string=…)"), and
// such an error matches none of the documented kinds (docs/semantics.md,
// guarantee 5). internal/testserver, which every test binary that starts a
// real server imports, makes such an error panic, so no test on a real
// server (the fault suites included) can pass while one reaches a caller.
// Outside test binaries nothing is watched, and Returned costs a nil check.
package errcheck

import "strings"

// onFault is set once, by Watch from a package init, before any
// goroutine can call Returned.
var onFault func(error)

// Watch makes f run with every error given to Returned whose text has a
// formatting fault. Call it from an init function.
func Watch(f func(error)) { onFault = f }

// Returned is err, checked first when a test binary watches (Watch): the
// way out of lockkit's public calls for their errors.
func Returned(err error) error {
	if onFault != nil && err != nil && Faulty(err.Error()) {
		onFault(err)
	}
	return err
}

// Faulty reports whether msg, an error's text, shows a formatting fault.
func Faulty(msg string) bool { return strings.Contains(msg, "%!") }
