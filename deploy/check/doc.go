// Package check holds the offline checks of tierpush's deployment files:
// the Helm chart (lint, render, strict decoding into Kubernetes API types,
// the values schema, Kafka TLS and SASL in both the processor and the
// topics Job, the alerts' and dashboard's PromQL against the metrics a
// live processor exports), docker-compose.yml (compose-spec loading, every
// variable, flag and port against the real processor binary) and the
// Dockerfile (a static binary, a non-root distroless image, OCI labels).
//
// It is a module of its own so that Helm, client-go, compose-go and
// Prometheus never enter the processor's module graph. It only reads the
// repository and runs the processor binary it builds (once as
// `processor --dev` on loopback, to scrape its /metrics); it needs no
// Docker engine, cluster or network. Run it with `make test-deploy` or
// `go test ./...` here.
package check
