package telemetry

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestNewLogger(t *testing.T) {
	tests := []struct {
		format, level string
		wantJSON      bool
		wantDebug     bool
	}{
		{"text", "info", false, false},
		{"json", "debug", true, true},
		{"json", "warn", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.format+"/"+tt.level, func(t *testing.T) {
			var buf bytes.Buffer
			log := NewLogger(&buf, tt.format, tt.level)
			log.Debug("debug line")
			log.Warn("warn line", "sub", "3f9a")
			out := buf.String()
			if got := strings.Contains(out, "debug line"); got != tt.wantDebug {
				t.Errorf("debug line logged = %v, want %v", got, tt.wantDebug)
			}
			first := strings.SplitN(strings.TrimSpace(out), "\n", 2)[0]
			if got := json.Valid([]byte(first)); got != tt.wantJSON {
				t.Errorf("JSON = %v, want %v: %q", got, tt.wantJSON, first)
			}
		})
	}
}

func TestValidation(t *testing.T) {
	if _, err := ParseLevel("loud"); err == nil || !strings.Contains(err.Error(), "--log-level") {
		t.Errorf("ParseLevel(loud) = %v, want an error naming --log-level", err)
	}
	if err := ValidateFormat("xml"); err == nil || !strings.Contains(err.Error(), "--log-format") {
		t.Errorf("ValidateFormat(xml) = %v, want an error naming --log-format", err)
	}
}
