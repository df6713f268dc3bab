package main

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// docs/configuration.md is written by hand around parts generated from the
// flag sets, each between
//
//	<!-- generated:NAME (go generate ./cmd/processor) -->
//	<!-- /generated:NAME -->
//
// TestConfigurationReference regenerates them in memory and fails when
// the file differs; with -update (what go generate runs) it rewrites them.

const (
	configDocPath = "../../docs/configuration.md"
	regenerate    = "go generate ./cmd/processor"
)

var update = flag.Bool("update", false, "rewrite the generated parts of docs/configuration.md from the flags")

// TestConfigurationReference: docs/configuration.md lists every flag as
// the flag sets declare it.
func TestConfigurationReference(t *testing.T) {
	doc, err := os.ReadFile(configDocPath)
	if err != nil {
		t.Fatal(err)
	}
	parts, err := configReferenceParts()
	if err != nil {
		t.Fatal(err)
	}
	want, err := spliceGenerated(string(doc), parts)
	if err != nil {
		t.Fatalf("docs/configuration.md: %v", err)
	}
	if *update {
		if want != string(doc) {
			if err := os.WriteFile(configDocPath, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Log("rewrote docs/configuration.md")
		}
		return
	}
	if want != string(doc) {
		t.Errorf("docs/configuration.md differs from the flags (- the file, + the flags):\n%s\nRegenerate it: %s", lineDiff(string(doc), want), regenerate)
	}
}

// beginMarker and endMarker delimit the generated part name.
func beginMarker(name string) string {
	return "<!-- generated:" + name + " (" + regenerate + ") -->"
}
func endMarker(name string) string { return "<!-- /generated:" + name + " -->" }

// spliceGenerated replaces the text between each part's markers in doc
// and keeps the rest as it is. Each marker must be there once, and no
// marker may name a part there is none of, so a run never rewrites text a
// person wrote nor leaves a stale part.
func spliceGenerated(doc string, parts map[string]string) (string, error) {
	markers := make(map[string]int) // "generated:NAME" and "/generated:NAME", however written
	for _, m := range regexp.MustCompile(`<!-- (/?generated:([a-z-]+))`).FindAllStringSubmatch(doc, -1) {
		if _, ok := parts[m[2]]; !ok {
			return "", fmt.Errorf("marker %q: no such generated part (want one of %s)", m[0], strings.Join(slices.Sorted(maps.Keys(parts)), ", "))
		}
		markers[m[1]]++
	}
	for _, name := range slices.Sorted(maps.Keys(parts)) {
		begin, end := beginMarker(name), endMarker(name)
		i, j := strings.Index(doc, begin), strings.Index(doc, end)
		if i < 0 || j < i || markers["generated:"+name] != 1 || markers["/generated:"+name] != 1 {
			return "", fmt.Errorf("want one %q and one %q after it", begin, end)
		}
		doc = doc[:i+len(begin)] + "\n\n" + strings.TrimSpace(parts[name]) + "\n\n" + doc[j:]
	}
	return doc, nil
}

// TestSpliceGenerated: the text around the markers is kept byte for byte,
// the text between them replaced, and a missing, doubled or unknown
// marker refused.
func TestSpliceGenerated(t *testing.T) {
	parts := map[string]string{"a": "| new a |\n", "b": "new b"}
	doc := "# Title\n\nby hand\n" + beginMarker("a") + "\nold a\n" + endMarker("a") + "\nmiddle *by hand*\n\n" +
		beginMarker("b") + "\n" + endMarker("b") + "\ntail\n"
	want := "# Title\n\nby hand\n" + beginMarker("a") + "\n\n| new a |\n\n" + endMarker("a") + "\nmiddle *by hand*\n\n" +
		beginMarker("b") + "\n\nnew b\n\n" + endMarker("b") + "\ntail\n"
	got, err := spliceGenerated(doc, parts)
	if err != nil || got != want {
		t.Fatalf("spliceGenerated = %q, %v; want %q", got, err, want)
	}
	if again, err := spliceGenerated(got, parts); err != nil || again != got {
		t.Errorf("a second run changed it:\n%s", lineDiff(got, again))
	}
	for name, bad := range map[string]string{
		"no end":      strings.Replace(doc, endMarker("a"), "", 1),
		"no begin":    strings.Replace(doc, beginMarker("b"), "", 1),
		"twice":       doc + beginMarker("a") + "\n" + endMarker("a") + "\n",
		"end first":   strings.Replace(strings.Replace(doc, beginMarker("a"), "X", 1), endMarker("a"), beginMarker("a"), 1) + endMarker("a"),
		"unknown":     doc + beginMarker("c") + "\n" + endMarker("c") + "\n",
		"bare marker": doc + "<!-- generated:a -->\n",
	} {
		if _, err := spliceGenerated(bad, parts); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestConfigurationReferenceComplete: the generated parts name every flag
// of processor run, each with its variable, and every flag of every tool.
func TestConfigurationReferenceComplete(t *testing.T) {
	docs := FlagReference()
	runPart, deprecated := renderRunFlags(docs), renderDeprecatedFlags(docs)
	for _, d := range docs {
		switch {
		case d.Deprecated != "":
			if !strings.Contains(deprecated, "`--"+d.Name+"`") {
				t.Errorf("deprecated --%s missing from the reference", d.Name)
			}
		case strings.Count(runPart, "| `--"+d.Name+"` ") != 1:
			t.Errorf("--%s: want one row in the run tables", d.Name)
		case !strings.Contains(runPart, "| `"+d.Env+"` |"):
			t.Errorf("--%s: its variable %s missing", d.Name, d.Env)
		}
	}
	tools, err := renderToolFlags(docs)
	if err != nil {
		t.Fatal(err)
	}
	sections := strings.Split(tools, "### ")[1:]
	if len(sections) != len(toolCommands) {
		t.Fatalf("%d tool sections, want %d", len(sections), len(toolCommands))
	}
	for i, path := range toolCommands {
		fs, _, err := toolFlagSet(path)
		if err != nil {
			t.Fatal(err)
		}
		fs.VisitAll(func(f *flag.Flag) {
			if !strings.Contains(sections[i], "`--"+f.Name+"`") {
				t.Errorf("processor %s --%s missing from the reference", strings.Join(path, " "), f.Name)
			}
		})
	}
}

// TestToolCommandsListed: the reference covers every command.
func TestToolCommandsListed(t *testing.T) {
	for name := range commands {
		if name == "run" || name == "version" {
			continue
		}
		if !slices.ContainsFunc(toolCommands, func(p []string) bool { return p[0] == name }) {
			t.Errorf("processor %s: not in toolCommands, so docs/configuration.md does not list its flags", name)
		}
	}
}

// TestConfigurationLinks: every link to a section of docs/configuration.md
// from the repository's Markdown, and every one from it to another page's
// section, names a heading that page has.
func TestConfigurationLinks(t *testing.T) {
	root := filepath.Join("..", "..")
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"README.md", "SECURITY.md", "CONTRIBUTING.md"} {
		pages = append(pages, filepath.Join(root, p))
	}
	link := regexp.MustCompile(`\]\(([^)#\s]*)#([^)\s]+)\)`)
	config := filepath.Join(root, "docs", "configuration.md")
	for _, page := range pages {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(text), -1) {
			target := page // #anchor: this page
			if m[1] != "" {
				if strings.Contains(m[1], "://") {
					continue
				}
				target = filepath.Join(filepath.Dir(page), m[1])
			}
			if target != config && page != config {
				continue
			}
			if !slices.Contains(headingAnchors(t, target), m[2]) {
				t.Errorf("%s: link to %s#%s: no such heading there", page, m[1], m[2])
			}
		}
	}
}

// headingAnchors are the anchors GitHub makes of a Markdown page's
// headings (outside code blocks).
func headingAnchors(t *testing.T, path string) []string {
	t.Helper()
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	var anchors []string
	fenced := false
	for _, line := range strings.Split(string(text), "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		if h := strings.TrimLeft(line, "#"); !fenced && len(h) < len(line) && strings.HasPrefix(h, " ") {
			a := drop.ReplaceAllString(strings.ToLower(strings.TrimSpace(h)), "")
			anchors = append(anchors, strings.ReplaceAll(a, " ", "-"))
		}
	}
	return anchors
}

// TestLineDiff: the failure message shows what changed, with context.
func TestLineDiff(t *testing.T) {
	tests := []struct{ a, b, want string }{
		{"a\nb\nc\nd\ne\nf\ng\nh\ni\nj", "a\nb\nC\nd\ne\nf\ng\nh\ni\nj\nk", "  a\n  b\n- c\n+ C\n  d\n  e\n…\n  i\n  j\n+ k"},
		{"x\ny", "x\nz\ny", "  x\n+ z\n  y"},
		{"same", "same", ""},
	}
	for _, tt := range tests {
		if got := lineDiff(tt.a, tt.b); got != tt.want {
			t.Errorf("lineDiff(%q, %q) =\n%s\nwant\n%s", tt.a, tt.b, got, tt.want)
		}
	}
}

// lineDiff is a diff of a and b by lines, "-" for a's, "+" for b's, with
// two lines of context around each change and at most 80 lines in all.
func lineDiff(a, b string) string {
	x, y := strings.Split(a, "\n"), strings.Split(b, "\n")
	// lcs[i][j] is the longest common subsequence of x[i:] and y[j:].
	lcs := make([][]int, len(x)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(y)+1)
	}
	for i := len(x) - 1; i >= 0; i-- {
		for j := len(y) - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	type op struct {
		kind byte // ' ', '-' or '+'
		line string
	}
	var ops []op
	i, j := 0, 0
	for i < len(x) || j < len(y) {
		switch {
		case i < len(x) && j < len(y) && x[i] == y[j]:
			ops = append(ops, op{' ', x[i]})
			i, j = i+1, j+1
		case i < len(x) && (j == len(y) || lcs[i+1][j] >= lcs[i][j+1]):
			ops = append(ops, op{'-', x[i]})
			i++
		default:
			ops = append(ops, op{'+', y[j]})
			j++
		}
	}
	const context, limit = 2, 80
	var out []string
	lastShown := -1
	for k, o := range ops {
		near := false
		for d := max(0, k-context); d <= min(len(ops)-1, k+context); d++ {
			near = near || ops[d].kind != ' '
		}
		if !near {
			continue
		}
		if lastShown >= 0 && k > lastShown+1 {
			out = append(out, "…")
		}
		out = append(out, string(o.kind)+" "+o.line)
		lastShown = k
		if len(out) >= limit {
			out = append(out, "… (more)")
			break
		}
	}
	return strings.Join(out, "\n")
}
