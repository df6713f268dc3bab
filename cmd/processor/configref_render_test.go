package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"

	"github.com/tierpush/tierpush/internal/netguard"
)

// The generated parts of docs/configuration.md, rendered from the flag
// sets themselves: processor run's (FlagReference) and each tool's, as
// the tool declares them.

// toolCommands are the commands whose flags the reference lists besides
// processor run's, in its order. Every command of commands is one of
// them, or run, or version (which has no flags): TestToolCommandsListed.
var toolCommands = [][]string{
	{"broker"}, {"vapid"}, {"send"}, {"topics", "ensure"}, {"dlq", "list"}, {"dlq", "redrive"},
	{"pushsim"}, {"status"}, {"demo"},
}

// configReferenceParts are the generated parts by marker name.
func configReferenceParts() (map[string]string, error) {
	run := FlagReference()
	tools, err := renderToolFlags(run)
	if err != nil {
		return nil, err
	}
	return map[string]string{
		"run-flags":          renderRunFlags(run),
		"deprecated-flags":   renderDeprecatedFlags(run),
		"tool-flags":         tools,
		"default-push-hosts": codeList(netguard.DefaultPushHosts()) + ".",
	}, nil
}

// renderRunFlags is a table per group of run --help, in its order: each
// current flag with its variable, config key(s), default and meaning.
func renderRunFlags(docs []FlagDoc) string {
	var b strings.Builder
	for _, g := range append(slices.Clone(runGroups), struct{ name, about string }{"Other", ""}) {
		var rows []FlagDoc
		for _, d := range docs {
			group := d.Group
			if group == "" {
				group = "Other" // TestFlagGroups fails first
			}
			if group == g.name && d.Deprecated == "" {
				rows = append(rows, d)
			}
		}
		if len(rows) == 0 {
			continue
		}
		fmt.Fprintf(&b, "### %s\n\n", g.name)
		if g.about != "" {
			fmt.Fprintf(&b, "%s.\n\n", mdText(strings.ToUpper(g.about[:1])+g.about[1:]))
		}
		b.WriteString("| flag | variable | config key | default | meaning |\n|---|---|---|---|---|\n")
		for _, d := range rows {
			keys := "—"
			switch {
			case d.Section != "":
				keys = code(d.Section) + ", " + code(d.ConfigKey)
			case d.ConfigKey != "":
				keys = code(d.ConfigKey)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", flagCell(d), code(d.Env), keys, defaultCell(d), mdText(d.Usage))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// renderDeprecatedFlags is one row per reason: the flags it retired.
func renderDeprecatedFlags(docs []FlagDoc) string {
	var whys []string
	byWhy := make(map[string][]string)
	for _, d := range docs {
		if d.Deprecated == "" {
			continue
		}
		why := strings.TrimPrefix(d.Deprecated, "no longer used: ")
		if byWhy[why] == nil {
			whys = append(whys, why)
		}
		byWhy[why] = append(byWhy[why], "--"+d.Name)
	}
	slices.SortFunc(whys, func(a, b string) int { return strings.Compare(byWhy[a][0], byWhy[b][0]) })
	var b strings.Builder
	b.WriteString("| flags | why they are ignored |\n|---|---|\n")
	for _, why := range whys {
		fmt.Fprintf(&b, "| %s | %s |\n", codeList(byWhy[why]), mdText(why))
	}
	return b.String()
}

// renderToolFlags is a table per tool of the flags it has of its own, and
// a line naming those it shares with processor run (same name, meaning and
// default), which run's tables describe.
func renderToolFlags(run []FlagDoc) (string, error) {
	byName := make(map[string]FlagDoc)
	for _, d := range run {
		byName[d.Name] = d
	}
	var b strings.Builder
	for _, path := range toolCommands {
		fs, notFromFile, err := toolFlagSet(path)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "### `processor %s`\n\n", strings.Join(path, " "))
		shared := make(map[string][]string) // by run's group
		var rows strings.Builder
		fs.VisitAll(func(f *flag.Flag) {
			typ, usage := flag.UnquoteUsage(f)
			if r, ok := byName[f.Name]; ok && r.Usage == usage && r.Default == f.DefValue && !slices.Contains(notFromFile, f.Name) {
				shared[r.Group] = append(shared[r.Group], "--"+f.Name)
				return
			}
			d := FlagDoc{Name: f.Name, Type: typ, Default: f.DefValue, Usage: usage}
			meaning := mdText(usage)
			if slices.Contains(notFromFile, f.Name) {
				meaning += fmt.Sprintf(" (not read from `--config`, whose `%s:` is the processor's)", f.Name)
			}
			fmt.Fprintf(&rows, "| %s | %s | %s |\n", flagCell(d), defaultCell(d), meaning)
		})
		if rows.Len() > 0 {
			b.WriteString("| flag | default | meaning |\n|---|---|---|\n")
			b.WriteString(rows.String())
			b.WriteString("\n")
		}
		var also []string
		for _, g := range runGroups {
			if names := shared[g.name]; len(names) > 0 {
				also = append(also, fmt.Sprintf("[%s](#%s) %s", g.name, strings.ToLower(g.name), codeList(names)))
			}
		}
		if len(also) > 0 {
			fmt.Fprintf(&b, "Also as in `processor run`: %s.\n\n", strings.Join(also, "; "))
		}
	}
	return b.String(), nil
}

// flagSetCapture is the stderr of a tool asked for --help: parseFlags
// hands it the flag set instead of printing the usage.
type flagSetCapture struct {
	fs          *flag.FlagSet
	notFromFile []string
}

var _ flagSetWriter = (*flagSetCapture)(nil)

func (c *flagSetCapture) Write(p []byte) (int, error) { return len(p), nil }

func (c *flagSetCapture) takeFlagSet(fs *flag.FlagSet, notFromFile []string) {
	c.fs, c.notFromFile = fs, notFromFile
}

// toolFlagSet runs `processor <path> --help` and returns the flag set the
// command parsed.
func toolFlagSet(path []string) (*flag.FlagSet, []string, error) {
	cmd, ok := commands[path[0]]
	if !ok {
		return nil, nil, fmt.Errorf("processor %s: no such command", path[0])
	}
	var c flagSetCapture
	err := cmd(context.Background(), append(slices.Clone(path[1:]), "--help"), io.Discard, &c)
	if !errors.Is(err, flag.ErrHelp) || c.fs == nil {
		return nil, nil, fmt.Errorf("processor %s --help: %v, and no flag set reached parseFlags", strings.Join(path, " "), err)
	}
	return c.fs, c.notFromFile, nil
}

// flagCell is the flag and the type of its value, as --help writes them.
func flagCell(d FlagDoc) string {
	if d.Type == "" || d.Type == "value" { // a boolean, or a type of its own
		return code("--" + d.Name)
	}
	return code("--"+d.Name) + " " + d.Type
}

// defaultCell is the default as the flag would take it; empty when there
// is none.
func defaultCell(d FlagDoc) string {
	v := d.Default
	if d.Type == "duration" {
		// 24h0m0s reads as 24h, 2m0s as 2m.
		if strings.HasSuffix(v, "m0s") {
			v = strings.TrimSuffix(v, "0s")
		}
		if strings.HasSuffix(v, "h0m") {
			v = strings.TrimSuffix(v, "0m")
		}
	}
	if v == "" || v == "[]" {
		return ""
	}
	return code(v)
}

func code(s string) string { return "`" + s + "`" }

func codeList(items []string) string {
	out := make([]string, len(items))
	for i, s := range items {
		out[i] = code(s)
	}
	return strings.Join(out, ", ")
}

// flagToken is a flag named in a usage text: --pacing-halt-rate,
// --kafka-tls-*.
var flagToken = regexp.MustCompile(`--[a-z][a-z0-9-]*\*?`)

// mdText is usage text for a Markdown table cell: the flags it names as
// code, and what Markdown would take for a table border, emphasis or a
// tag escaped.
func mdText(s string) string {
	escape := strings.NewReplacer(`\`, `\\`, "|", `\|`, "*", `\*`, "<", "&lt;", "\n", " ")
	var b strings.Builder
	last := 0
	for _, m := range flagToken.FindAllStringIndex(s, -1) {
		b.WriteString(escape.Replace(s[last:m[0]]))
		b.WriteString(code(s[m[0]:m[1]]))
		last = m[1]
	}
	b.WriteString(escape.Replace(s[last:]))
	return b.String()
}
