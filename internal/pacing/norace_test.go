//go:build !race

package pacing

const raceOn = false
