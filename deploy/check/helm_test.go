package check

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/validation"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

const (
	chartDir    = "../helm/tierpush"
	releaseName = "tp"
	namespace   = "notifications"
)

// valueSet is values the chart must lint, render and decode with: a
// values file, and values given inline on top (as --set would).
type valueSet struct {
	name   string
	file   string // relative to chartDir; "" = chart defaults only
	inline string // YAML merged over file
}

// minimalValues is the least a documented install gives: the keys from an
// existing Secret (the chart refuses to render without keys).
const minimalValues = "secrets:\n  existingSecret: tierpush-keys\n"

// valueSets are the defaults (plus the keys) and the ci files, between
// them every optional feature.
var valueSets = []valueSet{
	{name: "defaults", inline: minimalValues},
	{name: "all-features", file: "ci/all-features-values.yaml"},
	{name: "keda", file: "ci/keda-values.yaml"},
	{name: "existing-secret", file: "ci/existing-secret-values.yaml"},
	{name: "production", file: "ci/production-values.yaml"},
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	return ch
}

func readValues(t *testing.T, file string) map[string]any {
	t.Helper()
	if file == "" {
		return map[string]any{}
	}
	v, err := common.ReadValuesFile(filepath.Join(chartDir, file))
	if err != nil {
		t.Fatalf("read %s: %v", file, err)
	}
	return v
}

// values reads a value set: its file, then its inline values over it.
func (vs valueSet) values(t *testing.T) map[string]any {
	t.Helper()
	v := readValues(t, vs.file)
	if vs.inline == "" {
		return v
	}
	over, err := common.ReadValues([]byte(vs.inline))
	if err != nil {
		t.Fatalf("%s inline values: %v", vs.name, err)
	}
	return util.MergeTables(over, v)
}

// render renders the chart as `helm install` would, schema validation
// included. It returns the manifests by template and NOTES.txt.
func render(ch *chart.Chart, vals map[string]any) (map[string]string, string, error) {
	opts := common.ReleaseOptions{Name: releaseName, Namespace: namespace, Revision: 1, IsInstall: true}
	rv, err := util.ToRenderValuesWithSchemaValidation(ch, vals, opts, common.DefaultCapabilities, false)
	if err != nil {
		return nil, "", err
	}
	out, err := engine.Render(ch, rv)
	if err != nil {
		return nil, "", err
	}
	notes := ""
	manifests := map[string]string{}
	for name, content := range out {
		switch {
		case strings.HasSuffix(name, "NOTES.txt"):
			notes = content
		case strings.TrimSpace(content) != "":
			manifests[name] = content
		}
	}
	return manifests, notes, nil
}

func TestChartLints(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			res := lint.RunAll(chartDir, vs.values(t), namespace)
			for _, m := range res.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("lint: %v", m)
				} else {
					t.Logf("lint: %v", m)
				}
			}
		})
	}
}

// scaledObject mirrors keda.sh/v1alpha1 ScaledObject (kedacore/keda
// apis/keda/v1alpha1/scaledobject_types.go) for the fields KEDA defines, so
// that strict decoding rejects any field KEDA would not know. The KEDA
// module itself pulls in half of Kubernetes' controllers.
type scaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		ScaleTargetRef *struct {
			Name                   string `json:"name"`
			APIVersion             string `json:"apiVersion,omitempty"`
			Kind                   string `json:"kind,omitempty"`
			EnvSourceContainerName string `json:"envSourceContainerName,omitempty"`
		} `json:"scaleTargetRef"`
		PollingInterval       *int32 `json:"pollingInterval,omitempty"`
		InitialCooldownPeriod *int32 `json:"initialCooldownPeriod,omitempty"`
		CooldownPeriod        *int32 `json:"cooldownPeriod,omitempty"`
		IdleReplicaCount      *int32 `json:"idleReplicaCount,omitempty"`
		MinReplicaCount       *int32 `json:"minReplicaCount,omitempty"`
		MaxReplicaCount       *int32 `json:"maxReplicaCount,omitempty"`
		Advanced              *struct {
			HorizontalPodAutoscalerConfig *struct {
				Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior,omitempty"`
				Name     string                                         `json:"name,omitempty"`
			} `json:"horizontalPodAutoscalerConfig,omitempty"`
			RestoreToOriginalReplicaCount bool `json:"restoreToOriginalReplicaCount,omitempty"`
		} `json:"advanced,omitempty"`
		Triggers []struct {
			Type              string            `json:"type"`
			Name              string            `json:"name,omitempty"`
			UseCachedMetrics  bool              `json:"useCachedMetrics,omitempty"`
			Metadata          map[string]string `json:"metadata"`
			AuthenticationRef *struct {
				Name string `json:"name"`
				Kind string `json:"kind,omitempty"`
			} `json:"authenticationRef,omitempty"`
			MetricType autoscalingv2.MetricTargetType `json:"metricType,omitempty"`
		} `json:"triggers"`
		Fallback *struct {
			FailureThreshold int32  `json:"failureThreshold"`
			Replicas         int32  `json:"replicas"`
			Behavior         string `json:"behavior,omitempty"`
		} `json:"fallback,omitempty"`
	} `json:"spec"`
}

// decoder decodes a manifest strictly into its Kubernetes API type: an
// unknown or duplicated field, or a kind the chart should not render,
// fails.
type decoder struct{ codec runtime.Decoder }

func newDecoder(t *testing.T) decoder {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, batchv1.AddToScheme, policyv1.AddToScheme,
		autoscalingv2.AddToScheme, monitoringv1.AddToScheme, networkingv1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	return decoder{serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()}
}

func (d decoder) decode(doc string) (any, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
		return nil, err
	}
	if tm.APIVersion == "keda.sh/v1alpha1" && tm.Kind == "ScaledObject" {
		js, err := yaml.YAMLToJSONStrict([]byte(doc))
		if err != nil {
			return nil, err
		}
		var so scaledObject
		strict, err := kjson.UnmarshalStrict(js, &so, kjson.DisallowUnknownFields)
		if err != nil {
			return nil, err
		}
		if len(strict) > 0 {
			return nil, fmt.Errorf("strict decoding: %v", strict)
		}
		return &so, nil
	}
	obj, _, err := d.codec.Decode([]byte(doc), nil, nil)
	if err != nil {
		return nil, err
	}
	return obj, nil
}

func TestDecoderIsStrict(t *testing.T) {
	d := newDecoder(t)
	bad := map[string]string{
		"unknown field":   "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {ports: [{port: 80}], selectr: {a: b}}\n",
		"duplicate field": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\ndata: {c: d}\n",
		"wrong case":      "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {Replicas: 2}\n",
		"unknown kind":    "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: x}\nprovisioner: p\n",
		"keda unknown":    "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: x}\nspec: {scaleTargetRef: {name: y}, triggers: [], maxReplicas: 3}\n",
		"monitor unknown": "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: x}\nspec: {selector: {}, endpoints: [{port: m, intervall: 5s}]}\n",
	}
	for name, doc := range bad {
		if _, err := d.decode(doc); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
}

// rendered is one value set's decoded objects.
type rendered struct {
	vals    map[string]any
	notes   string
	objs    []any
	byKind  map[string][]metav1.Object
	dep     *appsv1.Deployment
	cm      *corev1.ConfigMap
	secret  *corev1.Secret
	svc     *corev1.Service
	job     *batchv1.Job
	jobCM   *corev1.ConfigMap // the topics Job's config file, a hook
	np      *networkingv1.NetworkPolicy
	pdb     *policyv1.PodDisruptionBudget
	hpa     *autoscalingv2.HorizontalPodAutoscaler
	sm      *monitoringv1.ServiceMonitor
	rule    *monitoringv1.PrometheusRule
	dash    *corev1.ConfigMap // the Grafana dashboard
	so      *scaledObject
	sa      *corev1.ServiceAccount
	merged  map[string]any // chart defaults overlaid with the value set
	setName string
}

func renderAndDecode(t *testing.T, ch *chart.Chart, vs valueSet) *rendered {
	t.Helper()
	name, vals := vs.name, vs.values(t)
	manifests, notes, err := render(ch, vals)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	merged, err := util.CoalesceValues(ch, vals)
	if err != nil {
		t.Fatal(err)
	}
	r := &rendered{vals: vals, notes: notes, byKind: map[string][]metav1.Object{}, merged: merged, setName: name}
	d := newDecoder(t)
	for _, tpl := range slices.Sorted(maps.Keys(manifests)) {
		for _, doc := range releaseutil.SplitManifests(manifests[tpl]) {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			obj, err := d.decode(doc)
			if err != nil {
				t.Errorf("%s does not decode strictly: %v\n%s", tpl, err, doc)
				continue
			}
			r.objs = append(r.objs, obj)
			mo, ok := obj.(metav1.Object)
			if !ok {
				t.Fatalf("%s: %T has no object metadata", tpl, obj)
			}
			kind := fmt.Sprintf("%T", obj)
			if cm, ok := obj.(*corev1.ConfigMap); ok && cm.Labels["grafana_dashboard"] != "" {
				kind += " (dashboard)"
			} else if ok && cm.Labels["app.kubernetes.io/component"] == "topics" {
				kind += " (topics)"
			}
			r.byKind[kind] = append(r.byKind[kind], mo)
			switch o := obj.(type) {
			case *appsv1.Deployment:
				r.dep = o
			case *corev1.ConfigMap:
				switch {
				case o.Labels["grafana_dashboard"] != "":
					r.dash = o
				case o.Labels["app.kubernetes.io/component"] == "topics":
					r.jobCM = o
				default:
					r.cm = o
				}
			case *networkingv1.NetworkPolicy:
				r.np = o
			case *monitoringv1.PrometheusRule:
				r.rule = o
			case *corev1.Secret:
				r.secret = o
			case *corev1.Service:
				r.svc = o
			case *batchv1.Job:
				r.job = o
			case *policyv1.PodDisruptionBudget:
				r.pdb = o
			case *autoscalingv2.HorizontalPodAutoscaler:
				r.hpa = o
			case *monitoringv1.ServiceMonitor:
				r.sm = o
			case *scaledObject:
				r.so = o
			case *corev1.ServiceAccount:
				r.sa = o
			default:
				t.Errorf("%s renders an unexpected %T", tpl, obj)
			}
		}
	}
	for kind, objs := range r.byKind {
		if len(objs) > 1 {
			t.Errorf("%d objects of kind %s, want one", len(objs), kind)
		}
	}
	if r.dep == nil || r.cm == nil || r.svc == nil {
		t.Fatalf("render lacks the Deployment, ConfigMap or Service: %v", slices.Collect(maps.Keys(r.byKind)))
	}
	return r
}

// val reads a dotted path of the merged values.
func (r *rendered) val(path string) any {
	var cur any = r.merged
	for _, k := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[k]
	}
	return cur
}

func (r *rendered) valString(path string) string { return fmt.Sprint(r.val(path)) }
func (r *rendered) valBool(path string) bool     { b, _ := r.val(path).(bool); return b }
func (r *rendered) valInt(path string) int {
	switch v := r.val(path).(type) {
	case float64:
		return int(v)
	case int:
		return v
	case int64:
		return int(v)
	}
	n, _ := strconv.Atoi(fmt.Sprint(r.val(path)))
	return n
}

func TestChartRendersAndDecodesStrictly(t *testing.T) {
	ch := loadChart(t)
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			r := renderAndDecode(t, ch, vs)
			t.Run("features", func(t *testing.T) { checkFeatures(t, r) })
			t.Run("labels", func(t *testing.T) { checkLabels(t, r) })
			t.Run("deployment", func(t *testing.T) { checkDeployment(t, r) })
			t.Run("selectors", func(t *testing.T) { checkSelectors(t, r) })
			t.Run("processor accepts config and env", func(t *testing.T) { checkProcessorConfig(t, r) })
			t.Run("topics job", func(t *testing.T) { checkTopicsJob(t, r) })
			t.Run("network policy", func(t *testing.T) { checkNetworkPolicy(t, r) })
			t.Run("topology spread", func(t *testing.T) { checkTopologySpread(t, r) })
			t.Run("kafka security", func(t *testing.T) { checkKafkaSecurity(t, r) })
			t.Run("alerts", func(t *testing.T) { checkPrometheusRule(t, r) })
			t.Run("dashboard", func(t *testing.T) { checkDashboard(t, r) })
			t.Run("autoscaling", func(t *testing.T) { checkAutoscaling(t, r) })
			t.Run("config sections", func(t *testing.T) { checkConfigSections(t, r) })
			t.Run("notes", func(t *testing.T) { checkNotes(t, r) })
		})
	}
}

// checkFeatures: each optional object is rendered exactly when its value
// switches it on.
func checkFeatures(t *testing.T, r *rendered) {
	for _, f := range []struct {
		what    string
		on      bool
		present bool
	}{
		{"ServiceMonitor", r.valBool("metrics.serviceMonitor.enabled"), r.sm != nil},
		{"PrometheusRule", r.valBool("metrics.prometheusRule.enabled"), r.rule != nil},
		{"Grafana dashboard ConfigMap", r.valBool("metrics.grafanaDashboard.enabled"), r.dash != nil},
		{"HorizontalPodAutoscaler", r.valBool("autoscaling.enabled"), r.hpa != nil},
		{"ScaledObject", r.valBool("keda.enabled"), r.so != nil},
		{"PodDisruptionBudget", r.valBool("podDisruptionBudget.enabled"), r.pdb != nil},
		{"topics Job", r.valBool("topics.ensureJob.enabled"), r.job != nil},
		{"topics Job ConfigMap", r.valBool("topics.ensureJob.enabled"), r.jobCM != nil},
		{"NetworkPolicy", r.valBool("networkPolicy.enabled"), r.np != nil},
		{"Secret", r.valString("secrets.existingSecret") == "", r.secret != nil},
		{"ServiceAccount", r.valBool("serviceAccount.create"), r.sa != nil},
	} {
		if f.on != f.present {
			t.Errorf("%s: enabled %v, rendered %v", f.what, f.on, f.present)
		}
	}
}

func checkLabels(t *testing.T, r *rendered) {
	for kind, objs := range r.byKind {
		for _, o := range objs {
			l := o.GetLabels()
			for _, k := range []string{"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "helm.sh/chart"} {
				if l[k] == "" {
					t.Errorf("%s %s lacks label %s", kind, o.GetName(), k)
				}
			}
			if o.GetNamespace() != "" {
				t.Errorf("%s %s hard-codes namespace %s", kind, o.GetName(), o.GetNamespace())
			}
			if len(o.GetName()) > 63 {
				t.Errorf("%s name %q is longer than 63", kind, o.GetName())
			}
			for _, msg := range validation.IsDNS1123Subdomain(o.GetName()) {
				t.Errorf("%s name %q: %s", kind, o.GetName(), msg)
			}
			for k, v := range l {
				for _, msg := range append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...) {
					t.Errorf("%s %s label %s=%q: %s", kind, o.GetName(), k, v, msg)
				}
			}
		}
	}
	for _, msg := range validation.IsDNS1035Label(r.svc.Name) {
		t.Errorf("Service name %q: %s", r.svc.Name, msg)
	}
	for k := range r.cm.Data {
		for _, msg := range validation.IsConfigMapKey(k) {
			t.Errorf("ConfigMap key %q: %s", k, msg)
		}
	}
	if r.secret != nil {
		for k := range r.secret.Data {
			for _, msg := range validation.IsEnvVarName(k) {
				t.Errorf("Secret key %q: %s", k, msg)
			}
		}
	}
	for _, e := range r.dep.Spec.Template.Spec.Containers[0].Env {
		for _, msg := range validation.IsEnvVarName(e.Name) {
			t.Errorf("env %q: %s", e.Name, msg)
		}
	}
}

func checkDeployment(t *testing.T, r *rendered) {
	d := r.dep
	autoscaled := r.valBool("autoscaling.enabled") || r.valBool("keda.enabled")
	switch {
	case autoscaled && d.Spec.Replicas != nil:
		t.Errorf("autoscaled, but the Deployment sets replicas %d (it would fight the autoscaler)", *d.Spec.Replicas)
	case !autoscaled && (d.Spec.Replicas == nil || int(*d.Spec.Replicas) != r.valInt("replicaCount")):
		t.Errorf("replicas = %v, want replicaCount %d", d.Spec.Replicas, r.valInt("replicaCount"))
	}
	pod := d.Spec.Template.Spec
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the pod mounts a service account token; the processor never calls the Kubernetes API")
	}
	checkPodSecurity(t, "Deployment", pod)
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if want := []string{"run", "--config=/etc/tierpush/processor.yaml"}; !slices.Equal(c.Args, want) {
		t.Errorf("args = %q, want %q", c.Args, want)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Error("no cpu and memory requests")
	}
	if need := shutdownBound(t, r); pod.TerminationGracePeriodSeconds == nil ||
		time.Duration(*pod.TerminationGracePeriodSeconds)*time.Second < need+5*time.Second {
		t.Errorf("terminationGracePeriodSeconds %v leaves less than 5s over the longest clean shutdown, %s: SIGKILL before the commit", pod.TerminationGracePeriodSeconds, need)
	}
	checkGoMemLimit(t, r, c)

	// Probes: /healthz and /readyz on the port the processor serves them on.
	port := containerPort(t, c, "metrics")
	if addr := envValue(c, "TIERPUSH_HTTP_ADDR"); addr != fmt.Sprintf("0.0.0.0:%d", port) {
		t.Errorf("TIERPUSH_HTTP_ADDR = %q, want 0.0.0.0:%d (the metrics port, every interface)", addr, port)
	}
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"startup", c.StartupProbe, "/healthz"}, {"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("no HTTP %s probe", p.name)
			continue
		}
		if p.probe.HTTPGet.Path != p.path {
			t.Errorf("%s probe path %s, want %s", p.name, p.probe.HTTPGet.Path, p.path)
		}
		if pp := p.probe.HTTPGet.Port; pp.StrVal != "metrics" && int(pp.IntVal) != port {
			t.Errorf("%s probe port %s is not the metrics port %d", p.name, pp.String(), port)
		}
	}
	if c.StartupProbe != nil {
		// The processor serves /healthz only after creating or checking its topics (up to 60s).
		if budget := time.Duration(c.StartupProbe.PeriodSeconds*c.StartupProbe.FailureThreshold) * time.Second; budget < 60*time.Second {
			t.Errorf("startup probe gives up after %s, before the processor's 60s topic check can end", budget)
		}
	}

	// The config file comes from the rendered ConfigMap.
	var mount *corev1.VolumeMount
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].MountPath == "/etc/tierpush" {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil {
		t.Fatal("no volume mounted at /etc/tierpush")
	}
	var vol *corev1.Volume
	for i := range pod.Volumes {
		if pod.Volumes[i].Name == mount.Name {
			vol = &pod.Volumes[i]
		}
	}
	if vol == nil || vol.ConfigMap == nil || vol.ConfigMap.Name != r.cm.Name {
		t.Errorf("/etc/tierpush is not the rendered ConfigMap %s: %+v", r.cm.Name, vol)
	}
	if _, ok := r.cm.Data["processor.yaml"]; !ok {
		t.Error("ConfigMap has no processor.yaml")
	}
	checkVolumes(t, "Deployment", pod)

	// extraVolumes, extraVolumeMounts and extraEnvFrom arrive as given.
	for _, x := range []struct {
		value string
		names []string
	}{
		{"extraVolumes", volumeNames(pod.Volumes)},
		{"extraVolumeMounts", mountPaths(c.VolumeMounts)},
	} {
		for _, v := range asMaps(r.val(x.value)) {
			key := fmt.Sprint(v["name"])
			if x.value == "extraVolumeMounts" {
				key = fmt.Sprint(v["mountPath"])
			}
			if !slices.Contains(x.names, key) {
				t.Errorf("%s entry %s is not in the Deployment (%v)", x.value, key, x.names)
			}
		}
	}
	if want := len(asMaps(r.val("extraEnvFrom"))); len(c.EnvFrom) != want {
		t.Errorf("envFrom has %d sources, extraEnvFrom %d", len(c.EnvFrom), want)
	}

	// Secrets: from the chart's Secret with its keys, or the existing one.
	existing := r.valString("secrets.existingSecret")
	for _, e := range c.Env {
		ref := e.ValueFrom
		if ref == nil || ref.SecretKeyRef == nil {
			continue
		}
		s := ref.SecretKeyRef
		switch {
		case existing != "" && s.Name != existing:
			t.Errorf("%s reads Secret %s, want existingSecret %s", e.Name, s.Name, existing)
		case existing == "" && (r.secret == nil || s.Name != r.secret.Name):
			t.Errorf("%s reads Secret %s, which the chart does not render", e.Name, s.Name)
		case existing == "" && !(s.Optional != nil && *s.Optional):
			if _, ok := r.secret.Data[s.Key]; !ok {
				t.Errorf("%s reads key %s, absent from the rendered Secret", e.Name, s.Key)
			}
		}
	}
	if existing != "" {
		keys := map[string]string{
			"VAPID_PUBLIC_KEY": "vapidPublicKey", "VAPID_PRIVATE_KEY": "vapidPrivateKey", "VAPID_SUBJECT": "vapidSubject",
			"TIERPUSH_HMAC_KEY": "hmacKey", "TIERPUSH_HMAC_KEY_OLD": "hmacKeysOld",
		}
		for env, key := range keys {
			e := envVar(c, env)
			if e == nil || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Key != r.valString("secrets.existingSecretKeys."+key) {
				t.Errorf("%s does not read key secrets.existingSecretKeys.%s of %s", env, key, existing)
			}
		}
	}
}

// checkVolumes: every mount names a volume of the pod, no volume name or
// mount path is taken twice.
func checkVolumes(t *testing.T, what string, pod corev1.PodSpec) {
	t.Helper()
	vols := volumeNames(pod.Volumes)
	seen := map[string]bool{}
	for _, v := range vols {
		if seen[v] {
			t.Errorf("%s: volume %s twice", what, v)
		}
		seen[v] = true
	}
	for _, c := range pod.Containers {
		paths := map[string]bool{}
		for _, m := range c.VolumeMounts {
			if !seen[m.Name] {
				t.Errorf("%s: container %s mounts volume %s, which the pod lacks", what, c.Name, m.Name)
			}
			if paths[m.MountPath] {
				t.Errorf("%s: container %s mounts %s twice", what, c.Name, m.MountPath)
			}
			paths[m.MountPath] = true
		}
	}
}

func volumeNames(vs []corev1.Volume) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Name)
	}
	return out
}

func mountPaths(ms []corev1.VolumeMount) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.MountPath)
	}
	return out
}

// asMaps reads a list of objects of the values.
func asMaps(v any) []map[string]any {
	var out []map[string]any
	l, _ := v.([]any)
	for _, x := range l {
		if m, ok := x.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

func checkPodSecurity(t *testing.T, what string, pod corev1.PodSpec) {
	t.Helper()
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("%s: pod may run as root: %+v", what, psc)
	}
	if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: no RuntimeDefault seccomp profile", what)
	}
	for _, c := range pod.Containers {
		sc := c.SecurityContext
		switch {
		case sc == nil:
			t.Errorf("%s: container %s has no securityContext", what, c.Name)
		case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
			t.Errorf("%s: container %s has a writable root filesystem", what, c.Name)
		case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
			t.Errorf("%s: container %s allows privilege escalation", what, c.Name)
		case sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL"):
			t.Errorf("%s: container %s keeps capabilities", what, c.Name)
		}
		if c.Image == "" || !strings.Contains(c.Image, ":") {
			t.Errorf("%s: container %s image %q has no tag", what, c.Name, c.Image)
		}
	}
}

func containerPort(t *testing.T, c corev1.Container, name string) int {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return int(p.ContainerPort)
		}
	}
	t.Fatalf("container %s has no port %q", c.Name, name)
	return 0
}

func envVar(c corev1.Container, name string) *corev1.EnvVar {
	var found *corev1.EnvVar
	for i := range c.Env {
		if c.Env[i].Name == name {
			found = &c.Env[i] // the last one wins, as in Kubernetes
		}
	}
	return found
}

func envValue(c corev1.Container, name string) string {
	if e := envVar(c, name); e != nil {
		return e.Value
	}
	return ""
}

// checkSelectors: the Service, PodDisruptionBudget and ServiceMonitor
// select the processor pods and only them, not the topics Job's.
func checkSelectors(t *testing.T, r *rendered) {
	podLabels := labels.Set(r.dep.Spec.Template.Labels)
	sel, err := metav1.LabelSelectorAsSelector(r.dep.Spec.Selector)
	if err != nil || sel.Empty() || !sel.Matches(podLabels) {
		t.Errorf("Deployment selector %v does not select its own pods %v (%v)", r.dep.Spec.Selector, podLabels, err)
	}
	if r.job != nil && sel.Matches(labels.Set(r.job.Spec.Template.Labels)) {
		t.Error("the Deployment selector also selects the topics Job's pod")
	}
	svcSel := labels.SelectorFromSet(r.svc.Spec.Selector)
	if len(r.svc.Spec.Selector) == 0 || !svcSel.Matches(podLabels) {
		t.Errorf("Service selector %v does not select the processor pods", r.svc.Spec.Selector)
	}
	if r.job != nil && svcSel.Matches(labels.Set(r.job.Spec.Template.Labels)) {
		t.Error("the Service also selects the topics Job's pod")
	}
	c := r.dep.Spec.Template.Spec.Containers[0]
	if len(r.svc.Spec.Ports) != 1 {
		t.Fatalf("Service has %d ports, want 1", len(r.svc.Spec.Ports))
	}
	sp := r.svc.Spec.Ports[0]
	if sp.TargetPort.StrVal != "" {
		containerPort(t, c, sp.TargetPort.StrVal)
	} else if int(sp.TargetPort.IntVal) != containerPort(t, c, "metrics") {
		t.Errorf("Service targets port %d, not the metrics port", sp.TargetPort.IntVal)
	}
	if r.pdb != nil {
		s, err := metav1.LabelSelectorAsSelector(r.pdb.Spec.Selector)
		if err != nil || s.Empty() || !s.Matches(podLabels) {
			t.Errorf("PodDisruptionBudget selector %v does not select the processor pods", r.pdb.Spec.Selector)
		}
		if (r.pdb.Spec.MaxUnavailable == nil) == (r.pdb.Spec.MinAvailable == nil) {
			t.Error("PodDisruptionBudget must set exactly one of maxUnavailable and minAvailable")
		}
	}
	if r.sm != nil {
		s, err := metav1.LabelSelectorAsSelector(&r.sm.Spec.Selector)
		if err != nil || s.Empty() || !s.Matches(labels.Set(r.svc.Labels)) {
			t.Errorf("ServiceMonitor selector %v does not select the Service %v", r.sm.Spec.Selector, r.svc.Labels)
		}
		if len(r.sm.Spec.Endpoints) != 1 || r.sm.Spec.Endpoints[0].Port != sp.Name {
			t.Errorf("ServiceMonitor endpoints %+v do not name the Service port %q", r.sm.Spec.Endpoints, sp.Name)
		} else if p := r.sm.Spec.Endpoints[0].Path; p != "/metrics" {
			t.Errorf("ServiceMonitor scrapes %q, want /metrics", p)
		}
	}
	if r.sa != nil && r.dep.Spec.Template.Spec.ServiceAccountName != r.sa.Name {
		t.Errorf("pods run as %q, not the rendered ServiceAccount %q", r.dep.Spec.Template.Spec.ServiceAccountName, r.sa.Name)
	}
}

// checkProcessorConfig runs the real processor with the rendered config
// file and environment: it must accept every key and value.
func checkProcessorConfig(t *testing.T, r *rendered) {
	c := r.dep.Spec.Template.Spec.Containers[0]
	runFlags := commandFlags(t, "run")

	// Every key of the mounted config file is a flag of `processor run`.
	var cfg map[string]any
	if err := yaml.UnmarshalStrict([]byte(r.cm.Data["processor.yaml"]), &cfg); err != nil {
		t.Fatalf("processor.yaml: %v", err)
	}
	flagKeys := maps.Clone(cfg)
	delete(flagKeys, "tiers") // the sections, checked by checkConfigSections
	delete(flagKeys, "pacing")
	for k := range flagKeys {
		if _, ok := runFlags[k]; !ok {
			t.Errorf("processor.yaml key %q is no flag of processor run (the processor would refuse to start)", k)
		}
	}
	if r.setName == "defaults" {
		checkChartDefaults(t, flagKeys, runFlags)
	}

	// Every environment variable is one the processor reads.
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	checkEnvNames(t, "Deployment env", []string{"run"}, env)

	// The processor accepts the config file and the environment, with the
	// Secret's values (or test keys when the Secret is external or empty)
	// and test files in place of the mounted Secrets.
	runEnv := containerEnv(t, r, r.dep.Spec.Template.Spec, c)
	content := r.cm.Data["processor.yaml"]
	if !configSectionsRead() {
		// This build of the processor refuses tiers: and pacing: in
		// --config (an older image would too); the rest must still pass.
		t.Logf("processor run does not read tiers: and pacing: from --config; checked without them")
		content = withoutSections(t, content, "tiers", "pacing")
	}
	file := filepath.Join(t.TempDir(), "processor.yaml")
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	args := slices.Clone(c.Args)
	for i, a := range args {
		if strings.HasPrefix(a, "--config=") {
			args[i] = "--config=" + file
		}
	}
	checkAccepted(t, "Deployment", args, runEnv)
}

// checkChartDefaults: the chart's defaults are the processor's, except
// where Kubernetes needs otherwise.
func checkChartDefaults(t *testing.T, cfg map[string]any, runFlags map[string]string) {
	differ := map[string]string{
		"brokers":    "the processor's empty default starts the embedded broker",
		"log-format": "json for log collectors",
	}
	for k, v := range cfg {
		if _, ok := differ[k]; ok {
			continue
		}
		got, want := fmt.Sprint(v), runFlags[k]
		if gd, err1 := time.ParseDuration(got); err1 == nil {
			if wd, err2 := time.ParseDuration(want); err2 == nil && gd == wd {
				continue
			}
		}
		if got != want {
			t.Errorf("chart default %s: %q, the processor's is %q", k, got, want)
		}
	}
}

func checkTopicsJob(t *testing.T, r *rendered) {
	j := r.job
	if j == nil {
		return
	}
	hooks := strings.Split(j.Annotations["helm.sh/hook"], ",")
	slices.Sort(hooks)
	if !slices.Equal(hooks, []string{"pre-install", "pre-upgrade"}) {
		t.Errorf("topics Job hooks %v, want pre-install and pre-upgrade", hooks)
	}
	if !strings.Contains(j.Annotations["helm.sh/hook-delete-policy"], "before-hook-creation") {
		t.Error("topics Job is not replaced on the next upgrade (hook-delete-policy before-hook-creation)")
	}
	pod := j.Spec.Template.Spec
	if pod.RestartPolicy != corev1.RestartPolicyNever && pod.RestartPolicy != corev1.RestartPolicyOnFailure {
		t.Errorf("topics Job restartPolicy %q", pod.RestartPolicy)
	}
	checkPodSecurity(t, "topics Job", pod)
	// A pre-install hook runs before the release's other objects exist:
	// only Secrets created beforehand (Kafka TLS and SASL) may be used.
	if pod.ServiceAccountName != "" || len(pod.Containers[0].EnvFrom) > 0 {
		t.Error("topics Job depends on objects of the release, which do not exist yet at pre-install")
	}
	external := []string{r.valString("kafka.tls.existingSecret"), r.valString("kafka.sasl.existingSecret")}
	for _, v := range pod.Volumes {
		if v.ConfigMap != nil && r.jobCM != nil && v.ConfigMap.Name == r.jobCM.Name {
			continue // a hook of its own, made before the Job
		}
		if v.Secret == nil || v.Secret.SecretName == "" || !slices.Contains(external, v.Secret.SecretName) {
			t.Errorf("topics Job volume %s is not a Kafka Secret created beforehand (%v) nor the Job's hook ConfigMap: at pre-install the release's objects do not exist", v.Name, external)
		}
	}
	checkJobConfigMap(t, r)
	for _, e := range pod.Containers[0].Env {
		if e.ValueFrom != nil && (e.ValueFrom.SecretKeyRef == nil || !slices.Contains(external, e.ValueFrom.SecretKeyRef.Name)) {
			t.Errorf("topics Job env %s reads %+v, not a Kafka Secret created beforehand", e.Name, e.ValueFrom)
		}
	}
	checkVolumes(t, "topics Job", pod)
	c := pod.Containers[0]
	if c.Image != r.dep.Spec.Template.Spec.Containers[0].Image {
		t.Errorf("topics Job image %s differs from the processor's", c.Image)
	}
	command, rest := subcommand(c.Args)
	if !slices.Equal(command, []string{"topics", "ensure"}) {
		t.Fatalf("topics Job runs %q, want topics ensure", c.Args)
	}
	flags := commandFlags(t, command...)
	for _, a := range rest {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if _, ok := flags[name]; !ok {
			t.Errorf("topics Job argument %q is no flag of processor topics ensure", a)
		}
	}
	// The Job ensures what the processor would: it reads the processor's
	// own config file (brokers, prefix, ladders, partitions, retention).
	if !slices.Equal(rest, []string{"--config=/etc/tierpush/processor.yaml"}) {
		t.Errorf("topics Job args %q, want only --config=/etc/tierpush/processor.yaml", rest)
	}
	var mounted bool
	for _, m := range c.VolumeMounts {
		for _, v := range pod.Volumes {
			mounted = mounted || m.MountPath == "/etc/tierpush" && v.Name == m.Name && v.ConfigMap != nil && r.jobCM != nil && v.ConfigMap.Name == r.jobCM.Name
		}
	}
	if !mounted {
		t.Error("/etc/tierpush of the topics Job is not its hook ConfigMap")
	}
	jobEnv := map[string]string{}
	for _, e := range c.Env {
		jobEnv[e.Name] = e.Value
	}
	checkEnvNames(t, "topics Job env", command, jobEnv)
	file := filepath.Join(t.TempDir(), "processor.yaml")
	if err := os.WriteFile(file, []byte(r.jobCM.Data["processor.yaml"]), 0o600); err != nil {
		t.Fatal(err)
	}
	checkAccepted(t, "topics Job", append(command, "--config="+file), containerEnv(t, r, pod, c))
}

// checkJobConfigMap: the topics Job's ConfigMap is a hook made before the
// Job, holding the processor's config file as it is.
func checkJobConfigMap(t *testing.T, r *rendered) {
	if r.jobCM == nil {
		t.Fatal("the topics Job has no ConfigMap")
	}
	hooks := strings.Split(r.jobCM.Annotations["helm.sh/hook"], ",")
	slices.Sort(hooks)
	if !slices.Equal(hooks, []string{"pre-install", "pre-upgrade"}) {
		t.Errorf("topics ConfigMap hooks %v, want pre-install and pre-upgrade (the release's own ConfigMap does not exist yet)", hooks)
	}
	cmWeight, _ := strconv.Atoi(r.jobCM.Annotations["helm.sh/hook-weight"])
	jobWeight, _ := strconv.Atoi(r.job.Annotations["helm.sh/hook-weight"])
	if cmWeight >= jobWeight {
		t.Errorf("topics ConfigMap hook weight %d is not below the Job's %d: it may not exist when the Job starts", cmWeight, jobWeight)
	}
	if got, want := r.jobCM.Data["processor.yaml"], r.cm.Data["processor.yaml"]; got != want {
		t.Errorf("the topics Job's config file differs from the processor's:\n%s\nwant\n%s", got, want)
	}
}

func toStrings(v any) []string {
	var out []string
	if l, ok := v.([]any); ok {
		for _, x := range l {
			out = append(out, fmt.Sprint(x))
		}
	}
	return out
}

func checkAutoscaling(t *testing.T, r *rendered) {
	if r.hpa != nil && r.so != nil {
		t.Fatal("both a HorizontalPodAutoscaler and a KEDA ScaledObject (KEDA makes its own HPA)")
	}
	partitions := r.valInt("topics.partitions")
	if h := r.hpa; h != nil {
		if h.Spec.ScaleTargetRef.Kind != "Deployment" || h.Spec.ScaleTargetRef.Name != r.dep.Name {
			t.Errorf("HPA targets %+v, not the Deployment %s", h.Spec.ScaleTargetRef, r.dep.Name)
		}
		if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas > h.Spec.MaxReplicas {
			t.Errorf("HPA min %v > max %d", h.Spec.MinReplicas, h.Spec.MaxReplicas)
		}
		if int(h.Spec.MaxReplicas) > partitions {
			t.Logf("HPA may scale to %d replicas, above %d partitions (idle replicas)", h.Spec.MaxReplicas, partitions)
		}
	}
	if so := r.so; so != nil {
		ref := so.Spec.ScaleTargetRef
		if ref == nil || ref.Name != r.dep.Name || (ref.Kind != "" && ref.Kind != "Deployment") {
			t.Errorf("ScaledObject targets %+v, not the Deployment %s", ref, r.dep.Name)
		}
		if so.Spec.MinReplicaCount == nil || so.Spec.MaxReplicaCount == nil || *so.Spec.MinReplicaCount > *so.Spec.MaxReplicaCount {
			t.Errorf("ScaledObject min %v > max %v", so.Spec.MinReplicaCount, so.Spec.MaxReplicaCount)
		}
		if len(so.Spec.Triggers) != 1 || so.Spec.Triggers[0].Type != r.valString("keda.trigger") {
			t.Fatalf("ScaledObject triggers %+v, want one %s trigger", so.Spec.Triggers, r.valString("keda.trigger"))
		}
		if so.Spec.Triggers[0].Type == "prometheus" {
			checkPrometheusTrigger(t, r, so.Spec.Triggers[0].Metadata)
			return
		}
		md := so.Spec.Triggers[0].Metadata
		brokers := toStrings(r.val("kafka.brokers"))
		if md["bootstrapServers"] != strings.Join(brokers, ",") || md["consumerGroup"] != r.valString("kafka.group") {
			t.Errorf("kafka trigger reads %s/%s, the processor uses %v/%s", md["bootstrapServers"], md["consumerGroup"], brokers, r.valString("kafka.group"))
		}
		for _, k := range []string{"lagThreshold", "allowIdleConsumers"} {
			if md[k] == "" {
				t.Errorf("kafka trigger lacks %s", k)
			}
		}
		if _, err := strconv.ParseBool(md["allowIdleConsumers"]); err != nil {
			t.Errorf("allowIdleConsumers %q is not a boolean", md["allowIdleConsumers"])
		}
		if topic := md["topic"]; topic != "" && !strings.HasPrefix(topic, r.valString("kafka.topicPrefix")) {
			t.Errorf("kafka trigger topic %s is not one of the processor's (prefix %s)", topic, r.valString("kafka.topicPrefix"))
		}
	}
}

// checkConfigSections: processor.yaml's tiers: section holds the values'
// ladders (the processor's defaults with the chart's), and its pacing:
// section holds --pacing-* flags under their config-file keys, with the
// processor's defaults; pacing.enabled is TIERPUSH_PACING.
func checkConfigSections(t *testing.T, r *rendered) {
	var cfg struct {
		Tiers map[string]struct {
			Steps       []string `json:"steps"`
			MaxAttempts int      `json:"max_attempts"`
			Weight      int      `json:"weight"`
		} `json:"tiers"`
		Pacing map[string]any `json:"pacing"`
	}
	if err := yaml.Unmarshal([]byte(r.cm.Data["processor.yaml"]), &cfg); err != nil {
		t.Fatalf("processor.yaml: %v", err)
	}
	if got := slices.Sorted(maps.Keys(cfg.Tiers)); !slices.Equal(got, []string{"tier1", "tier2", "tier3"}) {
		t.Errorf("processor.yaml tiers %v, want tier1..3", got)
	}
	for name, l := range cfg.Tiers {
		var steps []time.Duration
		for _, s := range l.Steps {
			d, err := time.ParseDuration(s)
			if err != nil {
				t.Errorf("tiers.%s step %q: %v", name, s, err)
			}
			steps = append(steps, d)
		}
		var want []time.Duration
		for _, s := range toStrings(r.val("tiers." + name + ".steps")) {
			d, _ := time.ParseDuration(s)
			want = append(want, d)
		}
		if !slices.Equal(steps, want) || l.MaxAttempts != r.valInt("tiers."+name+".maxAttempts") || l.Weight != r.valInt("tiers."+name+".weight") {
			t.Errorf("tiers.%s rendered %v %d attempts weight %d, values say %v %d %d", name, steps, l.MaxAttempts, l.Weight,
				want, r.valInt("tiers."+name+".maxAttempts"), r.valInt("tiers."+name+".weight"))
		}
		if r.setName != "defaults" {
			continue
		}
		def, ok := defaultPolicy[name]
		if !ok || !slices.Equal(steps, def.Steps) || l.MaxAttempts != def.MaxAttempts || l.Weight != def.Weight {
			t.Errorf("chart default tiers.%s = %v %d attempts weight %d; the processor's is %v %d attempts weight %d",
				name, steps, l.MaxAttempts, l.Weight, def.Steps, def.MaxAttempts, def.Weight)
		}
	}

	runFlags := commandFlags(t, "run")
	asFlags := map[string]any{}
	for k, v := range cfg.Pacing {
		flag := "pacing-" + strings.ReplaceAll(k, "_", "-")
		if _, ok := runFlags[flag]; !ok || strings.Contains(k, "-") {
			t.Errorf("pacing.%s names no flag of processor run (--%s)", k, flag)
		}
		asFlags[flag] = v
	}
	for _, k := range []string{"cut_rate", "halt_rate", "max_concurrency"} {
		if _, ok := cfg.Pacing[k]; !ok {
			t.Errorf("processor.yaml pacing: lacks %s", k)
		}
	}
	if r.setName == "defaults" {
		checkChartDefaults(t, asFlags, runFlags)
	}
	// Whether or not this build reads the section, its values must be
	// ones the flags accept.
	args := []string{"run", "--brokers=kafka:9092"}
	for _, f := range slices.Sorted(maps.Keys(asFlags)) {
		args = append(args, fmt.Sprintf("--%s=%v", f, asFlags[f]))
	}
	checkAccepted(t, "pacing: as flags", args, testRunEnv())
	c := r.dep.Spec.Template.Spec.Containers[0]
	if got, want := envValue(c, "TIERPUSH_PACING"), strconv.FormatBool(r.valBool("pacing.enabled")); got != want {
		t.Errorf("TIERPUSH_PACING = %q, pacing.enabled is %s", got, want)
	}
}

// configSectionsRead reports whether this build of `processor run` reads
// the tiers: and pacing: sections of --config.
var configSectionsRead = sync.OnceValue(func() bool {
	dir, err := os.MkdirTemp("", "tierpush-sections")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "c.yaml")
	doc := "brokers: [kafka:9092]\ntiers:\n  tier1:\n    steps: [2s, 8s, 60s]\n    max_attempts: 5\n    weight: 6\npacing:\n  cut_rate: 0.05\n"
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		panic(err)
	}
	return acceptedErr([]string{"run", "--config=" + file}, testRunEnv()) == nil
})

// testRunEnv is the keys `processor run` needs to pass its checks.
func testRunEnv() map[string]string {
	return map[string]string{
		"VAPID_PUBLIC_KEY": testVAPIDPublic, "VAPID_PRIVATE_KEY": testVAPIDPrivate, "VAPID_SUBJECT": "mailto:ci@tierpush.invalid",
		"TIERPUSH_HMAC_KEY": base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32)),
	}
}

// withoutSections drops top-level keys from a YAML document.
func withoutSections(t *testing.T, doc string, keys ...string) string {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		delete(m, k)
	}
	out, err := yaml.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func checkNotes(t *testing.T, r *rendered) {
	if !strings.Contains(r.notes, r.dep.Name) {
		t.Errorf("NOTES.txt does not name the release's objects:\n%s", r.notes)
	}
}

func TestChartRejectsBadValues(t *testing.T) {
	ch := loadChart(t)
	base, err := common.ReadValues([]byte(minimalValues))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := render(ch, base); err != nil {
		t.Fatalf("defaults with an existing Secret do not render: %v", err)
	}
	tests := []struct {
		name    string
		values  string
		wantErr string
	}{
		{"replicaCount of the wrong type", `replicaCount: three`, "replicaCount"},
		{"unknown top-level key", `replicas: 3`, "replicas"},
		{"unknown nested key", "kafka:\n  broker: [kafka:9092]", "broker"},
		{"no brokers", "kafka:\n  brokers: []", "brokers"},
		{"broker without port", "kafka:\n  brokers: [kafka]", "brokers"},
		{"replication factor 0", "topics:\n  replicationFactor: 0", "replicationFactor"},
		{"retention not a Go duration", "topics:\n  retention: 7 days", "retention"},
		{"log format", "config:\n  logFormat: xml", "logFormat"},
		{"jitter above 1", "config:\n  retryJitter: 1.5", "retryJitter"},
		{"comma in an old HMAC key", "secrets:\n  hmacKeysOld: ['a,b']", "hmacKeysOld"},
		{"lag threshold as a string", "keda:\n  lagThreshold: '1000'", "lagThreshold"},
		{"pull policy", "image:\n  pullPolicy: Sometimes", "pullPolicy"},
		{"insecure endpoint without port", "config:\n  allowInsecureEndpoints: [pushsim]", "allowInsecureEndpoints"},
		{"HPA and KEDA together", "autoscaling:\n  enabled: true\nkeda:\n  enabled: true", "mutually exclusive"},
		{"KEDA prometheus without a server", "keda:\n  enabled: true\n  trigger: prometheus", "keda.prometheus.serverAddress"},
		{"KEDA prometheus from zero", "keda:\n  enabled: true\n  trigger: prometheus\n  minReplicaCount: 0\n  prometheus: {serverAddress: 'http://prom:9090'}", "minReplicaCount"},
		{"KEDA trigger unknown", "keda:\n  enabled: true\n  trigger: cpu", "trigger"},
		{"alert duration in words", "metrics:\n  prometheusRule: {breakerOpenFor: 15 minutes}", "breakerOpenFor"},
		{"DLQ share above 1", "metrics:\n  prometheusRule: {dlqShare: 5}", "dlqShare"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vals, err := common.ReadValues([]byte(tt.values))
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = render(ch, util.MergeTables(vals, base))
			if err == nil {
				t.Fatalf("values %q rendered, want an error naming %s", tt.values, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error does not name %s: %v", tt.wantErr, err)
			}
		})
	}
}

// TestChartRequiresKeys: without secrets.existingSecret, an install that
// leaves any key empty fails at template time naming the keys, instead of
// rendering pods that exit 2 and crash-loop.
func TestChartRequiresKeys(t *testing.T) {
	ch := loadChart(t)
	full := map[string]string{
		"vapidPublicKey": testVAPIDPublic, "vapidPrivateKey": testVAPIDPrivate,
		"vapidSubject": "mailto:ci@tierpush.invalid", "hmacKey": base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32)),
	}
	secrets := func(skip string) map[string]any {
		s := map[string]any{}
		for k, v := range full {
			if k != skip {
				s[k] = v
			}
		}
		return map[string]any{"secrets": s}
	}
	if _, _, err := render(ch, map[string]any{}); err == nil {
		t.Error("chart defaults (no keys, no existingSecret) rendered")
	} else {
		for k := range full {
			if !strings.Contains(err.Error(), "secrets."+k) {
				t.Errorf("defaults: error does not name secrets.%s: %v", k, err)
			}
		}
		if !strings.Contains(err.Error(), "secrets.existingSecret") {
			t.Errorf("defaults: error does not name secrets.existingSecret: %v", err)
		}
	}
	for k := range full {
		_, _, err := render(ch, secrets(k))
		if err == nil || !strings.Contains(err.Error(), "secrets."+k) {
			t.Errorf("secrets.%s empty: %v, want an error naming it", k, err)
		}
	}
	if _, _, err := render(ch, secrets("")); err != nil {
		t.Errorf("every key given: %v", err)
	}
	if _, _, err := render(ch, map[string]any{"secrets": map[string]any{"existingSecret": "tierpush-keys"}}); err != nil {
		t.Errorf("existingSecret alone: %v", err)
	}
}

// TestChartHostPorts: brokers and insecure endpoints must parse as the
// processor parses them (host:port).
func TestChartValuesFilesHostPorts(t *testing.T) {
	for _, vs := range valueSets {
		ch := loadChart(t)
		merged, err := util.CoalesceValues(ch, vs.values(t))
		if err != nil {
			t.Fatal(err)
		}
		r := &rendered{merged: merged}
		for _, hp := range append(toStrings(r.val("kafka.brokers")), toStrings(r.val("config.allowInsecureEndpoints"))...) {
			if _, port, err := net.SplitHostPort(hp); err != nil || port == "" {
				t.Errorf("%s: %q is not host:port: %v", vs.name, hp, err)
			}
		}
	}
}

// TestChartReadmeCoversValues: every key of values.yaml, down to the
// second level, appears in the chart README's values table.
func TestChartReadmeCoversValues(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	vals := readValues(t, "values.yaml")
	freeForm := map[string]bool{
		"resources": true, "podSecurityContext": true, "securityContext": true, "startupProbe": true,
		"livenessProbe": true, "readinessProbe": true, "affinity": true, "nodeSelector": true,
		"podAnnotations": true, "podLabels": true,
	}
	doc := string(readme)
	for k, v := range vals {
		if !strings.Contains(doc, "`"+k) && !strings.Contains(doc, ", `"+k) {
			t.Errorf("README does not document %s", k)
		}
		m, ok := v.(map[string]any)
		if !ok || freeForm[k] {
			continue
		}
		for c := range m {
			if !strings.Contains(doc, k+"."+c) && !strings.Contains(doc, "."+c+"`") {
				t.Errorf("README does not document %s.%s", k, c)
			}
		}
	}
}

// testVAPIDKeysFile is a --vapid-keys file with one app, the test pair.
const testVAPIDKeysFile = "shop:\n  public_key: " + testVAPIDPublic + "\n  private_key: " + testVAPIDPrivate + "\n  subject: mailto:shop@tierpush.invalid\n"

// TestChartVAPIDKeys: vapidKeys.existingSecret mounts the Secret's key
// read-only and points TIERPUSH_VAPID_KEYS at it, and the default identity
// may then be left out (all of it, never half); the HMAC key may not.
func TestChartVAPIDKeys(t *testing.T) {
	ch := loadChart(t)
	hmac := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	for _, vs := range []valueSet{
		{name: "existing secret", inline: minimalValues + "vapidKeys: {existingSecret: tierpush-vapid-keys}\n"},
		{name: "no default identity", inline: "secrets: {hmacKey: " + hmac + "}\nvapidKeys: {existingSecret: apps, key: apps.yaml}\n"},
		{name: "all-features", file: "ci/all-features-values.yaml"},
	} {
		t.Run(vs.name, func(t *testing.T) {
			r := renderAndDecode(t, ch, vs)
			pod := r.dep.Spec.Template.Spec
			c := pod.Containers[0]
			const file = "/etc/tierpush-vapid/vapid-keys.yaml"
			if got := envValue(c, "TIERPUSH_VAPID_KEYS"); got != file {
				t.Errorf("TIERPUSH_VAPID_KEYS = %q, want %s", got, file)
			}
			var mount *corev1.VolumeMount
			for i := range c.VolumeMounts {
				if c.VolumeMounts[i].MountPath == filepath.Dir(file) {
					mount = &c.VolumeMounts[i]
				}
			}
			if mount == nil || !mount.ReadOnly {
				t.Fatalf("no read-only mount at %s: %v", filepath.Dir(file), mountPaths(c.VolumeMounts))
			}
			var vol *corev1.Volume
			for i := range pod.Volumes {
				if pod.Volumes[i].Name == mount.Name {
					vol = &pod.Volumes[i]
				}
			}
			secret, key := r.valString("vapidKeys.existingSecret"), r.valString("vapidKeys.key")
			if vol == nil || vol.Secret == nil || vol.Secret.SecretName != secret ||
				len(vol.Secret.Items) != 1 || vol.Secret.Items[0].Key != key || vol.Secret.Items[0].Path != filepath.Base(file) {
				t.Errorf("volume %s is not key %s of Secret %s at %s: %+v", mount.Name, key, secret, filepath.Base(file), vol)
			}
			for _, env := range []string{"VAPID_PUBLIC_KEY", "VAPID_PRIVATE_KEY", "VAPID_SUBJECT"} {
				e := envVar(c, env)
				if e == nil || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Optional == nil || !*e.ValueFrom.SecretKeyRef.Optional {
					t.Errorf("%s is not optional: pods would not start without a default identity", env)
				}
			}
			if r.secret != nil && r.valString("secrets.vapidPrivateKey") == "" {
				if _, ok := r.secret.Data["VAPID_PRIVATE_KEY"]; ok {
					t.Error("the chart's Secret holds an empty default identity")
				}
			}
			checkDeployment(t, r)
			checkProcessorConfig(t, r)
		})
	}

	// The processor accepts the keys file alone, no default identity.
	r := renderAndDecode(t, ch, valueSet{name: "no default", inline: "secrets: {hmacKey: " + hmac + "}\nvapidKeys: {existingSecret: apps}\n"})
	c := r.dep.Spec.Template.Spec.Containers[0]
	env := containerEnv(t, r, r.dep.Spec.Template.Spec, c)
	for _, k := range vapidEnv {
		delete(env, k)
	}
	dir := t.TempDir()
	cfg, content := filepath.Join(dir, "processor.yaml"), r.cm.Data["processor.yaml"]
	if !configSectionsRead() {
		content = withoutSections(t, content, "tiers", "pacing")
	}
	if err := os.WriteFile(cfg, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	checkAccepted(t, "keys file without a default identity", []string{"run", "--config=" + cfg}, env)

	// Without a default identity the HMAC key is still required, and a
	// default identity must be whole.
	for name, inline := range map[string]string{
		"no hmac key":   "vapidKeys: {existingSecret: apps}\n",
		"half identity": "secrets: {hmacKey: " + hmac + ", vapidPublicKey: " + testVAPIDPublic + "}\nvapidKeys: {existingSecret: apps}\n",
	} {
		vals, err := common.ReadValues([]byte(inline))
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = render(ch, vals)
		want := map[string]string{"no hmac key": "secrets.hmacKey", "half identity": "secrets.vapidPrivateKey"}[name]
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error naming %s", name, err, want)
		}
	}
	if _, _, err := render(ch, map[string]any{"vapidKeys": map[string]any{"existingSecret": "Not A Name"}}); err == nil {
		t.Error("vapidKeys.existingSecret \"Not A Name\" rendered")
	}
}
