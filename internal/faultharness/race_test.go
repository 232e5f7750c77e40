//go:build race

package faultharness

const raceEnabled = true
