package testenv

import (
	"os"
	"testing"
)

// LongVar is the switch of the long tests: `make test-all` sets it, `make
// test` leaves it unset so that the fast gate stays within ten minutes.
const LongVar = "TIERPUSH_TEST_ALL"

// Long skips t unless LongVar is set: a scenario that takes minutes (a
// rolling restart under load, a 20,000-event flood) or needs tools beyond
// Go (Node, a built Jaeger). Such a test still proves its behaviour; it
// only runs in `make test-all` (CONTRIBUTING.md lists them).
func Long(tb testing.TB, what string) {
	tb.Helper()
	if os.Getenv(LongVar) == "" {
		tb.Skipf("%s: a long test, run by make test-all (%s=1)", what, LongVar)
	}
}
