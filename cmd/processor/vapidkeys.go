package main

import (
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/tierpush/tierpush/internal/configfile"
	"github.com/tierpush/tierpush/internal/dispatch"
	"github.com/tierpush/tierpush/internal/event"
)

// The fields of one app in the --vapid-keys file.
const (
	keyFieldPublic  = "public_key"
	keyFieldPrivate = "private_key"
	keyFieldSubject = "subject"
)

// loadVAPIDKeys reads the --vapid-keys file: YAML mapping each app name to
// its public_key, private_key and subject. Errors name the flag, the file,
// the place (of the field, or of the app's name for its key pair), the app
// and the field ("--vapid-keys keys.yaml:4:1: shop.private_key: …") and
// never hold a key.
func loadVAPIDKeys(path string) (map[string]dispatch.VAPID, error) {
	data, err := readSecretFile("--vapid-keys", path)
	if err != nil {
		return nil, err
	}
	apps, err := parseVAPIDKeys([]byte(data))
	if err != nil {
		return nil, fmt.Errorf("--vapid-keys %s:%w", path, err)
	}
	if len(apps) == 0 {
		return nil, fmt.Errorf("--vapid-keys: %s names no app", path)
	}
	return apps, nil
}

// parseVAPIDKeys decodes and checks a keys file (dispatch.ValidateApp). Its
// error is a *configfile.Error: the place in the file, then what is wrong.
func parseVAPIDKeys(data []byte) (map[string]dispatch.VAPID, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		// The parser's messages can quote the text (an unknown anchor:
		// "*" starting a key), so only the line is kept.
		var line int
		if _, serr := fmt.Sscanf(err.Error(), "yaml: line %d:", &line); serr == nil {
			return nil, configfile.At(configfile.Pos{Line: line}, errors.New("not valid YAML (quote values that start with a YAML indicator such as * & ! |)"))
		}
		return nil, configfile.At(configfile.Pos{Line: 1}, errors.New("not valid YAML (quote values that start with a YAML indicator such as * & ! |)"))
	}
	apps := make(map[string]dispatch.VAPID)
	if len(doc.Content) == 0 {
		return apps, nil // an empty file
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, at(root, errors.New("want a mapping of app name to public_key, private_key and subject"))
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		name := k.Value
		if keyShaped(name) {
			// A key where a name belongs (indentation?): never echo it.
			return nil, at(k, errors.New("an app name is shaped like a key; check the file's indentation"))
		}
		if !isString(k) {
			return nil, at(k, fmt.Errorf("app name %s: want a string of [A-Za-z0-9._-] (quote it)", keyName(name)))
		}
		if _, dup := apps[name]; dup {
			return nil, at(k, fmt.Errorf("%s: given twice", quoteApp(name)))
		}
		if err := event.CheckApp(name); err != nil {
			return nil, at(k, fmt.Errorf("app name %s: %w", quoteApp(name), err))
		}
		if v.Kind != yaml.MappingNode {
			return nil, at(v, fmt.Errorf("%s: want a mapping with %s, %s and %s", name, keyFieldPublic, keyFieldPrivate, keyFieldSubject))
		}
		var app dispatch.VAPID
		seen := make(map[string]bool, 3)
		for j := 0; j+1 < len(v.Content); j += 2 {
			fk, fv := v.Content[j], v.Content[j+1]
			key := fk.Value
			var dst *string
			switch key {
			case keyFieldPublic:
				dst = &app.PublicKey
			case keyFieldPrivate:
				dst = &app.PrivateKey
			case keyFieldSubject:
				dst = &app.Subject
			default:
				return nil, at(fk, fmt.Errorf("%s: unknown field %s (want %s, %s and %s)", name, keyName(key), keyFieldPublic, keyFieldPrivate, keyFieldSubject))
			}
			if seen[key] {
				return nil, at(fk, fmt.Errorf("%s.%s: given twice", name, key))
			}
			seen[key] = true
			switch {
			case fv.Kind == yaml.ScalarNode && fv.ShortTag() == "!!null":
			case fv.Kind == yaml.ScalarNode && isString(fv):
				*dst = strings.TrimSpace(fv.Value)
			default:
				return nil, at(fv, fmt.Errorf("%s.%s: want a string (quote it)", name, key))
			}
		}
		if err := dispatch.ValidateApp(name, app); err != nil {
			return nil, at(k, err)
		}
		apps[name] = app
	}
	return apps, nil
}

// isString reports whether a scalar is text: a string, or a value under a
// tag of its own (!x), which YAML leaves as written.
func isString(n *yaml.Node) bool {
	tag := n.ShortTag()
	return tag == "!!str" || !strings.HasPrefix(tag, "!!")
}

// at places err at n in the keys file.
func at(n *yaml.Node, err error) error {
	return configfile.At(configfile.Pos{Line: n.Line, Column: n.Column}, err)
}

// keyName shows a YAML key that is not an app name, bounded, and not at
// all when it could be a key.
func keyName(s string) string {
	if keyShaped(s) {
		return "(shaped like a key)"
	}
	return fmt.Sprintf("%q", truncateFlag(s))
}

// quoteApp quotes an app name from the file, bounded.
func quoteApp(s string) string { return fmt.Sprintf("%q", truncateFlag(s)) }

// keyShaped reports whether s reads as a VAPID key: base64url or base64 of
// a 30- to 32-byte private key (dispatch pads shorter scalars) or a 65-byte
// public key. A keys file out of shape can put one where a name belongs.
func keyShaped(s string) bool {
	s = strings.TrimRight(s, "=")
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		b, err = base64.RawStdEncoding.DecodeString(s)
	}
	return err == nil && (len(b) >= 30 && len(b) <= 32 || len(b) == 65)
}

// appNames lists the identities for a log line: names only.
func appNames(apps map[string]dispatch.VAPID) string {
	return strings.Join(slices.Sorted(maps.Keys(apps)), ",")
}
