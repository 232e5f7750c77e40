// Package crossver holds the wire-format tests (docs/wire.md): the golden
// test that pins what each backend writes, and the cross-version test that
// runs the release recorded in releases.txt against the current tree on the
// same keys. It has no non-test code.
package crossver
