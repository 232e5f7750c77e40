//go:build race

package postgres_test

// raceOn: the race detector makes every lock several times slower.
const raceOn = true
