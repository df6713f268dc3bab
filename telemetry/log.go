// Package telemetry owns how tierpush is observed: structured logs (slog)
// now; traces and metrics join it. It never records an endpoint URL, a key
// or a payload: subscriptions appear only as a hash.
package telemetry

import (
	"fmt"
	"io"
	"log/slog"
)

// ParseLevel reads debug, info, warn or error; the error names the flag.
func ParseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("--log-level: %q, want debug, info, warn or error", s)
	}
	return l, nil
}

// ValidateFormat checks a --log-format value.
func ValidateFormat(format string) error {
	switch format {
	case "text", "json":
		return nil
	}
	return fmt.Errorf("--log-format: %q, want text or json", format)
}

// NewLogger returns a logger writing format ("text" or "json") at level to
// w. Invalid values fall back to text at info; validate them first.
func NewLogger(w io.Writer, format, level string) *slog.Logger {
	l, _ := ParseLevel(level)
	opts := &slog.HandlerOptions{Level: l}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
