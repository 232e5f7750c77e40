// Package doccheck holds no code: its tests keep the documentation's links
// working (README.md is the front page, the reference lives in docs/, one
// topic a page) and keep each topic on one page.
package doccheck
