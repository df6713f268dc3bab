package event_test

import (
	"errors"
	"testing"
	"time"

	"github.com/tierpush/tierpush/internal/event"
	"github.com/tierpush/tierpush/internal/netguard"
	"github.com/tierpush/tierpush/internal/schematest"
)

// The published event schema and Decode agree on every example: what the
// schema takes decodes, what it refuses Decode refuses at the same field.
func TestSchema(t *testing.T) {
	rules := event.DefaultRules()
	guard, err := netguard.New()
	if err != nil {
		t.Fatal(err)
	}
	rules.Guard = guard
	schematest.Check(t, "../../docs/schema", "event", func(v []byte) (string, error) {
		_, err := event.Decode(v, time.Now(), rules)
		var e *event.Error
		if errors.As(err, &e) {
			return e.Field, err
		}
		return "", err
	})
}
