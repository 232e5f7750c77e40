//go:build !race

package postgres_test

const raceOn = false
