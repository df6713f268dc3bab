package main

import (
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"gopkg.in/yaml.v2"

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
// its public_key, private_key and subject. Errors name the flag, the app
// and the field ("--vapid-keys: shop.private_key: …") and never hold a
// key.
func loadVAPIDKeys(path string) (map[string]dispatch.VAPID, error) {
	data, err := readSecretFile("--vapid-keys", path)
	if err != nil {
		return nil, err
	}
	apps, err := parseVAPIDKeys([]byte(data))
	if err != nil {
		return nil, fmt.Errorf("--vapid-keys: %w", err)
	}
	if len(apps) == 0 {
		return nil, fmt.Errorf("--vapid-keys: %s names no app", path)
	}
	return apps, nil
}

// parseVAPIDKeys decodes and checks a keys file (dispatch.ValidateApp).
func parseVAPIDKeys(data []byte) (map[string]dispatch.VAPID, error) {
	var doc yaml.MapSlice
	if err := yaml.Unmarshal(data, &doc); err != nil {
		// The parser's messages can quote the text (an unknown anchor:
		// "*" starting a key), so only the line is kept.
		var te *yaml.TypeError
		if errors.As(err, &te) {
			return nil, errors.New("want a mapping of app name to public_key, private_key and subject")
		}
		var line int
		if _, serr := fmt.Sscanf(err.Error(), "yaml: line %d:", &line); serr == nil {
			return nil, fmt.Errorf("not valid YAML at line %d (quote values that start with a YAML indicator such as * & ! |)", line)
		}
		return nil, errors.New("not valid YAML (quote values that start with a YAML indicator such as * & ! |)")
	}
	apps := make(map[string]dispatch.VAPID, len(doc))
	for _, item := range doc {
		name, ok := item.Key.(string)
		if !ok {
			return nil, fmt.Errorf("app name %s: want a string of [A-Za-z0-9._-] (quote it)", keyName(item.Key))
		}
		if keyShaped(name) {
			// A key where a name belongs (indentation?): never echo it.
			return nil, errors.New("an app name is shaped like a key; check the file's indentation")
		}
		if _, dup := apps[name]; dup {
			return nil, fmt.Errorf("%s: given twice", quoteApp(name))
		}
		if err := event.CheckApp(name); err != nil {
			return nil, fmt.Errorf("app name %s: %w", quoteApp(name), err)
		}
		fields, ok := item.Value.(yaml.MapSlice)
		if !ok {
			return nil, fmt.Errorf("%s: want a mapping with %s, %s and %s", name, keyFieldPublic, keyFieldPrivate, keyFieldSubject)
		}
		var v dispatch.VAPID
		seen := make(map[string]bool, 3)
		for _, f := range fields {
			key, _ := f.Key.(string)
			var dst *string
			switch key {
			case keyFieldPublic:
				dst = &v.PublicKey
			case keyFieldPrivate:
				dst = &v.PrivateKey
			case keyFieldSubject:
				dst = &v.Subject
			default:
				return nil, fmt.Errorf("%s: unknown field %s (want %s, %s and %s)", name, keyName(f.Key), keyFieldPublic, keyFieldPrivate, keyFieldSubject)
			}
			if seen[key] {
				return nil, fmt.Errorf("%s.%s: given twice", name, key)
			}
			seen[key] = true
			s, ok := f.Value.(string)
			if !ok && f.Value != nil {
				return nil, fmt.Errorf("%s.%s: want a string (quote it)", name, key)
			}
			*dst = strings.TrimSpace(s)
		}
		if err := dispatch.ValidateApp(name, v); err != nil {
			return nil, err
		}
		apps[name] = v
	}
	return apps, nil
}

// keyName shows a YAML key that is not an app name, bounded, and not at
// all when it could be a key.
func keyName(k any) string {
	s := fmt.Sprint(k)
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
