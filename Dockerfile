# syntax=docker/dockerfile:1
#
# tierpush processor: one static binary (every subcommand: run, topics ensure,
# pushsim, demo, …) on a distroless base that has no shell and runs as a
# non-root user. Build: docker build -t tierpush/processor .

# The build stage runs on the build machine's platform and cross-compiles
# (pure Go, CGO off), so multi-arch builds need no emulation.
FROM --platform=$BUILDPLATFORM golang:1.26-trixie AS build
ARG TARGETOS TARGETARCH
# What `processor version` and tierpush_build_info show:
#   docker build --build-arg VERSION=v1.2.3 --build-arg REVISION=$(git rev-parse HEAD) .
# The build context has no .git (.dockerignore), so the commit comes from
# REVISION, not from the Go toolchain's VCS stamp.
ARG VERSION=dev
ARG REVISION=unknown
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags="-s -w -X main.version=${VERSION} -X main.commit=${REVISION}" -o /out/processor ./cmd/processor

# static-debian13: CA certificates and tzdata, no libc, no shell.
# nonroot: uid/gid 65532.
FROM gcr.io/distroless/static-debian13:nonroot
# OCI annotations (github.com/opencontainers/image-spec, annotations.md):
#   docker build --build-arg VERSION=v1.2.3 --build-arg REVISION=$(git rev-parse HEAD) \
#     --build-arg CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ) .
ARG VERSION=dev
ARG REVISION=unknown
ARG CREATED
LABEL org.opencontainers.image.title="tierpush processor" \
      org.opencontainers.image.description="Web Push delivery through Kafka: priority tiers, retry ladders, adaptive pacing" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.source="https://github.com/tierpush/tierpush" \
      org.opencontainers.image.url="https://github.com/tierpush/tierpush" \
      org.opencontainers.image.documentation="https://github.com/tierpush/tierpush#readme"
COPY --from=build /out/processor /usr/local/bin/processor
USER 65532:65532
# /metrics, /healthz, /readyz (--http-addr; the image listens on all interfaces).
EXPOSE 9464
ENV TIERPUSH_HTTP_ADDR=0.0.0.0:9464
ENTRYPOINT ["/usr/local/bin/processor"]
CMD ["run"]
