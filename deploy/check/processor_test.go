package check

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// repoRoot is the tierpush repository (the main module), two levels up.
var repoRoot = func() string {
	d, err := filepath.Abs("../..")
	if err != nil {
		panic(err)
	}
	return d
}()

// processorBin is the processor binary built from this checkout once for
// every test; defaultPolicy is the main module's tier policy.
var (
	processorBin  string
	defaultPolicy map[string]struct {
		Steps       []time.Duration `json:"steps"`
		MaxAttempts int             `json:"max_attempts"`
		Weight      int             `json:"weight"`
	}
)

// policyProgram prints the main module's default tier policy. It runs with
// `go run` from the main module's directory, so this module does not depend
// on the main one (whose dependencies change with every feature).
const policyProgram = `package main

import (
	"encoding/json"
	"os"

	"github.com/tierpush/tierpush/tiers"
)

func main() { json.NewEncoder(os.Stdout).Encode(tiers.DefaultPolicy()) }
`

func TestMain(m *testing.M) {
	code, err := setup(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(code)
}

func setup(m *testing.M) (int, error) {
	dir, err := os.MkdirTemp("", "tierpush-deploy-check")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	processorBin = filepath.Join(dir, "processor")
	build := exec.Command("go", "build", "-o", processorBin, "./cmd/processor")
	build.Dir = repoRoot
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("build processor: %v\n%s", err, out)
	}

	prog := filepath.Join(dir, "policy.go")
	if err := os.WriteFile(prog, []byte(policyProgram), 0o644); err != nil {
		return 0, err
	}
	run := exec.Command("go", "run", prog)
	run.Dir = repoRoot
	var stderr bytes.Buffer
	run.Stderr = &stderr
	out, err := run.Output()
	if err != nil {
		return 0, fmt.Errorf("print the default tier policy: %v\n%s", err, &stderr)
	}
	if err := json.Unmarshal(out, &defaultPolicy); err != nil || len(defaultPolicy) != 3 {
		return 0, fmt.Errorf("decode the default tier policy %q: %v", out, err)
	}
	return m.Run(), nil
}

// commandFlags returns the flags a subcommand of the processor accepts,
// with their defaults as its -h output shows them ("" when none).
var (
	flagStart    = regexp.MustCompile(`(?m)^  --?([a-z0-9][a-z0-9-]*)\b`)
	flagDefault  = regexp.MustCompile(`(?m)\(default (.*)\)$`)
	flagsByCmd   = map[string]map[string]string{}
	flagsByCmdMu sync.Mutex
)

func commandFlags(t *testing.T, command ...string) map[string]string {
	t.Helper()
	key := strings.Join(command, " ")
	flagsByCmdMu.Lock()
	defer flagsByCmdMu.Unlock()
	if f, ok := flagsByCmd[key]; ok {
		return f
	}
	cmd := exec.Command(processorBin, append(slices.Clone(command), "-h")...)
	cmd.Env = []string{}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("processor %s -h: %v\n%s", key, err, out)
	}
	flags := map[string]string{}
	idx := flagStart.FindAllStringSubmatchIndex(string(out), -1)
	for i, m := range idx {
		end := len(out)
		if i+1 < len(idx) {
			end = idx[i+1][0]
		}
		name := string(out[m[2]:m[3]])
		def := ""
		if d := flagDefault.FindStringSubmatch(strings.TrimSpace(string(out[m[0]:end]))); d != nil {
			def = d[1]
			if u, err := strconv.Unquote(def); err == nil {
				def = u
			}
		}
		flags[name] = def
	}
	if len(flags) < 3 {
		t.Fatalf("processor %s -h lists only %v:\n%s", key, flags, out)
	}
	flagsByCmd[key] = flags
	return flags
}

// subcommand names the processor subcommand that args (a container's
// command after the binary) run, and the arguments after it.
func subcommand(args []string) (name []string, rest []string) {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return []string{"run"}, args
	}
	if args[0] == "topics" && len(args) > 1 {
		return args[:2], args[2:]
	}
	return args[:1], args[1:]
}

// envName is the environment variable of a flag: TIERPUSH_<FLAG_UPPER_SNAKE>.
func envName(flag string) string {
	return "TIERPUSH_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// vapidEnv are the VAPID_* variables `processor run` reads besides its flags.
var vapidEnv = []string{"VAPID_PUBLIC_KEY", "VAPID_PRIVATE_KEY", "VAPID_SUBJECT"}

// otelEnv are the standard OpenTelemetry SDK environment variables
// (opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables,
// and the OTLP exporter's).
var otelEnv = []string{
	"OTEL_SDK_DISABLED", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_SERVICE_NAME", "OTEL_LOG_LEVEL", "OTEL_PROPAGATORS",
	"OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG",
	"OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_LOGS_EXPORTER",
	"OTEL_BSP_SCHEDULE_DELAY", "OTEL_BSP_EXPORT_TIMEOUT", "OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
	"OTEL_METRIC_EXPORT_INTERVAL", "OTEL_METRIC_EXPORT_TIMEOUT",
	"OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_ATTRIBUTE_COUNT_LIMIT",
	"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
	"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL",
	"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_COMPRESSION",
	"OTEL_EXPORTER_OTLP_INSECURE", "OTEL_EXPORTER_OTLP_CERTIFICATE",
	"OTEL_EXPORTER_OTLP_CLIENT_KEY", "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
}

// goRuntimeEnv are variables the Go runtime reads.
var goRuntimeEnv = []string{"GOMEMLIMIT", "GOMAXPROCS", "GOGC", "GODEBUG", "GOTRACEBACK"}

// checkEnvNames reports every variable in env that the processor
// subcommand does not read: TIERPUSH_* must name one of its flags, VAPID_*
// only `run` reads, OTEL_* must be a standard SDK variable.
func checkEnvNames(t *testing.T, where string, command []string, env map[string]string) {
	t.Helper()
	flags := commandFlags(t, command...)
	isRun := slices.Equal(command, []string{"run"})
	for name, value := range env {
		switch {
		case strings.HasPrefix(name, "TIERPUSH_"):
			if !slices.ContainsFunc(slices.Collect(maps.Keys(flags)), func(f string) bool { return envName(f) == name }) {
				t.Errorf("%s: %s is no flag of processor %s", where, name, strings.Join(command, " "))
			}
		case strings.HasPrefix(name, "VAPID_"):
			if !isRun || !slices.Contains(vapidEnv, name) {
				t.Errorf("%s: processor %s does not read %s", where, strings.Join(command, " "), name)
			}
		case strings.HasPrefix(name, "OTEL_"):
			if !slices.Contains(otelEnv, name) {
				t.Errorf("%s: %s is not a standard OpenTelemetry variable", where, name)
			}
			checkOTelValue(t, where, name, value)
		case slices.Contains(goRuntimeEnv, name):
		default:
			t.Errorf("%s: the processor reads no variable %s", where, name)
		}
	}
}

func checkOTelValue(t *testing.T, where, name, value string) {
	t.Helper()
	allowed := map[string][]string{
		"OTEL_EXPORTER_OTLP_PROTOCOL": {"grpc", "http/protobuf", "http/json"},
		"OTEL_TRACES_SAMPLER":         {"always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio"},
		"OTEL_TRACES_EXPORTER":        {"otlp", "console", "none"},
		"OTEL_METRICS_EXPORTER":       {"otlp", "prometheus", "console", "none"},
		"OTEL_LOGS_EXPORTER":          {"otlp", "console", "none"},
	}
	if vs, ok := allowed[name]; ok && !slices.Contains(vs, value) {
		t.Errorf("%s: %s=%q, want one of %v", where, name, value, vs)
	}
	if name == "OTEL_RESOURCE_ATTRIBUTES" {
		for _, kv := range strings.Split(value, ",") {
			if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
				t.Errorf("%s: OTEL_RESOURCE_ATTRIBUTES element %q is not key=value", where, kv)
			}
		}
	}
}

// sentinels are an argument per subcommand that fails its configuration
// check after every flag, variable and config file has been read, and
// before anything touches the network. Running a container's command with
// its environment plus the sentinel must fail on the sentinel alone: any
// other message means a value the processor rejects.
var sentinels = map[string][2]string{
	"run":           {"--max-in-flight=0", "--max-in-flight"},
	"pushsim":       {"--verify-every=0", "--verify-every"},
	"demo":          {"--rate=0", "--rate"},
	"topics ensure": {"--retention=1m", "--retention"},
}

// acceptedErr runs the processor with args and env plus the sentinel of its
// subcommand; it returns an error unless the sentinel is the only complaint.
func acceptedErr(args []string, env map[string]string) error {
	command, _ := subcommand(args)
	s, ok := sentinels[strings.Join(command, " ")]
	if !ok {
		return fmt.Errorf("no sentinel for processor %s", strings.Join(command, " "))
	}
	full := append(slices.Clone(args), s[0])
	cmd := exec.Command(processorBin, full...)
	cmd.Env = []string{"HOME=" + os.TempDir()}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		return fmt.Errorf("processor %s still runs: it did not stop at its configuration check; stderr:\n%s", strings.Join(full, " "), &stderr)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		return fmt.Errorf("processor %s: %v, want exit code 2; stderr:\n%s", strings.Join(full, " "), err, &stderr)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], s[1]) {
		return fmt.Errorf("processor %s rejects more than the sentinel %s:\n%s", strings.Join(full, " "), s[0], &stderr)
	}
	return nil
}

// checkAccepted fails t unless the processor accepts every value of args
// and env (see sentinels).
func checkAccepted(t *testing.T, where string, args []string, env map[string]string) {
	t.Helper()
	if err := acceptedErr(args, env); err != nil {
		t.Errorf("%s: %v", where, err)
	}
}

// The sentinel check must catch a bad value, or every use of it is void.
func TestSentinelCheckCatchesBadValues(t *testing.T) {
	tests := []struct {
		args     []string
		good     map[string]string
		badKey   string
		badValue string
	}{
		{[]string{"run"}, map[string]string{"TIERPUSH_BROKERS": "kafka:9092", "TIERPUSH_HMAC_KEY": strings.Repeat("k", 32), "VAPID_PUBLIC_KEY": testVAPIDPublic, "VAPID_PRIVATE_KEY": testVAPIDPrivate, "VAPID_SUBJECT": "mailto:ci@tierpush.invalid"}, "TIERPUSH_PARTITIONS", "many"},
		{[]string{"pushsim"}, map[string]string{"TIERPUSH_ADDR": "0.0.0.0:8443"}, "TIERPUSH_FAIL_503", "2"},
		{[]string{"demo"}, map[string]string{"TIERPUSH_SIM": "http://pushsim:8443"}, "TIERPUSH_SIM", "pushsim:8443"},
		{[]string{"topics", "ensure"}, map[string]string{"TIERPUSH_PARTITIONS": "3"}, "TIERPUSH_DLQ_RETENTION", "1m"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			if err := acceptedErr(tt.args, tt.good); err != nil {
				t.Fatalf("good values rejected: %v", err)
			}
			bad := maps.Clone(tt.good)
			bad[tt.badKey] = tt.badValue
			if err := acceptedErr(tt.args, bad); err == nil {
				t.Errorf("%s=%s passed the sentinel check", tt.badKey, tt.badValue)
			}
		})
	}
}

// A valid VAPID key pair for configurations whose keys come from elsewhere
// (an existing Secret). Generated with `processor vapid`; used by tests only.
const (
	testVAPIDPublic  = "BCRsGZXmw6KdpfvvteFftR3L24_Gm5OUpKUiA-rZQROLAbTWD5UYAV7vYUnysUslE2NsrNTn6NQby8Mu-383hJo"
	testVAPIDPrivate = "8-ZscOkNbmDwuoyVR5kl11Ab2AmEtCYUtgf1rvgkUFs"
)
