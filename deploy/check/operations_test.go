package check

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// shutdownBound is the processor's longest clean shutdown with the value
// set's timeouts (values.yaml derives terminationGracePeriodSeconds from
// it): the hand-off waits for the sends in flight, each bounded by
// sendTimeout and then drainTimeout of produces tried again, within three
// quarters of the rebalance timeout (60s); the last commit is bounded by
// max(drainTimeout, a quarter of it); then /metrics closes and metrics
// and traces flush, 5s each.
func shutdownBound(t *testing.T, r *rendered) time.Duration {
	t.Helper()
	parse := func(key string) time.Duration {
		d, err := time.ParseDuration(r.valString(key))
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		return d
	}
	send, drain := parse("config.sendTimeout"), parse("config.drainTimeout")
	const rebalance = 60 * time.Second
	return max(send+drain, rebalance*3/4) + max(drain, rebalance/4) + 15*time.Second
}

// checkGoMemLimit: GOMEMLIMIT is 90% of the memory limit, in bytes.
func checkGoMemLimit(t *testing.T, r *rendered, c corev1.Container) {
	t.Helper()
	limit, ok := c.Resources.Limits[corev1.ResourceMemory]
	e := envVar(c, "GOMEMLIMIT")
	switch {
	case !ok && e == nil:
		return
	case !ok:
		t.Errorf("GOMEMLIMIT set without a memory limit")
		return
	case e == nil:
		t.Errorf("memory limit %s but no GOMEMLIMIT", limit.String())
		return
	}
	if want := fmt.Sprint(limit.Value() * 9 / 10); e.Value != want {
		t.Errorf("GOMEMLIMIT %q, want 90%% of %s: %s", e.Value, limit.String(), want)
	}
}

// TestChartGoMemLimit: the limit's forms the helper reads, and one it
// refuses with a message.
func TestChartGoMemLimit(t *testing.T) {
	ch := loadChart(t)
	for _, tt := range []struct{ limit, want string }{
		{"512Mi", "483183820"}, {"1Gi", "966367641"}, {"500M", "450000000"}, {"2000000000", "1800000000"},
	} {
		vals := valueSet{name: tt.limit, inline: minimalValues + "resources:\n  limits:\n    memory: " + tt.limit + "\n"}.values(t)
		manifests, _, err := render(ch, vals)
		if err != nil {
			t.Fatalf("%s: %v", tt.limit, err)
		}
		if !strings.Contains(manifests["tierpush/templates/deployment.yaml"], "name: GOMEMLIMIT\n              value: \""+tt.want+"\"") {
			t.Errorf("memory %s: GOMEMLIMIT is not %s", tt.limit, tt.want)
		}
	}
	vals := valueSet{name: "fraction", inline: minimalValues + "resources:\n  limits:\n    memory: 0.5Gi\n"}.values(t)
	if _, _, err := render(ch, vals); err == nil || !strings.Contains(err.Error(), "resources.limits.memory") {
		t.Errorf("a fractional limit: %v, want a refusal naming resources.limits.memory", err)
	}
}

// checkTopologySpread: by default the pods are spread softly over zones
// and nodes; constraints of one's own replace that.
func checkTopologySpread(t *testing.T, r *rendered) {
	got := r.dep.Spec.Template.Spec.TopologySpreadConstraints
	if len(asMaps(r.val("topologySpreadConstraints"))) > 0 {
		if len(got) != len(asMaps(r.val("topologySpreadConstraints"))) {
			t.Errorf("%d constraints rendered, topologySpreadConstraints has %d", len(got), len(asMaps(r.val("topologySpreadConstraints"))))
		}
		return
	}
	if !r.valBool("defaultTopologySpread") {
		if len(got) != 0 {
			t.Errorf("defaultTopologySpread off, yet %d constraints", len(got))
		}
		return
	}
	var keys []string
	podLabels := labels.Set(r.dep.Spec.Template.Labels)
	for _, c := range got {
		keys = append(keys, c.TopologyKey)
		if c.WhenUnsatisfiable != corev1.ScheduleAnyway {
			t.Errorf("%s spread is %s, want ScheduleAnyway (soft: never a pending replica)", c.TopologyKey, c.WhenUnsatisfiable)
		}
		s, err := metav1.LabelSelectorAsSelector(c.LabelSelector)
		if err != nil || s.Empty() || !s.Matches(podLabels) {
			t.Errorf("%s spread selector %v does not select the processor pods", c.TopologyKey, c.LabelSelector)
		}
	}
	if !slices.Equal(keys, []string{"topology.kubernetes.io/zone", "kubernetes.io/hostname"}) {
		t.Errorf("default spread over %v, want zone then host", keys)
	}
}

// checkNetworkPolicy: egress of the processor pods only to the brokers'
// ports, DNS, and 443 of public addresses, with every private, loopback,
// link-local (metadata) and CGNAT range refused.
func checkNetworkPolicy(t *testing.T, r *rendered) {
	np := r.np
	if np == nil {
		return
	}
	s, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil || s.Empty() || !s.Matches(labels.Set(r.dep.Spec.Template.Labels)) {
		t.Errorf("NetworkPolicy selects %v, not the processor pods", np.Spec.PodSelector)
	}
	if r.job != nil && s.Matches(labels.Set(r.job.Spec.Template.Labels)) {
		t.Error("NetworkPolicy also selects the topics Job")
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}) {
		t.Errorf("policyTypes %v, want Egress only", np.Spec.PolicyTypes)
	}
	var kafkaPorts []int
	for _, b := range toStrings(r.val("kafka.brokers")) {
		var p int
		fmt.Sscanf(b[strings.LastIndex(b, ":")+1:], "%d", &p)
		if !slices.Contains(kafkaPorts, p) {
			kafkaPorts = append(kafkaPorts, p)
		}
	}
	var sawKafka, sawDNS, sawHTTPS bool
	extra := len(asMaps(r.val("networkPolicy.extraEgress")))
	for i, rule := range np.Spec.Egress {
		var ports []int
		for _, p := range rule.Ports {
			if p.Port == nil || p.EndPort != nil {
				t.Errorf("egress rule %d allows a port range or every port: %+v", i, p)
				continue
			}
			ports = append(ports, p.Port.IntValue())
		}
		if len(rule.Ports) == 0 {
			t.Errorf("egress rule %d allows every port", i)
		}
		switch {
		case slices.Equal(ports, kafkaPorts) && len(rule.To) > 0 && rule.To[0].IPBlock == nil:
			sawKafka = true
		case slices.Equal(ports, []int{53, 53}):
			sawDNS = true
		case slices.Equal(ports, []int{443}):
			sawHTTPS = true
			checkPublicOnly(t, rule.To)
		case i >= len(np.Spec.Egress)-extra:
			// networkPolicy.extraEgress, as given
		default:
			t.Errorf("egress rule %d (ports %v) is none of Kafka %v, DNS or 443", i, ports, kafkaPorts)
		}
	}
	if !sawKafka || !sawDNS || !sawHTTPS {
		t.Errorf("egress to Kafka %v, DNS %v, 443 %v: want all three", sawKafka, sawDNS, sawHTTPS)
	}
}

// checkPublicOnly: the 443 rule's address blocks leave out every address a
// push service must never be reached at.
func checkPublicOnly(t *testing.T, peers []networkingv1.NetworkPolicyPeer) {
	t.Helper()
	refused := []string{"10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "100.100.100.200", "127.0.0.1", "0.0.0.1", "fd00:ec2::254", "fe80::1", "::1"}
	allowed := []string{"142.250.74.10", "2a00:1450:4007:80a::200a"}
	reaches := func(addr string) bool {
		a := netip.MustParseAddr(addr)
		for _, p := range peers {
			if p.IPBlock == nil {
				t.Errorf("the 443 rule has a peer that is no ipBlock: %+v", p)
				continue
			}
			cidr := netip.MustParsePrefix(p.IPBlock.CIDR)
			if !cidr.Contains(a) {
				continue
			}
			excepted := false
			for _, e := range p.IPBlock.Except {
				excepted = excepted || netip.MustParsePrefix(e).Contains(a)
			}
			if !excepted {
				return true
			}
		}
		return false
	}
	for _, a := range refused {
		if reaches(a) {
			t.Errorf("443 is allowed to %s, a private or metadata address", a)
		}
	}
	for _, a := range allowed {
		if !reaches(a) {
			t.Errorf("443 is refused to the public address %s", a)
		}
	}
}

// checkRunbook: an alert's runbook_url is the runbooks page with an anchor
// that docs/operations.md has.
func checkRunbook(t *testing.T, r *rendered, alert, url string) {
	t.Helper()
	page, anchor, ok := strings.Cut(url, "#")
	if !ok || page != r.valString("metrics.prometheusRule.runbookURL") {
		t.Errorf("alert %s runbook_url %q, want metrics.prometheusRule.runbookURL with an anchor", alert, url)
		return
	}
	if !slices.Contains(runbookAnchors(t), anchor) {
		t.Errorf("alert %s runbook_url anchor #%s is no heading of docs/operations.md", alert, anchor)
	}
}

var (
	anchorsOnce sync.Once
	anchors     []string
)

// runbookAnchors are the anchors of docs/operations.md's headings, as
// GitHub makes them.
func runbookAnchors(t *testing.T) []string {
	t.Helper()
	anchorsOnce.Do(func() {
		b, err := os.ReadFile(filepath.Join(repoRoot, "docs", "operations.md"))
		if err != nil {
			t.Fatal(err)
		}
		drop := regexp.MustCompile(`[^a-z0-9 _-]`)
		for _, m := range regexp.MustCompile(`(?m)^#+ (.+)$`).FindAllStringSubmatch(string(b), -1) {
			a := drop.ReplaceAllString(strings.ToLower(strings.TrimSpace(m[1])), "")
			anchors = append(anchors, strings.ReplaceAll(a, " ", "-"))
		}
	})
	return anchors
}

// TestChartTopicsJobCustomLadders: with custom ladders and prefix the
// topics Job's config file holds them, and `processor topics ensure` with
// that file creates exactly those retry topics.
func TestChartTopicsJobCustomLadders(t *testing.T) {
	const custom = `kafka:
  topicPrefix: acme.
topics:
  partitions: 2
tiers:
  tier1:
    steps: [1s, 5s, 1m30s]
    maxAttempts: 6
    weight: 6
  tier3:
    steps: [30s]
    maxAttempts: 2
    weight: 1
`
	r := renderAndDecode(t, loadChart(t), valueSet{name: "custom ladders", inline: minimalValues + custom})
	if r.jobCM == nil {
		t.Fatal("no topics Job ConfigMap")
	}
	var cfg struct {
		Prefix string `json:"topic-prefix"`
		Tiers  map[string]struct {
			Steps       []string `json:"steps"`
			MaxAttempts int      `json:"max_attempts"`
		} `json:"tiers"`
	}
	if err := yaml.Unmarshal([]byte(r.jobCM.Data["processor.yaml"]), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Prefix != "acme." || !slices.Equal(cfg.Tiers["tier1"].Steps, []string{"1s", "5s", "1m30s"}) ||
		cfg.Tiers["tier1"].MaxAttempts != 6 || !slices.Equal(cfg.Tiers["tier3"].Steps, []string{"30s"}) {
		t.Fatalf("the Job's config file lacks the custom ladders: %+v\n%s", cfg, r.jobCM.Data["processor.yaml"])
	}

	// The Job's command with that file, against an embedded broker.
	file := filepath.Join(t.TempDir(), "processor.yaml")
	if err := os.WriteFile(file, []byte(r.jobCM.Data["processor.yaml"]), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	broker := exec.CommandContext(ctx, processorBin, "broker", "--embedded-addr", addr, "--data-dir", t.TempDir(), "--log-level", "warn")
	if err := broker.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		broker.Process.Kill()
		broker.Wait()
	}()
	c := r.job.Spec.Template.Spec.Containers[0]
	command, _ := subcommand(c.Args)
	args := append(command, "--config="+file, "--brokers="+addr) // the flag wins over the file's brokers
	var out []byte
	var err error
	for ctx.Err() == nil {
		ensure := exec.CommandContext(ctx, processorBin, args...)
		if out, err = ensure.CombinedOutput(); err == nil {
			break
		}
		select { // the broker may not listen yet
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	if err != nil {
		t.Fatalf("topics ensure: %v\n%s", err, out)
	}
	for _, topic := range []string{"acme.tier1", "acme.tier1.retry-1s", "acme.tier1.retry-5s", "acme.tier1.retry-1m30s",
		"acme.tier2.retry-2s", "acme.tier3.retry-30s", "acme.dlq", "acme.outcomes"} {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(topic) + `\s+2 partitions\s+created$`).Match(out) {
			t.Errorf("topics ensure did not create %s with 2 partitions:\n%s", topic, out)
		}
	}
	if strings.Contains(string(out), "push.") || strings.Contains(string(out), "acme.tier3.retry-8s") {
		t.Errorf("topics ensure made default topics:\n%s", out)
	}
}
