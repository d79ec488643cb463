# syntax=docker/dockerfile:1
#
# billing: one static binary on distroless, running as the nonroot user.
# The SQL migrations are embedded in the binary (go:embed), so nothing but
# /billing is copied into the final image.
#
#   make image                               # billing:<git describe>, version and revision stamped
#   docker build -t billing:dev .            # unstamped: "devel (revision unknown)"
#   docker run --rm billing:dev migrate      # or: run (the default), dlq replay
#
# The image holds the service only: `billing demo` and its test tooling are
# built in by `make demo` (-tags demo), not here.

# Base images are pinned by digest (the tag says what it is, the digest which
# build it is), so a rebuild of the same commit uses the same bases. These
# digests were not resolved against the registries from this repository's
# build machine (it has no registry access): they are the ones public
# Dockerfiles pin for these same tags. Re-resolve before a release and when
# bumping:
#   docker buildx imagetools inspect golang:1.26-bookworm
#   docker buildx imagetools inspect gcr.io/distroless/static-debian12:nonroot
#
# The Go release that compiles is go.mod's toolchain line (go1.27.3), not the
# image's: GOTOOLCHAIN=auto makes the go command fetch it from the Go module
# proxy, checked against the Go checksum database like any module, and the
# first RUN stops the build if another release would compile. No published
# digest of golang:1.27.3-bookworm could be found from the build machine (the
# public Dockerfiles and image listings searched from it pin none for that
# tag); once one is resolved (docker buildx imagetools inspect
# golang:1.27.3-bookworm, its "Digest:" line), FROM golang:1.27.3-bookworm@<it>
# compiles with the image's own Go and fetches nothing.
FROM golang:1.26-bookworm@sha256:a688600ca24f8a4d3ca77f95b0dd40704a9fc787c826660eb7ba0b641b8b175d AS build
ENV GOTOOLCHAIN=auto
WORKDIR /src
# Module download first, so source edits do not invalidate this layer.
COPY go.mod go.sum ./
# kafka-go is replaced by the patched copy in third_party (see its PATCHES.md):
# go mod download reads the replacement's go.mod.
COPY third_party/kafka-go/go.mod third_party/kafka-go/go.sum ./third_party/kafka-go/
# The toolchain lands in the module cache, which the build below mounts too.
RUN --mount=type=cache,target=/go/pkg/mod \
    want=$(awk '$1 == "toolchain" {print $2}' go.mod) && have=$(go env GOVERSION) && \
    { [ "$have" = "$want" ] || { echo "the builder runs $have, go.mod's toolchain is $want" >&2; exit 1; }; } && \
    go mod download
COPY . .
# What `billing version` and billing_build_info report: `make image` passes
# both (git describe, git rev-parse HEAD). The context has no .git
# (.dockerignore), so without them the binary says "devel (revision unknown)".
# deploy/image_version_test.go runs the go build line below as it stands.
ARG VERSION
ARG REVISION
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath \
      -ldflags="-s -w -X github.com/acme/billing/internal/version.version=${VERSION} -X github.com/acme/billing/internal/version.revision=${REVISION}" \
      -o /billing ./cmd/billing

FROM gcr.io/distroless/static-debian12:nonroot@sha256:d093aa3e30dbadd3efe1310db061a14da60299baff8450a17fe0ccc514a16639
COPY --from=build /billing /billing
# 65532 is distroless's nonroot; deploy/base runs the pod as the same uid.
USER nonroot:nonroot
EXPOSE 8080
ENTRYPOINT ["/billing"]
CMD ["run"]
