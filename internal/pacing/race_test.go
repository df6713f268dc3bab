//go:build race

package pacing

// raceOn: the race detector slows the grid tenfold; make test runs it apart,
// without the detector.
const raceOn = true
