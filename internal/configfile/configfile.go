// Package configfile reads the processor's --config YAML file: keys named
// as the flags (max-in-flight: 2048), the retry ladders under tiers:, and
// sections such as pacing: whose keys name flags under the section's prefix
// (pacing: {cut_rate: 0.05} is --pacing-cut-rate). It turns the file into
// settings — the flag, the value, and the key and position that named it
// for errors — and a validated tiers.Policy. Every error it returns says
// where in the file (line:column) the mistake is.
//
// It knows no flag set and must not read the environment or set a flag:
// the command applies the settings with the precedence of its flags and
// environment variables, and refuses keys that name no flag.
package configfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/tierpush/tierpush/tiers"
)

// Setting is one flag value the file gives.
type Setting struct {
	// Key is where the file says it, as written: "max-in-flight",
	// "pacing.cut_rate", "allow-insecure-endpoint[1]".
	Key string
	// Flag is the name of the flag it sets: a key with '_' read as '-',
	// under a section its name and '-' in front ("pacing-cut-rate"). The
	// key enabled under a section is also offered to the section's own
	// flag (pacing: {enabled: false} is --pacing=false): see Alias.
	Flag string
	// Alias is the flag to set when Flag does not exist: for enabled
	// under a section, the section's flag; otherwise empty.
	Alias string
	// Value is the text the flag is set to, as the file writes it; a list
	// gives one Setting per element, for repeatable flags.
	Value string
	// Pos is where the key is (a list element: where the element is).
	Pos Pos
}

// Pos is a place in the file, from 1:1.
type Pos struct{ Line, Column int }

func (p Pos) String() string {
	if p.Column == 0 {
		return strconv.Itoa(p.Line)
	}
	return strconv.Itoa(p.Line) + ":" + strconv.Itoa(p.Column)
}

// Error is a mistake at a place in the file: "12:5: tiers.tier2.steps[1]:
// 500ms, want at least 1s". Parse joins them; the command prefixes the
// file's name.
type Error struct {
	Pos Pos
	Err error
}

func (e *Error) Error() string { return e.Pos.String() + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// At is an Error at p: the command's own errors about a Setting (an
// unknown key, a value its flag refuses).
func At(p Pos, err error) error { return &Error{Pos: p, Err: err} }

func posOf(n *yaml.Node) Pos { return Pos{Line: n.Line, Column: n.Column} }

func errAt(n *yaml.Node, format string, args ...any) error {
	return &Error{Pos: posOf(n), Err: fmt.Errorf(format, args...)}
}

// File is what a --config file holds.
type File struct {
	// Settings are the flag values, in the file's order.
	Settings []Setting
	// Tiers is tiers.DefaultPolicy with the file's tiers: over it: a tier
	// not named, or a field of it not given, keeps its default.
	Tiers tiers.Policy
}

// Read reads and parses the file at path.
func Read(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Parse(f)
}

// Parse parses a config file. Its error lists every key at fault, each an
// *Error at its place, named as the file writes it and saying what was
// wanted.
func Parse(r io.Reader) (*File, error) {
	f := &File{Tiers: tiers.DefaultPolicy()}
	var doc yaml.Node
	if err := yaml.NewDecoder(r).Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return f, nil // an empty file
		}
		return nil, syntaxError(err)
	}
	root := resolve(&doc)
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = resolve(root.Content[0])
	}
	if isNull(root) {
		return f, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, errAt(root, "want a map of keys (the flags' names) to values, got %s", describe(root))
	}
	var errs []error
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], resolve(root.Content[i+1])
		if k.Value == "tiers" {
			errs = append(errs, f.tiers(v)...)
			continue
		}
		errs = append(errs, f.settings(k, k.Value, flagName(k.Value), v)...)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return f, nil
}

// syntaxError turns the parser's "yaml: line 3: …" into an Error at that
// line (the parser gives no column).
func syntaxError(err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	var line int
	if _, serr := fmt.Sscanf(msg, "line %d:", &line); serr == nil {
		_, rest, _ := strings.Cut(msg, ": ")
		return &Error{Pos: Pos{Line: line}, Err: fmt.Errorf("not YAML: %s", rest)}
	}
	return &Error{Pos: Pos{Line: 1}, Err: fmt.Errorf("not YAML: %s", msg)}
}

// resolve follows an alias (*name) to the node it names.
func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" || n.Kind == 0
}

// flagName is the flag a key names: '_' reads as '-'.
func flagName(key string) string { return strings.ReplaceAll(key, "_", "-") }

// settings adds the flag values of key (at k): a scalar sets the flag, a
// list sets it once per element, and a map is a section whose keys name
// flags under its prefix.
func (f *File) settings(k *yaml.Node, key, flag string, v *yaml.Node) []error {
	switch v.Kind {
	case yaml.MappingNode:
		var errs []error
		for i := 0; i+1 < len(v.Content); i += 2 {
			sk, sv := v.Content[i], resolve(v.Content[i+1])
			before := len(f.Settings)
			errs = append(errs, f.settings(sk, key+"."+sk.Value, flag+"-"+flagName(sk.Value), sv)...)
			if sk.Value == "enabled" {
				for j := before; j < len(f.Settings); j++ {
					f.Settings[j].Alias = flag
				}
			}
		}
		return errs
	case yaml.SequenceNode:
		var errs []error
		for i, e := range v.Content {
			e = resolve(e)
			ekey := fmt.Sprintf("%s[%d]", key, i)
			s, err := scalar(e)
			if err != nil {
				errs = append(errs, errAt(e, "%s: %w", ekey, err))
				continue
			}
			f.Settings = append(f.Settings, Setting{Key: ekey, Flag: flag, Value: s, Pos: posOf(e)})
		}
		return errs
	}
	s, err := scalar(v)
	if err != nil {
		return []error{errAt(k, "%s: %w", key, err)}
	}
	f.Settings = append(f.Settings, Setting{Key: key, Flag: flag, Value: s, Pos: posOf(k)})
	return nil
}

// scalar is the text of a YAML scalar as written; an empty value is "".
func scalar(n *yaml.Node) (string, error) {
	switch {
	case isNull(n):
		return "", nil
	case n.Kind == yaml.ScalarNode:
		return n.Value, nil
	}
	return "", fmt.Errorf("want a single value, got %s", describe(n))
}

// describe names what a YAML value is, for errors.
func describe(n *yaml.Node) string {
	switch {
	case n.Kind == yaml.MappingNode:
		return "a map"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case isNull(n):
		return "nothing"
	case n.ShortTag() == "!!str":
		return strconv.Quote(n.Value)
	default:
		return n.Value
	}
}

// tiers reads the tiers: section over the default policy, and checks each
// ladder it names.
func (f *File) tiers(v *yaml.Node) []error {
	if isNull(v) {
		return nil
	}
	if v.Kind != yaml.MappingNode {
		return []error{errAt(v, "tiers: want a map of tier1, tier2 or tier3 to its ladder, got %s", describe(v))}
	}
	var errs []error
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, lv := v.Content[i], resolve(v.Content[i+1])
		t, err := tiers.Parse(k.Value)
		if err != nil {
			errs = append(errs, errAt(k, "tiers.%s: unknown tier, want tier1, tier2 or tier3", k.Value))
			continue
		}
		key := "tiers." + k.Value
		fields, lerrs := ladder(key, lv, f.Tiers.Ladder(t))
		if len(lerrs) > 0 {
			errs = append(errs, lerrs...)
			continue
		}
		errs = append(errs, placed(f.Tiers.Ladder(t).Validate(key), k, fields)...)
	}
	return errs
}

// ladderFields are the nodes of a ladder's fields, to place its range
// errors.
type ladderFields struct {
	steps       *yaml.Node // the key
	stepValues  []*yaml.Node
	maxAttempts *yaml.Node
	weight      *yaml.Node
}

// placed puts each *tiers.FieldError of err at its field's node, the tier's
// key when the file left the field out.
func placed(err error, tier *yaml.Node, f ladderFields) []error {
	if err == nil {
		return nil
	}
	var out []error
	for _, e := range unjoin(err) {
		n := tier
		var fe *tiers.FieldError
		if errors.As(e, &fe) {
			switch {
			case fe.Field == "steps" && fe.Index >= 0 && fe.Index < len(f.stepValues):
				n = f.stepValues[fe.Index]
			case fe.Field == "steps" && f.steps != nil:
				n = f.steps
			case fe.Field == "max_attempts" && f.maxAttempts != nil:
				n = f.maxAttempts
			case fe.Field == "weight" && f.weight != nil:
				n = f.weight
			}
		}
		out = append(out, &Error{Pos: posOf(n), Err: e})
	}
	return out
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// ladder reads one tier's ladder over l: the fields given replace l's.
func ladder(key string, v *yaml.Node, l *tiers.Ladder) (ladderFields, []error) {
	var fields ladderFields
	if isNull(v) {
		return fields, nil
	}
	if v.Kind != yaml.MappingNode {
		return fields, []error{errAt(v, "%s: want a map with steps, max_attempts and weight, got %s", key, describe(v))}
	}
	var errs []error
	for i := 0; i+1 < len(v.Content); i += 2 {
		fk, fv := v.Content[i], resolve(v.Content[i+1])
		k := key + "." + fk.Value
		switch fk.Value {
		case "steps":
			fields.steps = fk
			steps, nodes, serrs := durations(k, fk, fv)
			if len(serrs) > 0 {
				errs = append(errs, serrs...)
				continue
			}
			l.Steps, fields.stepValues = steps, nodes
		case "max_attempts":
			fields.maxAttempts = fk
			n, err := wholeNumber(k, fk, fv)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			l.MaxAttempts = n
		case "weight":
			fields.weight = fk
			n, err := wholeNumber(k, fk, fv)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			l.Weight = n
		default:
			errs = append(errs, errAt(fk, "%s: unknown key, want steps, max_attempts or weight", k))
		}
	}
	return fields, errs
}

// durations reads a list of Go durations such as [2s, 8s, 1m30s].
func durations(key string, k, v *yaml.Node) ([]time.Duration, []*yaml.Node, []error) {
	if v.Kind != yaml.SequenceNode {
		return nil, nil, []error{errAt(k, "%s: want a list of durations like [2s, 8s, 60s], got %s", key, describe(v))}
	}
	var errs []error
	steps := make([]time.Duration, 0, len(v.Content))
	nodes := make([]*yaml.Node, 0, len(v.Content))
	for i, e := range v.Content {
		e = resolve(e)
		d, err := time.ParseDuration(e.Value)
		if e.Kind != yaml.ScalarNode || err != nil {
			errs = append(errs, errAt(e, "%s[%d]: want a duration like 5s, got %s", key, i, describe(e)))
			continue
		}
		steps = append(steps, d)
		nodes = append(nodes, e)
	}
	return steps, nodes, errs
}

// wholeNumber reads an integer, also when quoted ("3", as templates
// often write values).
func wholeNumber(key string, k, v *yaml.Node) (int, error) {
	if v.Kind == yaml.ScalarNode {
		if n, err := strconv.Atoi(strings.TrimSpace(v.Value)); err == nil {
			return n, nil
		}
	}
	return 0, errAt(k, "%s: want a whole number, got %s", key, describe(v))
}
