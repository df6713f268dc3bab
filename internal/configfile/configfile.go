// Package configfile reads the processor's --config YAML file: keys named
// as the flags (max-in-flight: 2048), the retry ladders under tiers:, and
// sections such as pacing: whose keys name flags under the section's prefix
// (pacing: {cut_rate: 0.05} is --pacing-cut-rate). It turns the file into
// settings — the flag, the value, and the key that named it for errors —
// and a validated tiers.Policy.
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

	"gopkg.in/yaml.v2"

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
	// Value is the text the flag is set to; a list gives one Setting
	// per element, for repeatable flags.
	Value string
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

// Parse parses a config file. Its error lists every key at fault, each
// named as the file writes it and saying what was wanted.
func Parse(r io.Reader) (*File, error) {
	var doc yaml.MapSlice
	if err := yaml.NewDecoder(r).Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("not YAML: %w", err)
	}
	f := &File{Tiers: tiers.DefaultPolicy()}
	var errs []error
	for _, item := range doc {
		key := fmt.Sprint(item.Key)
		if key == "tiers" {
			errs = append(errs, f.tiers(item.Value)...)
			continue
		}
		errs = append(errs, f.settings(key, flagName(key), item.Value)...)
	}
	if len(errs) == 0 {
		if err := f.Tiers.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return f, nil
}

// flagName is the flag a key names: '_' reads as '-'.
func flagName(key string) string { return strings.ReplaceAll(key, "_", "-") }

// settings adds the flag values of key: a scalar sets the flag, a list
// sets it once per element, and a map is a section whose keys name flags
// under its prefix.
func (f *File) settings(key, flag string, v any) []error {
	switch v := v.(type) {
	case yaml.MapSlice:
		var errs []error
		for _, item := range v {
			sub := fmt.Sprint(item.Key)
			before := len(f.Settings)
			errs = append(errs, f.settings(key+"."+sub, flag+"-"+flagName(sub), item.Value)...)
			if sub == "enabled" {
				for i := before; i < len(f.Settings); i++ {
					f.Settings[i].Alias = flag
				}
			}
		}
		return errs
	case []any:
		var errs []error
		for i, e := range v {
			s, err := scalar(e)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s[%d]: %w", key, i, err))
				continue
			}
			f.Settings = append(f.Settings, Setting{Key: fmt.Sprintf("%s[%d]", key, i), Flag: flag, Value: s})
		}
		return errs
	}
	s, err := scalar(v)
	if err != nil {
		return []error{fmt.Errorf("%s: %w", key, err)}
	}
	f.Settings = append(f.Settings, Setting{Key: key, Flag: flag, Value: s})
	return nil
}

// scalar is the text of a YAML scalar; an empty value is "".
func scalar(v any) (string, error) {
	switch v := v.(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	case bool:
		return strconv.FormatBool(v), nil
	case int:
		return strconv.Itoa(v), nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	case uint64:
		return strconv.FormatUint(v, 10), nil
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64), nil
	}
	return "", fmt.Errorf("want a single value, got %s", describe(v))
}

// describe names what a YAML value is, for errors.
func describe(v any) string {
	switch v := v.(type) {
	case yaml.MapSlice:
		return "a map"
	case []any:
		return "a list"
	case string:
		return strconv.Quote(v)
	default:
		return fmt.Sprint(v)
	}
}

// tiers reads the tiers: section over the default policy.
func (f *File) tiers(v any) []error {
	if v == nil {
		return nil
	}
	m, ok := v.(yaml.MapSlice)
	if !ok {
		return []error{fmt.Errorf("tiers: want a map of tier1, tier2 or tier3 to its ladder, got %s", describe(v))}
	}
	var errs []error
	for _, item := range m {
		name := fmt.Sprint(item.Key)
		t, err := tiers.Parse(name)
		if err != nil {
			errs = append(errs, fmt.Errorf("tiers.%s: unknown tier, want tier1, tier2 or tier3", name))
			continue
		}
		errs = append(errs, ladder("tiers."+name, item.Value, f.Tiers.Ladder(t))...)
	}
	return errs
}

// ladder reads one tier's ladder over l: the fields given replace l's.
func ladder(key string, v any, l *tiers.Ladder) []error {
	if v == nil {
		return nil
	}
	m, ok := v.(yaml.MapSlice)
	if !ok {
		return []error{fmt.Errorf("%s: want a map with steps, max_attempts and weight, got %s", key, describe(v))}
	}
	var errs []error
	for _, item := range m {
		field := fmt.Sprint(item.Key)
		k := key + "." + field
		switch field {
		case "steps":
			steps, err := durations(k, item.Value)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			l.Steps = steps
		case "max_attempts":
			n, err := wholeNumber(k, item.Value)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			l.MaxAttempts = n
		case "weight":
			n, err := wholeNumber(k, item.Value)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			l.Weight = n
		default:
			errs = append(errs, fmt.Errorf("%s: unknown key, want steps, max_attempts or weight", k))
		}
	}
	return errs
}

// durations reads a list of Go durations such as [2s, 8s, 1m30s].
func durations(key string, v any) ([]time.Duration, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%s: want a list of durations like [2s, 8s, 60s], got %s", key, describe(v))
	}
	var errs []error
	steps := make([]time.Duration, 0, len(list))
	for i, e := range list {
		s, ok := e.(string)
		d, err := time.ParseDuration(s)
		if !ok || err != nil {
			errs = append(errs, fmt.Errorf("%s[%d]: want a duration like 5s, got %s", key, i, describe(e)))
			continue
		}
		steps = append(steps, d)
	}
	return steps, errors.Join(errs...)
}

// wholeNumber reads an integer, also when quoted ("3", as templates
// often write values).
func wholeNumber(key string, v any) (int, error) {
	switch v := v.(type) {
	case int:
		return v, nil
	case string:
		if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
			return n, nil
		}
	}
	return 0, fmt.Errorf("%s: want a whole number, got %s", key, describe(v))
}
