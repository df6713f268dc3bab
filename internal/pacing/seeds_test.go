package pacing

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestGridSeeds runs the grids of cells (all but membership) on seeds 1 to
// GRID_SEEDS and reports, per cell, on how many seeds it misses a bar:
// the grid judges one seed, this tells a cell that meets its bars on most
// draws from one that meets them by luck. Off unless GRID_SEEDS is set
// (go test -run TestGridSeeds ./internal/pacing with GRID_SEEDS=10).
func TestGridSeeds(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("GRID_SEEDS"))
	if n == 0 {
		t.Skip("GRID_SEEDS not set")
	}
	cells := slices.Concat(bucketGrid(), contendedGrid(), queueingGrid(), strictGrid(), devicesGrid(), changesGrid())
	missed, listed := 0, 0
	for _, c := range cells {
		if !selected(c.name) {
			continue
		}
		var fails []string
		for seed := uint64(1); seed <= uint64(n); seed++ {
			if _, v := c.run(seed); len(v.fails) > 0 {
				fails = append(fails, fmt.Sprintf("seed %d: %s", seed, strings.Join(v.fails, "; ")))
			}
		}
		if len(fails) == 0 {
			continue
		}
		if shortfalls[c.name] != "" {
			listed++
		} else {
			missed++
		}
		t.Logf("%s: %d of %d seeds miss (listed: %v)\n\t%s", c.name, len(fails), n, shortfalls[c.name] != "", strings.Join(fails, "\n\t"))
	}
	t.Logf("cells missing a bar on some seed: %d not listed, %d listed as shortfalls", missed, listed)
}
