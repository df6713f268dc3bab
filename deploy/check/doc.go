// Package check holds the offline checks of tierpush's deployment files:
// the Helm chart (lint, render, strict decoding into Kubernetes API types,
// the values schema), docker-compose.yml (compose-spec loading, every
// variable, flag and port against the real processor binary) and the
// Dockerfile (a static binary, a non-root distroless image).
//
// It is a module of its own so that Helm, client-go and compose-go never
// enter the processor's module graph. It only reads the repository and runs
// the processor binary it builds; it needs no Docker engine, cluster or
// network. Run it with `make test-deploy` or `go test ./...` here.
package check
