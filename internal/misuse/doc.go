// Package misuse holds the misuse table of lockkit's public API (issue 31):
// every exported function and method of the public packages called with
// nil, zero, typed-nil and edge values, none of which may panic. Its test
// lists the exported names with go/packages and fails when one is missing
// from the table, so new API is covered as it lands.
package misuse
