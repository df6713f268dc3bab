package check

import (
	"encoding/base64"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"sigs.k8s.io/yaml"
)

var composeFile = filepath.Join(repoRoot, "docker-compose.yml")

// loadCompose loads docker-compose.yml as `docker compose` does (schema
// validation, interpolation, env_file resolution) with the given profiles.
func loadCompose(t *testing.T, profiles ...string) *types.Project {
	t.Helper()
	p, err := loader.LoadWithContext(t.Context(), types.ConfigDetails{
		WorkingDir:  repoRoot,
		ConfigFiles: []types.ConfigFile{{Filename: composeFile}},
		Environment: map[string]string{}, // no variable from the test's environment leaks in
	}, func(o *loader.Options) {
		o.SetProjectName("tierpush", true)
		o.Profiles = profiles
	})
	if err != nil {
		t.Fatalf("load docker-compose.yml: %v", err)
	}
	return p
}

func TestComposeTopLevel(t *testing.T) {
	raw, err := os.ReadFile(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]any
	if err := yaml.UnmarshalStrict(raw, &top); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	for _, k := range []string{"name", "version"} {
		if _, ok := top[k]; ok {
			t.Errorf("docker-compose.yml has a top-level %q key", k)
		}
	}

	all := loadCompose(t, "*")
	want := []string{"demo", "jaeger", "kafka", "processor", "pushsim", "topics"}
	if got := slices.Sorted(maps.Keys(all.Services)); !slices.Equal(got, want) {
		t.Errorf("services %v, want %v", got, want)
	}
	// The demo workload runs only under its profile; everything else always.
	plain := loadCompose(t)
	if _, ok := plain.Services["demo"]; ok {
		t.Error("demo runs without --profile demo")
	}
	if _, ok := plain.DisabledServices["demo"]; !ok {
		t.Error("demo is not a profile-gated service")
	}
	for name, s := range all.Services {
		if wantProfiles := map[bool][]string{true: {"demo"}, false: nil}[name == "demo"]; !slices.Equal(s.Profiles, wantProfiles) {
			t.Errorf("%s profiles %v, want %v", name, s.Profiles, wantProfiles)
		}
	}
}

func TestComposeImages(t *testing.T) {
	p := loadCompose(t, "*")
	pinned := map[string]*regexp.Regexp{
		"kafka":  regexp.MustCompile(`^apache/kafka:4\.\d+\.\d+$`),
		"jaeger": regexp.MustCompile(`^jaegertracing/jaeger:2\.\d+\.\d+$`),
	}
	for name, re := range pinned {
		if img := p.Services[name].Image; !re.MatchString(img) {
			t.Errorf("%s image %q, want a pinned %s", name, img, re)
		}
	}
	// One service builds the processor image: Compose builds with Bake, in
	// parallel, and two builds exporting the same tag collide ("image
	// already exists") on a fresh machine.
	var builders []string
	for name, s := range p.Services {
		if s.Build != nil {
			builders = append(builders, name)
		}
	}
	if !slices.Equal(builders, []string{"processor"}) {
		t.Fatalf("services %v build an image, want the processor alone", builders)
	}
	b := p.Services["processor"].Build
	df := b.Dockerfile
	if df == "" {
		df = "Dockerfile"
	}
	if filepath.Clean(b.Context) != repoRoot || filepath.Clean(filepath.Join(repoRoot, df)) != filepath.Join(repoRoot, "Dockerfile") {
		t.Errorf("the processor is not built from the repository's Dockerfile: %+v", b)
	}
	if img := p.Services["processor"].Image; img == "" || strings.HasSuffix(img, ":latest") || !strings.Contains(img, ":") {
		t.Errorf("the built image is named %q, want an explicit local tag the other services can name", img)
	}
	for _, name := range processorServices(p) {
		if pp := p.Services[name].PullPolicy; pp == "always" {
			t.Errorf("%s pulls the locally built image", name)
		}
	}
	if n := len(processorServices(p)); n != 4 {
		t.Errorf("%d services run the processor image, want topics, pushsim, processor and demo", n)
	}
}

// processorServices are the services that run the processor image: the
// one service that builds it, and those naming the same image.
func processorServices(p *types.Project) []string {
	built := ""
	for _, s := range p.Services {
		if s.Build != nil {
			built = s.Image
		}
	}
	var names []string
	for name, s := range p.Services {
		if built != "" && s.Image == built {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// serviceEnv is a service's resolved environment (env_file included).
func serviceEnv(s types.ServiceConfig) map[string]string {
	env := map[string]string{}
	for k, v := range s.Environment {
		if v != nil {
			env[k] = *v
		}
	}
	return env
}

// effective returns the value of flag for a processor service: its last
// --flag argument, else its TIERPUSH_ variable, else the image's ENV, else
// the flag's default.
func effective(t *testing.T, s types.ServiceConfig, flag string) string {
	t.Helper()
	command, rest := subcommand(s.Command)
	v, ok := "", false
	for i, a := range rest {
		switch {
		case strings.HasPrefix(a, "--"+flag+"="):
			v, ok = strings.TrimPrefix(a, "--"+flag+"="), true
		case a == "--"+flag && i+1 < len(rest):
			v, ok = rest[i+1], true
		}
	}
	if ok {
		return v
	}
	if v, ok := serviceEnv(s)[envName(flag)]; ok {
		return v
	}
	if v, ok := dockerfileEnv(t)[envName(flag)]; ok {
		if _, isFlag := commandFlags(t, command...)[flag]; isFlag {
			return v
		}
	}
	return commandFlags(t, command...)[flag]
}

// TestComposeProcessorServices: every processor service's command flags
// and variables are the processor's, and the processor accepts their values.
func TestComposeProcessorServices(t *testing.T) {
	p := loadCompose(t, "*")
	for _, name := range processorServices(p) {
		t.Run(name, func(t *testing.T) {
			s := p.Services[name]
			if len(s.Entrypoint) > 0 {
				t.Errorf("entrypoint %q replaces the processor binary", s.Entrypoint)
			}
			command, rest := subcommand(s.Command)
			flags := commandFlags(t, command...)
			for _, a := range rest {
				if !strings.HasPrefix(a, "--") {
					continue // a value of the flag before
				}
				f, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
				if _, ok := flags[f]; !ok {
					t.Errorf("argument %q is no flag of processor %s", a, strings.Join(command, " "))
				}
			}
			env := serviceEnv(s)
			checkEnvNames(t, name, command, env)
			checkAccepted(t, name, s.Command, env)
		})
	}
}

// listenPorts is what each service listens on, from its own configuration.
func listenPorts(t *testing.T, p *types.Project) map[string]map[uint32]string {
	t.Helper()
	ports := map[string]map[uint32]string{}
	add := func(svc, addr string) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Errorf("%s listens on %q: %v", svc, addr, err)
			return
		}
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			t.Errorf("%s listens on port %q: %v", svc, port, err)
			return
		}
		if ports[svc] == nil {
			ports[svc] = map[uint32]string{}
		}
		ports[svc][uint32(n)] = host
	}
	for _, name := range processorServices(p) {
		s := p.Services[name]
		command, _ := subcommand(s.Command)
		switch strings.Join(command, " ") {
		case "run":
			if a := effective(t, s, "http-addr"); a != "" {
				add(name, a)
			}
		case "pushsim":
			add(name, effective(t, s, "addr"))
		}
	}
	for _, l := range kafkaListeners(t, p, "KAFKA_LISTENERS") {
		add("kafka", l.addr)
	}
	// Jaeger's all-in-one image (cmd/jaeger/Dockerfile): every port on
	// JAEGER_LISTEN_HOST, which the image sets to 0.0.0.0.
	jaegerHost := "0.0.0.0"
	if h, ok := serviceEnv(p.Services["jaeger"])["JAEGER_LISTEN_HOST"]; ok {
		jaegerHost = h
	}
	for _, port := range []int{4317, 4318, 5778, 5779, 9411, 13133, 14250, 14268, 16686} {
		add("jaeger", net.JoinHostPort(jaegerHost, strconv.Itoa(port)))
	}
	return ports
}

func TestComposePorts(t *testing.T) {
	p := loadCompose(t, "*")
	listen := listenPorts(t, p)
	published := map[string][]uint32{}
	for name, s := range p.Services {
		for _, port := range s.Ports {
			published[name] = append(published[name], port.Target)
			if port.Published != strconv.Itoa(int(port.Target)) {
				t.Errorf("%s publishes container port %d as %s; the README promises the same port", name, port.Target, port.Published)
			}
			if port.Protocol != "" && port.Protocol != "tcp" {
				t.Errorf("%s publishes %d/%s", name, port.Target, port.Protocol)
			}
			host, ok := listen[name][port.Target]
			switch {
			case !ok:
				t.Errorf("%s publishes port %d but listens on %v", name, port.Target, slices.Sorted(maps.Keys(listen[name])))
			case host != "" && host != "0.0.0.0" && host != "::":
				t.Errorf("%s publishes port %d but listens on %s only", name, port.Target, host)
			}
		}
		slices.Sort(published[name])
	}
	want := map[string][]uint32{
		"kafka":     {9092},
		"jaeger":    {4317, 4318, 16686},
		"processor": {9464},
		"pushsim":   {8443},
	}
	if !maps.EqualFunc(published, want, slices.Equal) {
		t.Errorf("published ports %v, want %v", published, want)
	}
}

type kafkaListener struct{ name, addr string }

func kafkaListeners(t *testing.T, p *types.Project, key string) []kafkaListener {
	t.Helper()
	v := serviceEnv(p.Services["kafka"])[key]
	var ls []kafkaListener
	for _, l := range strings.Split(v, ",") {
		name, addr, ok := strings.Cut(strings.TrimSpace(l), "://")
		if !ok {
			t.Errorf("kafka %s element %q is not NAME://host:port", key, l)
			continue
		}
		ls = append(ls, kafkaListener{name, addr})
	}
	return ls
}

// TestComposeKafka: the KRaft single node is consistent with itself.
func TestComposeKafka(t *testing.T) {
	p := loadCompose(t, "*")
	k := p.Services["kafka"]
	env := serviceEnv(k)
	for _, key := range []string{"KAFKA_NODE_ID", "KAFKA_PROCESS_ROLES", "KAFKA_LISTENERS", "KAFKA_ADVERTISED_LISTENERS",
		"KAFKA_CONTROLLER_LISTENER_NAMES", "KAFKA_CONTROLLER_QUORUM_VOTERS", "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"} {
		if env[key] == "" {
			t.Errorf("kafka lacks %s", key)
		}
	}
	roles := strings.Split(env["KAFKA_PROCESS_ROLES"], ",")
	slices.Sort(roles)
	if !slices.Equal(roles, []string{"broker", "controller"}) {
		t.Errorf("KAFKA_PROCESS_ROLES %v, want a combined broker,controller node", roles)
	}
	protocols := map[string]string{}
	for _, kv := range strings.Split(env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"], ",") {
		name, proto, _ := strings.Cut(kv, ":")
		protocols[name] = proto
	}
	listeners := map[string]string{}
	for _, l := range kafkaListeners(t, p, "KAFKA_LISTENERS") {
		listeners[l.name] = l.addr
		if protocols[l.name] == "" {
			t.Errorf("listener %s has no security protocol", l.name)
		}
	}
	controller := env["KAFKA_CONTROLLER_LISTENER_NAMES"]
	if _, ok := listeners[controller]; !ok {
		t.Errorf("controller listener %s is not in KAFKA_LISTENERS", controller)
	}
	if ib := env["KAFKA_INTER_BROKER_LISTENER_NAME"]; ib != "" {
		if _, ok := listeners[ib]; !ok || ib == controller {
			t.Errorf("inter-broker listener %s is not a broker listener", ib)
		}
	}
	for _, a := range kafkaListeners(t, p, "KAFKA_ADVERTISED_LISTENERS") {
		if _, ok := listeners[a.name]; !ok || a.name == controller {
			t.Errorf("advertised listener %s is not a broker listener", a.name)
			continue
		}
		_, lport, _ := net.SplitHostPort(listeners[a.name])
		if _, aport, _ := net.SplitHostPort(a.addr); aport != lport {
			t.Errorf("listener %s advertises port %s but listens on %s", a.name, aport, lport)
		}
	}
	// KAFKA_CONTROLLER_QUORUM_VOTERS: id@host:port of this node's controller listener.
	id, hp, _ := strings.Cut(env["KAFKA_CONTROLLER_QUORUM_VOTERS"], "@")
	_, cport, _ := net.SplitHostPort(listeners[controller])
	if host, port, err := net.SplitHostPort(hp); err != nil || id != env["KAFKA_NODE_ID"] || port != cport || (host != k.Hostname && host != "kafka" && host != "localhost") {
		t.Errorf("KAFKA_CONTROLLER_QUORUM_VOTERS %q is not node %s at its controller port %s", env["KAFKA_CONTROLLER_QUORUM_VOTERS"], env["KAFKA_NODE_ID"], cport)
	}
	if id := env["CLUSTER_ID"]; id != "" {
		if b, err := base64.RawURLEncoding.DecodeString(id); err != nil || len(b) != 16 {
			t.Errorf("CLUSTER_ID %q is not a base64url UUID (kafka-storage.sh random-uuid)", id)
		}
	}
	for _, key := range []string{"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR", "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"} {
		if env[key] != "1" {
			t.Errorf("%s=%q on a single node, want 1", key, env[key])
		}
	}
	// The healthcheck asks the broker itself, on one of its listeners.
	hc := k.HealthCheck
	if hc == nil || len(hc.Test) < 2 {
		t.Fatal("kafka has no healthcheck")
	}
	test := strings.Join(hc.Test[1:], " ")
	m := regexp.MustCompile(`/opt/kafka/bin/kafka-broker-api-versions\.sh --bootstrap-server ([^ ]+)`).FindStringSubmatch(test)
	if m == nil {
		t.Fatalf("kafka healthcheck %q does not run kafka-broker-api-versions.sh --bootstrap-server", test)
	}
	_, hport, _ := net.SplitHostPort(m[1])
	found := false
	for name, addr := range listeners {
		if _, port, _ := net.SplitHostPort(addr); port == hport && name != controller {
			found = true
		}
	}
	if !found {
		t.Errorf("kafka healthcheck asks %s, which no broker listener serves", m[1])
	}
}

// TestComposeWiring: what each service addresses is what the addressed
// service serves.
func TestComposeWiring(t *testing.T) {
	p := loadCompose(t, "*")
	listen := listenPorts(t, p)
	advertised := map[string]bool{}
	for _, a := range kafkaListeners(t, p, "KAFKA_ADVERTISED_LISTENERS") {
		advertised[a.addr] = true
	}
	serves := func(hostport string) bool {
		host, port, err := net.SplitHostPort(hostport)
		if err != nil {
			return false
		}
		n, _ := strconv.ParseUint(port, 10, 16)
		_, ok := listen[host][uint32(n)]
		return ok
	}

	proc := p.Services["processor"]
	allowed := strings.Split(effective(t, proc, "allow-insecure-endpoint"), ",")
	for _, a := range allowed {
		if !serves(a) {
			t.Errorf("processor allows insecure endpoint %s, which no service serves", a)
		}
	}

	for _, name := range processorServices(p) {
		s := p.Services[name]
		command, _ := subcommand(s.Command)
		if _, ok := commandFlags(t, command...)["brokers"]; !ok {
			continue
		}
		brokers := effective(t, s, "brokers")
		if brokers == "" {
			t.Errorf("%s has no brokers: it would start the embedded broker or dial 127.0.0.1", name)
		}
		for _, b := range strings.Split(brokers, ",") {
			if !advertised[b] || !serves(b) {
				t.Errorf("%s uses broker %s, which kafka does not advertise and serve (advertised %v)", name, b, slices.Sorted(maps.Keys(advertised)))
			}
		}
		if name != "processor" {
			for _, f := range []string{"topic-prefix", "partitions", "replication-factor", "retention", "dlq-retention"} {
				if _, ok := commandFlags(t, command...)[f]; ok && effective(t, s, f) != effective(t, proc, f) {
					t.Errorf("%s --%s %s differs from the processor's %s: it would report drift or use other topics", name, f, effective(t, s, f), effective(t, proc, f))
				}
			}
		}
	}

	// The demo subscribes at the simulator by the name the processor may
	// reach over http: the simulator mints endpoints under the host the
	// subscriber addressed.
	demo := p.Services["demo"]
	sim, err := url.Parse(effective(t, demo, "sim"))
	if err != nil {
		t.Fatal(err)
	}
	if sim.Scheme != "http" || !serves(sim.Host) || !slices.Contains(allowed, sim.Host) {
		t.Errorf("demo --sim %s: want http:// to a served host:port the processor allows (%v)", sim, allowed)
	}
	if tls := effective(t, p.Services["pushsim"], "tls"); tls == "true" {
		t.Error("pushsim serves TLS but the demo and the processor speak http to it")
	}

	// Traces go to Jaeger's OTLP port for the protocol.
	env := serviceEnv(proc)
	ep, err := url.Parse(env["OTEL_EXPORTER_OTLP_ENDPOINT"])
	if err != nil || ep.Host == "" {
		t.Fatalf("processor OTEL_EXPORTER_OTLP_ENDPOINT %q: %v", env["OTEL_EXPORTER_OTLP_ENDPOINT"], err)
	}
	wantPort := map[string]string{"grpc": "4317", "http/protobuf": "4318", "http/json": "4318", "": "4318"}[env["OTEL_EXPORTER_OTLP_PROTOCOL"]]
	if ep.Hostname() != "jaeger" || ep.Port() != wantPort || !serves(ep.Host) {
		t.Errorf("OTEL_EXPORTER_OTLP_ENDPOINT %s with protocol %q: want jaeger:%s", ep, env["OTEL_EXPORTER_OTLP_PROTOCOL"], wantPort)
	}
	if env["OTEL_SERVICE_NAME"] == "" {
		t.Error("processor has no OTEL_SERVICE_NAME: traces would show unknown_service")
	}
}

// TestComposeStartOrder: the processor and the demo start on a healthy
// Kafka with topics ensured; the processor has time to drain.
func TestComposeStartOrder(t *testing.T) {
	p := loadCompose(t, "*")
	want := map[string]map[string]string{
		"topics":    {"kafka": types.ServiceConditionHealthy},
		"processor": {"kafka": types.ServiceConditionHealthy, "topics": types.ServiceConditionCompletedSuccessfully, "jaeger": types.ServiceConditionStarted},
		"demo":      {"kafka": types.ServiceConditionHealthy, "topics": types.ServiceConditionCompletedSuccessfully, "pushsim": types.ServiceConditionStarted},
	}
	for svc, deps := range want {
		got := p.Services[svc].DependsOn
		for dep, cond := range deps {
			if got[dep].Condition != cond {
				t.Errorf("%s depends on %s with condition %q, want %q", svc, dep, got[dep].Condition, cond)
			}
		}
	}
	if r := p.Services["topics"].Restart; r != "" && r != "no" {
		t.Errorf("topics restart %q: a one-shot job must not restart", r)
	}
	proc := p.Services["processor"]
	drain, err := time.ParseDuration(effective(t, proc, "drain-timeout"))
	if err != nil {
		t.Fatal(err)
	}
	if proc.StopGracePeriod == nil || time.Duration(*proc.StopGracePeriod) <= drain {
		t.Errorf("processor stop_grace_period %v is not above its drain timeout %s", proc.StopGracePeriod, drain)
	}
}

func TestComposeDemoKeysAreLabelled(t *testing.T) {
	p := loadCompose(t, "*")
	for _, name := range processorServices(p) {
		for _, f := range p.Services[name].EnvFiles {
			b, err := os.ReadFile(f.Path)
			if err != nil {
				t.Fatal(err)
			}
			if rel, _ := filepath.Rel(repoRoot, f.Path); !strings.HasPrefix(rel, "deploy/compose/") {
				t.Errorf("%s reads env file %s outside deploy/compose", name, rel)
			}
			if !strings.Contains(string(b), "THROWAWAY") {
				t.Errorf("%s is not labelled as throwaway demo keys", f.Path)
			}
		}
	}
	if n := len(p.Services["processor"].EnvFiles); n != 1 {
		t.Errorf("processor reads %d env files, want the demo identity", n)
	}
}
