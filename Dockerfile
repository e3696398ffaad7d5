# syntax=docker/dockerfile:1
# The fpga-dra-driver image: both static binaries (the node daemon
# fpga-dra-driver and the cluster-side fpga-dra-controller) on an empty
# base. `make images` builds the same image without a container engine
# (hack/ociimage); `make image` builds this file.
ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY api/ api/
COPY cmd/ cmd/
COPY internal/ internal/
COPY pkg/ pkg/
ARG TARGETOS=linux
ARG TARGETARCH
# --version of both binaries.
ARG VERSION=devel
ARG GIT_COMMIT=
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags="-s -w -X github.com/fpga-dra/fpga-dra-driver/internal/version.version=${VERSION} -X github.com/fpga-dra/fpga-dra-driver/internal/version.gitCommit=${GIT_COMMIT}" \
      -o /out/ ./cmd/fpga-dra-driver ./cmd/fpga-dra-controller

FROM scratch
ARG VERSION=devel
LABEL org.opencontainers.image.source="https://github.com/fpga-dra/fpga-dra-driver" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.description="Kubernetes DRA driver for FPGAs"
COPY --from=build /out/fpga-dra-driver /out/fpga-dra-controller /usr/bin/
ENV PATH=/usr/bin
# The node daemon runs as root (privileged DaemonSet); the chart runs the
# controller as 65532.
ENTRYPOINT ["/usr/bin/fpga-dra-driver"]
