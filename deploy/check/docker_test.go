package check

import (
	"bufio"
	"debug/elf"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// dockerInstruction is one instruction of a Dockerfile, continuation lines
// joined.
type dockerInstruction struct {
	cmd  string // upper case: FROM, RUN, …
	args string
}

// dockerStages parses the Dockerfile into stages of instructions.
func dockerStages(t *testing.T) [][]dockerInstruction {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		stages [][]dockerInstruction
		line   string
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasSuffix(l, "\\") {
			line += strings.TrimSuffix(l, "\\") + " "
			continue
		}
		line += l
		cmd, args, _ := strings.Cut(line, " ")
		line = ""
		in := dockerInstruction{strings.ToUpper(cmd), strings.TrimSpace(args)}
		if in.cmd == "FROM" {
			stages = append(stages, nil)
		}
		if len(stages) == 0 {
			if in.cmd != "ARG" {
				t.Fatalf("Dockerfile: %s before the first FROM", in.cmd)
			}
			continue
		}
		stages[len(stages)-1] = append(stages[len(stages)-1], in)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(stages) < 2 {
		t.Fatalf("Dockerfile has %d stages, want a multi-stage build", len(stages))
	}
	return stages
}

// dockerfileEnv is the ENV of the final image.
func dockerfileEnv(t *testing.T) map[string]string {
	t.Helper()
	stages := dockerStages(t)
	env := map[string]string{}
	for _, in := range stages[len(stages)-1] {
		if in.cmd != "ENV" {
			continue
		}
		for _, kv := range strings.Fields(in.args) {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				t.Fatalf("Dockerfile ENV %q: use the key=value form", in.args)
			}
			env[k] = strings.Trim(v, `"`)
		}
	}
	return env
}

func TestDockerfile(t *testing.T) {
	stages := dockerStages(t)
	build, final := stages[0], stages[len(stages)-1]

	// Build stage: the Go of go.mod, a static pure-Go binary.
	gomod, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	from := build[0].args
	if goVersion == nil || !regexp.MustCompile(`\bgolang:`+regexp.QuoteMeta(string(goVersion[1]))+`[.-]`).MatchString(from) {
		t.Errorf("build stage %q does not use the Go of go.mod (%s)", from, goVersion)
	}
	var buildRun string
	for _, in := range build {
		if in.cmd == "RUN" && strings.Contains(in.args, "go build") {
			buildRun = in.args
		}
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "./cmd/processor"} {
		if !strings.Contains(buildRun, want) {
			t.Errorf("go build step %q lacks %s", buildRun, want)
		}
	}

	// Final stage: distroless static, non-root, the binary as entrypoint.
	base := final[0].args
	if !regexp.MustCompile(`^gcr\.io/distroless/static-debian\d+:nonroot(@sha256:[0-9a-f]{64})?$`).MatchString(base) {
		t.Errorf("final stage FROM %q, want gcr.io/distroless/static-debianNN:nonroot", base)
	}
	var user, entrypoint, copied string
	for _, in := range final[1:] {
		switch in.cmd {
		case "USER":
			user = in.args
		case "ENTRYPOINT":
			entrypoint = in.args
		case "COPY":
			f := strings.Fields(in.args)
			copied = f[len(f)-1]
		case "RUN", "ADD":
			t.Errorf("final stage runs %s %q: distroless has no shell", in.cmd, in.args)
		}
	}
	uid, _, _ := strings.Cut(user, ":")
	if uid == "" || uid == "0" || uid == "root" || !regexp.MustCompile(`^\d+$`).MatchString(uid) {
		t.Errorf("final stage USER %q, want a numeric non-root uid (Kubernetes runAsNonRoot checks it)", user)
	}
	if entrypoint != `["`+copied+`"]` {
		t.Errorf("ENTRYPOINT %s, want the exec form of the copied binary %s", entrypoint, copied)
	}

	// OCI annotations, the version the one stamped into the binary.
	labels := map[string]string{}
	for _, in := range final {
		if in.cmd != "LABEL" {
			continue
		}
		for _, m := range regexp.MustCompile(`([a-z.]+)="([^"]*)"`).FindAllStringSubmatch(in.args, -1) {
			labels[m[1]] = m[2]
		}
	}
	for _, k := range []string{"title", "description", "version", "revision", "created", "source"} {
		if _, ok := labels["org.opencontainers.image."+k]; !ok {
			t.Errorf("final stage lacks LABEL org.opencontainers.image.%s", k)
		}
	}
	if labels["org.opencontainers.image.version"] != "${VERSION}" || !strings.Contains(buildRun, "-X main.version=${VERSION}") {
		t.Errorf("the image's version label %q and the binary's -X main.version do not both come from ARG VERSION", labels["org.opencontainers.image.version"])
	}
	if labels["org.opencontainers.image.revision"] != "${REVISION}" {
		t.Errorf("revision label %q, want ${REVISION}", labels["org.opencontainers.image.revision"])
	}
	// The commit processor version and tierpush_build_info show: the
	// build context has no .git for the Go toolchain to stamp it from.
	if !strings.Contains(buildRun, "-X main.commit=${REVISION}") {
		t.Errorf("go build step %q does not stamp -X main.commit=${REVISION}", buildRun)
	}
	buildArgs := ""
	for _, in := range build {
		if in.cmd == "ARG" {
			buildArgs += " " + in.args
		}
	}
	for _, arg := range []string{"VERSION", "REVISION"} {
		if !regexp.MustCompile(`\b` + arg + `\b`).MatchString(buildArgs) {
			t.Errorf("build stage has no ARG %s for -ldflags (ARGs:%s)", arg, buildArgs)
		}
	}

	// Every variable the image sets is one the processor reads.
	checkEnvNames(t, "Dockerfile ENV", []string{"run"}, dockerfileEnv(t))
	exposed := ""
	for _, in := range final {
		if in.cmd == "EXPOSE" {
			exposed = in.args
		}
	}
	if addr := dockerfileEnv(t)["TIERPUSH_HTTP_ADDR"]; !strings.HasSuffix(addr, ":"+exposed) || !strings.HasPrefix(addr, "0.0.0.0:") {
		t.Errorf("image serves HTTP on %q but EXPOSEs %q", addr, exposed)
	}
}

// TestBinaryIsStatic: the binary built as the Dockerfile builds it (CGO
// off) needs no dynamic loader or shared library: distroless/static has none.
func TestBinaryIsStatic(t *testing.T) {
	f, err := elf.Open(processorBin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("processor binary has a %s program header: dynamically linked", p.Type)
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("processor binary needs shared libraries %v (%v)", libs, err)
	}
}

// TestDockerignore: the build context keeps everything the build needs.
func TestDockerignore(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			if strings.HasPrefix(l, "!") {
				t.Fatalf(".dockerignore exception %q: this check does not handle exceptions", l)
			}
			patterns = append(patterns, strings.TrimPrefix(l, "/"))
		}
	}
	ignored := func(rel string) bool {
		for _, p := range patterns {
			base := strings.TrimPrefix(p, "**/")
			for cur := rel; cur != "." && cur != "/"; cur = filepath.Dir(cur) {
				if ok, _ := filepath.Match(p, cur); ok {
					return true
				}
				if base != p {
					if ok, _ := filepath.Match(base, filepath.Base(cur)); ok {
						return true
					}
				}
			}
		}
		return false
	}
	// The main module's Go files outside tests, and go.mod/go.sum.
	needed := []string{"go.mod", "go.sum"}
	err = filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, path)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && rel != "." {
				return filepath.SkipDir // another module
			}
			return nil
		}
		if strings.HasSuffix(rel, ".go") && !strings.HasSuffix(rel, "_test.go") {
			needed = append(needed, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(needed, "cmd/processor/main.go") {
		t.Fatalf("walk found no cmd/processor/main.go: %v", needed)
	}
	for _, rel := range needed {
		if ignored(rel) {
			t.Errorf(".dockerignore excludes %s, which the build needs", rel)
		}
	}
	for _, rel := range []string{".git", "bin", "data", "deploy"} {
		if !ignored(rel) {
			t.Errorf(".dockerignore keeps %s in the build context", rel)
		}
	}
}
