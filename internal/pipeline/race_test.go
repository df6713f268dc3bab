//go:build race

package pipeline_test

// raceOn: the race detector slows the pacing scenarios (tens of thousands
// of events on a fake clock) five- to tenfold; make test runs them apart,
// without it (make test-pacing-grid).
const raceOn = true
