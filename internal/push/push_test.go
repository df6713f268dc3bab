package push

import "testing"

func TestClassString(t *testing.T) {
	tests := []struct {
		c    Class
		want string
	}{
		{Delivered, "delivered"},
		{Gone, "gone"},
		{Retryable, "retryable"},
		{Rejected, "rejected"},
		{TooLarge, "too_large"},
		{Deferred, "deferred"},
		{Blocked, "blocked"},
		{VAPIDRejected, "vapid_rejected"},
		{0, ""},
		{200, "unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.c.String(); got != tt.want {
				t.Errorf("Class(%d).String() = %q, want %q", tt.c, got, tt.want)
			}
		})
	}
}
