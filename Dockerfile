# syntax=docker/dockerfile:1
#
# leasecron: one static binary on a distroless base, running as non-root.
#
#   docker build --build-arg VERSION=$(git describe --tags --always) -t leasecron .
#   docker run --rm leasecron --help
#
# The default command is `worker`; configuration comes from LEASECRON_*
# environment variables or a file named by LEASECRON_CONFIG (see README).

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION} AS build
# The image pins GOTOOLCHAIN=local; allow fetching the exact toolchain go.mod
# asks for if this image's patch release is older.
ENV GOTOOLCHAIN=auto
WORKDIR /src
# Modules first, so source edits do not invalidate the download layer. The
# command is a module of its own (cmd/leasecron) over the library's.
COPY go.mod go.sum ./
COPY cmd/leasecron/go.mod cmd/leasecron/go.sum ./cmd/leasecron/
RUN --mount=type=cache,target=/go/pkg/mod \
    cd cmd/leasecron && go mod download
COPY . .
ARG VERSION=dev
# Set by BuildKit for multi-platform builds; empty means the build host's.
ARG TARGETOS
ARG TARGETARCH
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    cd cmd/leasecron && CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" \
      -o /out/leasecron .

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/leasecron /leasecron
# distroless "nonroot" is uid/gid 65532; no shell, no package manager.
USER nonroot:nonroot
# Admin endpoints (/healthz, /readyz, /metrics) when LEASECRON_ADMIN_ADDR=:8080.
EXPOSE 8080
ENTRYPOINT ["/leasecron"]
CMD ["worker"]
