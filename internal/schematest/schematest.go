// Package schematest holds the published JSON Schemas (docs/schema) to the
// decoders they describe: every valid example must pass both, every invalid
// one must be refused by both at the same field path. It is for tests only
// and decides nothing about a record itself.
package schematest

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// Decode decodes a record value the way the processor or a consumer does.
// It returns nil, or an error and the dotted JSON path it names ("" for the
// value as a whole).
type Decode func(value []byte) (field string, err error)

type example struct {
	Name  string          `json:"name"`
	Field string          `json:"field"`
	Value json.RawMessage `json:"value"`
}

type examples struct {
	Valid   []example `json:"valid"`
	Invalid []example `json:"invalid"`
}

// Check runs the examples of docs/schema/examples/<name>.json against
// docs/schema/<name>.schema.json and decode. dir is the docs/schema
// directory.
func Check(t *testing.T, dir, name string, decode Decode) {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	sch, err := c.Compile(filepath.Join(dir, name+".schema.json"))
	if err != nil {
		t.Fatalf("compile schema: %v", err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "examples", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var ex examples
	if err := json.Unmarshal(raw, &ex); err != nil {
		t.Fatalf("examples: %v", err)
	}
	if len(ex.Valid) == 0 || len(ex.Invalid) == 0 {
		t.Fatalf("examples/%s.json: want valid and invalid examples", name)
	}
	for _, e := range ex.Valid {
		t.Run("valid/"+e.Name, func(t *testing.T) {
			if field, err := validate(sch, e.Value); err != nil {
				t.Errorf("schema refused it at %q: %v", field, err)
			}
			if field, err := decode(e.Value); err != nil {
				t.Errorf("decoder refused it at %q: %v", field, err)
			}
		})
	}
	for _, e := range ex.Invalid {
		t.Run("invalid/"+e.Name, func(t *testing.T) {
			field, err := validate(sch, e.Value)
			if err == nil {
				t.Errorf("schema took it")
			} else if field != e.Field {
				t.Errorf("schema refused it at %q, want %q: %v", field, e.Field, err)
			}
			field, err = decode(e.Value)
			if err == nil {
				t.Errorf("decoder took it")
			} else if field != e.Field {
				t.Errorf("decoder refused it at %q, want %q: %v", field, e.Field, err)
			}
		})
	}
}

// validate returns nil, or the error and the field path of its first leaf
// cause. A missing property is named by its own path, as the decoders do.
func validate(sch *jsonschema.Schema, value []byte) (string, error) {
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(string(value)))
	if err != nil {
		return "", err
	}
	err = sch.Validate(inst)
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return "", err
	}
	for len(ve.Causes) > 0 {
		ve = ve.Causes[0]
	}
	path := slices.Clone(ve.InstanceLocation)
	if req, ok := ve.ErrorKind.(*kind.Required); ok && len(req.Missing) > 0 {
		path = append(path, req.Missing[0])
	}
	return strings.Join(path, "."), err
}
