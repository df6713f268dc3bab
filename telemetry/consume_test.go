package telemetry_test

import (
	"context"
	"testing"
	"time"

	"github.com/tierpush/tierpush/internal/consume"
	"github.com/tierpush/tierpush/internal/pipeline"
	"github.com/tierpush/tierpush/telemetry"
)

var (
	_ consume.Hooks        = (*telemetry.Metrics)(nil)
	_ pipeline.MemberHooks = (*telemetry.Metrics)(nil)
)

// The consumer's and the group's observations reach /metrics by name.
func TestConsumeMetrics(t *testing.T) {
	m, err := telemetry.NewMetrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	m.Skipped("outcome", 3)
	m.CommitFailed("UNKNOWN_MEMBER_ID", 2)
	m.Resumed(2500 * time.Millisecond)
	m.MemberRemoved("classic")
	m.MemberRemoved("classic")
	ms := scrape(t, m)
	for _, c := range []struct {
		name  string
		match []string
		want  float64
	}{
		{"tierpush_skipped_done_total", []string{`reason="outcome"`}, 3},
		{"tierpush_commit_failures_total", []string{`reason="UNKNOWN_MEMBER_ID"`}, 2},
		{"tierpush_partition_resume_seconds_count", nil, 1},
		{"tierpush_group_members_removed_total", []string{`protocol="classic"`}, 2},
	} {
		if got := sum(ms, c.name, c.match...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.match, got, c.want)
		}
	}
}
