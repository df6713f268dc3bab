//go:build !race

package pacing_test

const raceOn = false
