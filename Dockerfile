# syntax=docker/dockerfile:1
#
# billing: one static binary on distroless, running as the nonroot user.
# The SQL migrations are embedded in the binary (go:embed), so nothing but
# /billing is copied into the final image.
#
#   docker build -t billing:dev .
#   docker run --rm billing:dev migrate      # or: run (the default), demo, dlq replay

FROM golang:1.26-bookworm AS build
WORKDIR /src
# Module download first, so source edits do not invalidate this layer.
COPY go.mod go.sum ./
# kafka-go is replaced by the patched copy in third_party (see its PATCHES.md):
# go mod download reads the replacement's go.mod.
COPY third_party/kafka-go/go.mod third_party/kafka-go/go.sum ./third_party/kafka-go/
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /billing ./cmd/billing

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /billing /billing
# 65532 is distroless's nonroot; deploy/base runs the pod as the same uid.
USER nonroot:nonroot
EXPOSE 8080
ENTRYPOINT ["/billing"]
CMD ["run"]
