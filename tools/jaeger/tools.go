//go:build tools

// Package jaeger pins the Jaeger v2 all-in-one binary that the end-to-end
// tracing test runs (make jaeger builds it into .cache/jaeger).
package jaeger

import _ "github.com/jaegertracing/jaeger/cmd/jaeger"
