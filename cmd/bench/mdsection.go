package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
)

// errNoChange is writeSection's answer to a nil body: the markers are
// there, and nothing was written.
var errNoChange = errors.New("nothing to write")

// writeSection replaces the text between the markers
//
//	<!-- bench:NAME -->
//	<!-- /bench:NAME -->
//
// of the Markdown file at path with body: how a bench run keeps its section
// of docs/benchmarks.md current. The markers must be there, once each, so a
// run never rewrites text a person wrote.
func writeSection(path, name string, body []byte) error {
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	begin, end := []byte("<!-- bench:"+name+" -->\n"), []byte("<!-- /bench:"+name+" -->")
	i, j := bytes.Index(doc, begin), bytes.Index(doc, end)
	if i < 0 || j < i || bytes.Count(doc, begin) != 1 || bytes.Count(doc, end) != 1 {
		return fmt.Errorf("--md %s: want one %q and one %q after it", path, bytes.TrimSpace(begin), end)
	}
	if body == nil {
		return errNoChange
	}
	var out bytes.Buffer
	out.Write(doc[:i+len(begin)])
	out.Write(body)
	if len(body) > 0 && body[len(body)-1] != '\n' {
		out.WriteByte('\n')
	}
	out.Write(doc[j:])
	return os.WriteFile(path, out.Bytes(), 0o644)
}
