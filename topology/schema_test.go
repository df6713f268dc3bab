package topology_test

import (
	"errors"
	"testing"

	"github.com/tierpush/tierpush/internal/schematest"
	"github.com/tierpush/tierpush/topology"
)

// The published ledger schemas and ParseOutcome/ParseGone agree on every
// example, field path included.
func TestSchemas(t *testing.T) {
	field := func(err error) string {
		var e *topology.RecordError
		if errors.As(err, &e) {
			return e.Field
		}
		return ""
	}
	t.Run("outcome", func(t *testing.T) {
		schematest.Check(t, "../docs/schema", "outcome", func(v []byte) (string, error) {
			_, err := topology.ParseOutcome(v)
			return field(err), err
		})
	})
	t.Run("gone", func(t *testing.T) {
		schematest.Check(t, "../docs/schema", "gone", func(v []byte) (string, error) {
			_, err := topology.ParseGone(v)
			return field(err), err
		})
	})
}
