//go:build !race

package faultharness

const raceEnabled = false
