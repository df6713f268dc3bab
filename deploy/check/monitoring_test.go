package check

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/template"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
)

// The alerts the issue asks for, and the one added for pacing.
var wantAlerts = []string{
	"TierpushDeadLetterRateHigh", "TierpushDueLagGrowing", "TierpushBreakerOpenTooLong", "TierpushRetryLatenessHigh",
	"TierpushProduceFailing", "TierpushPartitionStuck", "TierpushLedgerStalled", "Tierpush429ShareHigh",
	"TierpushVAPIDKeyRejected", "TierpushProcessorsAbsent", "TierpushBadSignature",
}

// The dashboard's panels the issue asks for, by title.
var wantPanels = []string{
	"Deliveries by outcome", "429 share per origin", "Send rate per origin", "Held per step", "Due lag",
	"Retry lateness p50 / p99", "DLQ by reason",
}

// notYetExported may be absent from a live /metrics: a counter has no
// series before its first count, and a quiet --dev run may change no
// origin's pacing (tierpush_pacing_events_total{origin,kind,peer}).
var notYetExported = []string{"tierpush_pacing_events_total"}

// metricNames parses a PromQL expression and returns the metric names it
// selects; every selector must carry the given matchers.
func metricNames(t *testing.T, where, expr string, must ...*labels.Matcher) []string {
	t.Helper()
	e, err := parser.ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: %v\n%s", where, err, expr)
		return nil
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		if vs.Name == "" {
			t.Errorf("%s: a selector without a metric name: %s", where, vs)
		}
		names = append(names, vs.Name)
		for _, m := range must {
			if !slices.ContainsFunc(vs.LabelMatchers, func(l *labels.Matcher) bool { return l.String() == m.String() }) {
				t.Errorf("%s: selector %s lacks %s: it would count another release's series", where, vs, m)
			}
		}
		return nil
	})
	return names
}

// checkExported fails for every name a live processor does not export.
func checkExported(t *testing.T, where string, names []string) {
	t.Helper()
	for _, n := range unexported(liveMetrics(t), names) {
		t.Errorf("%s names %s, which the processor does not export", where, n)
	}
}

// unexported are the names live lacks, but for notYetExported.
func unexported(live map[string]bool, names []string) []string {
	var out []string
	for _, n := range names {
		if !live[n] && !slices.Contains(notYetExported, n) && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// releaseMatchers are the default metrics.selector's matchers.
func releaseMatchers(r *rendered) []*labels.Matcher {
	if r.valString("metrics.selector") != "" {
		return nil
	}
	return []*labels.Matcher{
		labels.MustNewMatcher(labels.MatchEqual, "namespace", namespace),
		labels.MustNewMatcher(labels.MatchEqual, "service", r.dep.Name),
	}
}

// checkPrometheusRule: the alerts asked for, each a valid expression on
// metrics the processor exports, of this release only, with a severity, a
// valid duration and annotations that are valid Prometheus templates.
func checkPrometheusRule(t *testing.T, r *rendered) {
	if r.rule == nil {
		return
	}
	var got []string
	for _, g := range r.rule.Spec.Groups {
		for _, rule := range g.Rules {
			if rule.Alert == "" {
				t.Errorf("group %s: a recording rule %s; the chart ships alerts only", g.Name, rule.Record)
				continue
			}
			if slices.Contains(got, rule.Alert) {
				t.Errorf("alert %s twice", rule.Alert)
			}
			got = append(got, rule.Alert)
			checkExported(t, "alert "+rule.Alert, metricNames(t, "alert "+rule.Alert, rule.Expr.String(), releaseMatchers(r)...))
			if rule.For == nil {
				t.Errorf("alert %s fires on the first evaluation (no for)", rule.Alert)
			} else if _, err := model.ParseDuration(string(*rule.For)); err != nil {
				t.Errorf("alert %s for %q: %v", rule.Alert, *rule.For, err)
			}
			if s := rule.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("alert %s severity %q", rule.Alert, s)
			}
			checkRunbook(t, r, rule.Alert, rule.Annotations["runbook_url"])
			for k, v := range asStringMap(r.val("metrics.prometheusRule.alertLabels")) {
				if rule.Labels[k] != v {
					t.Errorf("alert %s lacks alertLabels %s=%s", rule.Alert, k, v)
				}
			}
			for _, k := range []string{"summary", "description"} {
				text := rule.Annotations[k]
				if strings.TrimSpace(text) == "" {
					t.Errorf("alert %s has no %s", rule.Alert, k)
				}
				// As Prometheus expands them (rules/alerting.go).
				_, err := template.New(k).Funcs(template.FuncMap{
					"humanize": fmt.Sprint, "humanizePercentage": fmt.Sprint, "humanizeDuration": fmt.Sprint,
				}).Parse("{{$labels := .Labels}}{{$value := .Value}}" + text)
				if err != nil {
					t.Errorf("alert %s %s is no valid template: %v", rule.Alert, k, err)
				}
			}
		}
	}
	for _, a := range wantAlerts {
		if !slices.Contains(got, a) {
			t.Errorf("no alert %s (have %v)", a, got)
		}
	}
}

// grafanaMacros stand in for Grafana's variables so that PromQL can parse
// the dashboard's queries.
var grafanaMacros = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h",
	"$namespace", ".*", "$service", ".*")

// checkDashboard: the dashboard ConfigMap holds the chart's dashboard
// JSON, with the panels asked for, and every query parses, selects by the
// namespace and service variables, and names only metrics the processor
// exports.
func checkDashboard(t *testing.T, r *rendered) {
	if r.dash == nil {
		return
	}
	if r.dash.Labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap labels %v, want grafana_dashboard: \"1\"", r.dash.Labels)
	}
	file, err := os.ReadFile(filepath.Join(chartDir, "dashboards", "tierpush.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.dash.Data) != 1 || r.dash.Data["tierpush.json"] != strings.TrimSpace(string(file)) {
		t.Errorf("dashboard ConfigMap keys %v: want tierpush.json with dashboards/tierpush.json", slices.Collect(maps.Keys(r.dash.Data)))
	}
	var dash struct {
		UID        string `json:"uid"`
		Title      string `json:"title"`
		Templating struct {
			List []struct {
				Name string `json:"name"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(r.dash.Data["tierpush.json"]), &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	if dash.UID == "" || dash.Title == "" {
		t.Error("dashboard without uid or title")
	}
	var vars []string
	for _, v := range dash.Templating.List {
		vars = append(vars, v.Name)
	}
	for _, v := range []string{"datasource", "namespace", "service"} {
		if !slices.Contains(vars, v) {
			t.Errorf("dashboard has no $%s variable (%v)", v, vars)
		}
	}
	var titles, names []string
	must := []*labels.Matcher{
		labels.MustNewMatcher(labels.MatchRegexp, "namespace", ".*"),
		labels.MustNewMatcher(labels.MatchRegexp, "service", ".*"),
	}
	for _, p := range dash.Panels {
		titles = append(titles, p.Title)
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			names = append(names, metricNames(t, "panel "+p.Title, grafanaMacros.Replace(tg.Expr), must...)...)
		}
	}
	for _, want := range wantPanels {
		if !slices.Contains(titles, want) {
			t.Errorf("dashboard has no panel %q", want)
		}
	}
	checkExported(t, "the dashboard", names)
}

// checkPrometheusTrigger: KEDA's prometheus trigger asks Prometheus for
// the due lag of this release, a metric the processor exports.
func checkPrometheusTrigger(t *testing.T, r *rendered, md map[string]string) {
	t.Helper()
	if md["serverAddress"] != r.valString("keda.prometheus.serverAddress") {
		t.Errorf("prometheus trigger serverAddress %q, values say %q", md["serverAddress"], r.valString("keda.prometheus.serverAddress"))
	}
	if n, err := strconv.Atoi(md["threshold"]); err != nil || n != r.valInt("keda.lagThreshold") {
		t.Errorf("prometheus trigger threshold %q, want keda.lagThreshold %d", md["threshold"], r.valInt("keda.lagThreshold"))
	}
	if r.valString("keda.prometheus.query") != "" {
		return
	}
	must := append(releaseMatchers(r), labels.MustNewMatcher(labels.MatchEqual, "due", "true"))
	names := metricNames(t, "prometheus trigger", md["query"], must...)
	if !slices.Equal(names, []string{"tierpush_consumer_lag"}) {
		t.Errorf("prometheus trigger query %q, want the due lag", md["query"])
	}
	checkExported(t, "the prometheus trigger", names)
}

func asStringMap(v any) map[string]string {
	out := map[string]string{}
	if m, ok := v.(map[string]any); ok {
		for k, x := range m {
			out[k] = fmt.Sprint(x)
		}
	}
	return out
}

// TestChartMonitoring: the alerts, the dashboard and the KEDA prometheus
// trigger render, decode strictly and hold up against a live processor's
// /metrics, with the defaults and with a selector of one's own.
func TestChartMonitoring(t *testing.T) {
	ch := loadChart(t)
	own := strings.Replace(monitoringValues, "metrics:\n", "metrics:\n  selector: 'job=\"tierpush\"'\n", 1)
	for name, values := range map[string]string{"release selector": monitoringValues, "own selector": own} {
		inline := values != monitoringValues
		t.Run(name, func(t *testing.T) {
			vs := valueSet{name: name, inline: minimalValues + values}
			r := renderAndDecode(t, ch, vs)
			if r.rule == nil || r.dash == nil || r.so == nil {
				t.Fatalf("rule %v, dashboard %v, ScaledObject %v: want all three", r.rule != nil, r.dash != nil, r.so != nil)
			}
			checkFeatures(t, r)
			checkLabels(t, r)
			checkPrometheusRule(t, r)
			checkDashboard(t, r)
			checkAutoscaling(t, r)
			if inline {
				for _, g := range r.rule.Spec.Groups {
					for _, rule := range g.Rules {
						if !strings.Contains(rule.Expr.String(), `job="tierpush"`) {
							t.Errorf("alert %s ignores metrics.selector: %s", rule.Alert, rule.Expr.String())
						}
					}
				}
				if !strings.Contains(r.so.Spec.Triggers[0].Metadata["query"], `job="tierpush"`) {
					t.Errorf("KEDA query ignores metrics.selector: %s", r.so.Spec.Triggers[0].Metadata["query"])
				}
			}
		})
	}
}

// monitoringValues switch on every monitoring object.
const monitoringValues = `
metrics:
  serviceMonitor: {enabled: true}
  prometheusRule: {enabled: true, labels: {release: prom}, alertLabels: {team: notifications}}
  grafanaDashboard: {enabled: true, annotations: {grafana_folder: Notifications}}
keda:
  enabled: true
  trigger: prometheus
  prometheus: {serverAddress: "http://prometheus-operated.monitoring:9090"}
`

// The check against /metrics must catch a name the processor does not
// export, and pass the ones it does.
func TestExportedCheckCatchesUnknownNames(t *testing.T) {
	live := liveMetrics(t)
	names := metricNames(t, "probe", `sum(rate(tierpush_no_such_metric_total[5m])) / sum(tierpush_in_flight) + sum(tierpush_pacing_rate)`)
	if got := unexported(live, names); !slices.Equal(got, []string{"tierpush_no_such_metric_total"}) {
		t.Errorf("unexported(%v) = %v, want only tierpush_no_such_metric_total", names, got)
	}
	for _, n := range []string{"tierpush_sends_total", "tierpush_consumer_lag", "tierpush_retry_lateness_seconds_bucket", "tierpush_build_info", "tierpush_kafka_produce_records_total"} {
		if !live[n] {
			t.Errorf("live /metrics lacks %s", n)
		}
	}
}

var (
	liveOnce  sync.Once
	liveNames map[string]bool
	liveErr   error
)

// liveMetrics returns the metric names a real processor exports: it runs
// `processor --dev` (embedded broker, push simulators and a sample workload
// with failures, so retries, dead letters and pacing all happen) on free
// ports and scrapes /metrics until every name the chart's alerts,
// dashboard and KEDA query use is there (except notYetExported), or two
// minutes pass.
func liveMetrics(t *testing.T) map[string]bool {
	t.Helper()
	liveOnce.Do(func() { liveNames, liveErr = scrapeDev(t) })
	if liveErr != nil {
		t.Fatalf("live /metrics: %v", liveErr)
	}
	return liveNames
}

func scrapeDev(t *testing.T) (map[string]bool, error) {
	want, err := chartMetricNames()
	if err != nil {
		return nil, err
	}
	brokerAddr, httpAddr := freeAddr(), freeAddr()
	dir, err := os.MkdirTemp("", "tierpush-live")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	cmd := exec.Command(processorBin, "--dev", "--embedded-addr", brokerAddr, "--http-addr", httpAddr, "--data-dir", filepath.Join(dir, "data"))
	cmd.Env = []string{"HOME=" + dir}
	cmd.Dir = dir
	logs, err := os.Create(filepath.Join(dir, "processor.log"))
	if err != nil {
		return nil, err
	}
	defer logs.Close()
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGINT)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var got map[string]bool
	for {
		if got, err = scrape(ctx, "http://"+httpAddr+"/metrics"); err == nil {
			missing := 0
			for n := range want {
				if !got[n] && !slices.Contains(notYetExported, n) {
					missing++
				}
			}
			if missing == 0 {
				return got, nil
			}
		}
		select {
		case <-ctx.Done():
			t.Logf("live /metrics after 2 minutes (scrape error %v); the chart's names missing are reported by each check", err)
			if got == nil {
				out, _ := os.ReadFile(logs.Name())
				return nil, fmt.Errorf("no /metrics from processor --dev: %v\n%s", err, out)
			}
			return got, nil
		case <-time.After(2 * time.Second):
		}
	}
}

// chartMetricNames are the names the chart's alerts, dashboard and KEDA
// query use, from a render with all of them on.
func chartMetricNames() (map[string]bool, error) {
	ch, err := loader.Load(chartDir)
	if err != nil {
		return nil, err
	}
	vals, err := common.ReadValues([]byte(minimalValues + monitoringValues))
	if err != nil {
		return nil, err
	}
	manifests, _, err := render(ch, vals)
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, m := range manifests {
		for _, tok := range strings.FieldsFunc(m, func(r rune) bool {
			return !(r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9')
		}) {
			if strings.HasPrefix(tok, "tierpush_") {
				names[tok] = true
			}
		}
	}
	return names, nil
}

// scrape returns the metric names of a Prometheus text exposition.
func scrape(ctx context.Context, url string) (map[string]bool, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	names := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	return names, sc.Err()
}

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestReadmeProductionInstall renders the production values of
// docs/operations.md as they are written there, with every check of a
// rendered release: TLS and SASL in both pods, the alerts, the dashboard
// and the KEDA query.
func TestReadmeProductionInstall(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "#### Production install")
	if !ok {
		t.Fatal("docs/operations.md has no production install")
	}
	_, block, ok := strings.Cut(after, "```yaml\n")
	if !ok {
		t.Fatal("docs/operations.md's production install has no values")
	}
	block, _, _ = strings.Cut(block, "```")
	r := renderAndDecode(t, loadChart(t), valueSet{name: "readme production", inline: block})
	if r.job == nil || r.rule == nil || r.dash == nil || r.so == nil || r.sm == nil {
		t.Fatal("the production install lacks the topics Job, the alerts, the dashboard, KEDA or the ServiceMonitor")
	}
	if len(wantKafkaEnv(r)) < 7 {
		t.Errorf("the production install is not over mutual TLS and SCRAM: %v", wantKafkaEnv(r))
	}
	for name, check := range map[string]func(*testing.T, *rendered){
		"features": checkFeatures, "labels": checkLabels, "deployment": checkDeployment, "selectors": checkSelectors,
		"processor accepts config and env": checkProcessorConfig, "topics job": checkTopicsJob,
		"kafka security": checkKafkaSecurity, "alerts": checkPrometheusRule, "dashboard": checkDashboard,
		"autoscaling": checkAutoscaling, "config sections": checkConfigSections,
	} {
		t.Run(name, func(t *testing.T) { check(t, r) })
	}
}
