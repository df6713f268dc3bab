//go:build tools

// Package lint pins the linters CI runs (make lint-ci): golangci-lint with
// the checks of .golangci.yml, and govulncheck against an offline copy of
// the Go vulnerability database (vulndb).
package lint

import (
	_ "github.com/golangci/golangci-lint/v2/cmd/golangci-lint"
	_ "golang.org/x/vuln/cmd/govulncheck"
)
