# fpga-dra-driver: build, test and demo targets. Everything runs on a fresh
# machine with Go; tools are built with `go run`/`go install` at pinned versions.

GO        ?= go
BIN       := bin
PKGS      := ./...

.PHONY: all build test vet lint fmt-check codegen verify-codegen unit bench fuzz demo demo-down e2e e2e-bench bench-e2e cluster-binaries registry e2e-autoscale autoscaler-binaries clean \
	crds manifests verify-deployments static-binaries images image

all: build

build:
	$(GO) build -trimpath -ldflags="$(VERSION_LDFLAGS)" -o $(BIN)/ ./cmd/...

# The whole test suite: formatting, vet, generated code, unit and
# integration tests with the race detector (fuzz seed corpora included).
test: fmt-check vet lint verify-codegen verify-deployments unit

fmt-check:
	@out="$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"; \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

# golangci-lint with .golangci.yml (govet, staticcheck, errcheck,
# ineffassign, misspell, unused; pinned, built into bin/tools on first use).
lint:
	hack/golangci-lint.sh run $(PKGS)

codegen:
	hack/update-codegen.sh

verify-codegen:
	hack/verify-codegen.sh

# The tests of pkg/program/oci (and of the bitstream commands) run the real
# CNCF Distribution registry, built once and cached (hack/e2e/build-registry.sh).
unit:
	@reg="$$(hack/e2e/build-registry.sh)" && \
	FPGA_DRA_REGISTRY_BIN="$$reg" $(GO) test -race -count=1 $(PKGS)

# The CNCF Distribution registry binary (cached by version outside the
# repository; prints its path).
registry:
	hack/e2e/build-registry.sh

# Benchmarks quoted in the issue notes.
bench:
	@reg="$$(hack/e2e/build-registry.sh)" && \
	FPGA_DRA_REGISTRY_BIN="$$reg" $(GO) test -run XXX -bench . -benchmem ./pkg/discovery/ ./pkg/program/... ./internal/...

# Short coverage-guided fuzzing of every parser of outside input.
FUZZTIME ?= 20s
fuzz:
	$(GO) test -run XXX -fuzz FuzzParseUevent -fuzztime $(FUZZTIME) ./pkg/discovery/
	$(GO) test -run XXX -fuzz FuzzCanonicalID -fuzztime $(FUZZTIME) ./pkg/discovery/
	$(GO) test -run XXX -fuzz FuzzScanAttributes -fuzztime $(FUZZTIME) ./pkg/discovery/
	$(GO) test -run XXX -fuzz FuzzParseDirents -fuzztime $(FUZZTIME) ./pkg/discovery/
	$(GO) test -run XXX -fuzz FuzzRegionRequests -fuzztime $(FUZZTIME) ./cmd/fpga-dra-driver/
	$(GO) test -run XXX -fuzz FuzzParseGBS -fuzztime $(FUZZTIME) ./pkg/program/
	$(GO) test -run XXX -fuzz FuzzParseAOCX -fuzztime $(FUZZTIME) -fuzzminimizetime 2s ./pkg/program/
	$(GO) test -run XXX -fuzz FuzzParseXclbin -fuzztime $(FUZZTIME) -fuzzminimizetime 2s ./pkg/program/
	$(GO) test -run XXX -fuzz FuzzParseSimDelays -fuzztime $(FUZZTIME) ./pkg/program/
	$(GO) test -run XXX -fuzz FuzzDecodeFpgaConfig -fuzztime $(FUZZTIME) ./api/v1alpha1/
	$(GO) test -run XXX -fuzz FuzzParseBitstreamRef -fuzztime $(FUZZTIME) ./api/v1alpha1/
	$(GO) test -run XXX -fuzz FuzzParseManifest -fuzztime $(FUZZTIME) ./pkg/program/oci/
	$(GO) test -run XXX -fuzz FuzzDecodeCheckpoint -fuzztime $(FUZZTIME) ./internal/state/
	$(GO) test -run XXX -fuzz FuzzReadCheckpoint -fuzztime $(FUZZTIME) ./internal/state/
	$(GO) test -run XXX -fuzz FuzzParseShape -fuzztime $(FUZZTIME) ./pkg/slicetemplate/
	$(GO) test -run XXX -fuzz FuzzIssuerOf -fuzztime $(FUZZTIME) ./internal/webhook/

# Binaries of a local Kubernetes node (apiserver, scheduler,
# controller-manager, kubelet, kubectl, etcd, containerd) and Helm, built
# from the Go module proxy at pinned versions and cached outside the
# repository; only what is missing is built (~12 minutes cold on 2 idle
# cores, Helm ~4 more); each step reports its time, tool output goes to
# ~/.cache/fpga-dra-driver/build.log.
cluster-binaries:
	hack/e2e/build-cluster-binaries.sh

# The main job on an embedded default: a real local cluster, the driver on a
# simulated FPGA node, a local OCI registry (the CNCF Distribution registry)
# holding the sample bitstream, a workload whose claim names it by digest and
# programs a region, and what the container sees. The cluster stays up;
# `make demo-down` ends it.
# Every step announces itself and reports its time, from the first second;
# the demo ends with the time since `make demo` started.
DEMO_DIR ?= /tmp/fdra-demo
demo: images
	@bin="$$(hack/e2e/build-cluster-binaries.sh)" && reg="$$(hack/e2e/build-registry.sh)" && \
	$(STEP) "building fpga-dra-driver for this host (the admin CLI, and the daemon's first start)" \
		$(GO) build -o $(BIN)/ ./cmd/fpga-dra-driver && \
	$(STEP) "building the demo program (test/e2e/demo)" $(GO) build -o $(BIN)/demo ./test/e2e/demo && \
	$(BIN)/demo up --bin "$$bin" --registry "$$reg" --dir $(DEMO_DIR) --since $(MAKE_START)

demo-down:
	$(GO) run ./test/e2e/demo down --dir $(DEMO_DIR)

# End-to-end tests against a real local cluster (run by .ci/run after
# `make test`), with the driver and controller installed from the Helm chart
# from the image `make images` builds, and real CNCF Distribution registries
# for bitstreams from OCI registries. One package at a time (-p 1): a node's
# cgroups and device-plugin directory are the host's.
e2e: images
	@bin="$$(hack/e2e/build-cluster-binaries.sh)" && reg="$$(hack/e2e/build-registry.sh)" && \
	FPGA_DRA_E2E=1 FPGA_DRA_CLUSTER_BIN="$$bin" FPGA_DRA_REGISTRY_BIN="$$reg" $(GO) test -p 1 -count=1 -timeout 20m -v ./test/e2e/...

# Benchmarks on the real local cluster (what binding conditions add to
# scheduling latency); not part of CI.
E2E_BENCHTIME ?= 20x
e2e-bench: images
	@bin="$$(hack/e2e/build-cluster-binaries.sh)" && reg="$$(hack/e2e/build-registry.sh)" && \
	FPGA_DRA_E2E=1 FPGA_DRA_CLUSTER_BIN="$$bin" FPGA_DRA_REGISTRY_BIN="$$reg" $(GO) test -count=1 -timeout 30m -run XXX -bench BindingLatency -benchtime $(E2E_BENCHTIME) -benchmem ./test/e2e/

# The kubelet's side of a prepare, end to end: our driver's prepare and
# unprepare latency (p50, p99 at concurrency 1 and 8) through its gRPC
# socket against a real kube-apiserver, side by side with the upstream DRA
# test driver and dra-example-driver (test/e2e/preparebench). Not part of
# CI. E.g. BENCH_E2E_FLAGS="--rounds 9 --cpuprofile /tmp/fpga.pprof".
BENCH_E2E_FLAGS ?=
bench-e2e:
	@bin="$$(hack/e2e/build-cluster-binaries.sh)" && drv="$$(hack/e2e/build-bench-drivers.sh)" && \
	$(GO) run ./test/e2e/preparebench --bin "$$bin" --drivers "$$drv" $(BENCH_E2E_FLAGS)

# Karpenter core with the kwok provider and FPGA instance types
# (test/e2e/autoscale/provider, its own module, built with Go 1.27.3 fetched
# through the module proxy) and the kwok controller, cached outside the
# repository (~12 minutes cold on 2 cores, seconds warm).
autoscaler-binaries:
	hack/e2e/build-autoscaler-binaries.sh

# Autoscaling end to end (run by .ci/run after `make e2e`): a local control
# plane, Karpenter with DRA simulation on, kwok's fake kubelets, and the
# driver in simulation mode on every node Karpenter launches.
e2e-autoscale:
	@bin="$$(hack/e2e/build-cluster-binaries.sh)" && abin="$$(hack/e2e/build-autoscaler-binaries.sh)" && \
	(cd test/e2e/autoscale/provider && GOTOOLCHAIN="$$(sed -n 's/^toolchain //p' go.mod)" $(GO) test -mod=mod -trimpath -count=1 ./...) && \
	FPGA_DRA_E2E=1 FPGA_DRA_CLUSTER_BIN="$$bin" FPGA_DRA_AUTOSCALER_BIN="$$abin" $(GO) test -count=1 -timeout 20m -v ./test/e2e/autoscale/

clean:
	rm -rf $(BIN) _output

# --- Deployments: CRDs, Helm chart, plain manifests, container images ---

CHART      := deployments/helm/fpga-dra-driver
IMAGE_REPO ?= ghcr.io/fpga-dra/fpga-dra-driver
VERSION    ?= $(shell sed -n 's/^appVersion: *"*\([^"]*\)"*$$/\1/p' $(CHART)/Chart.yaml)
IMAGE_TAG  ?= $(VERSION)
# --version of both binaries: the chart's appVersion and the commit.
GIT_COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
VERSION_LDFLAGS = -X github.com/fpga-dra/fpga-dra-driver/internal/version.version=$(VERSION) -X github.com/fpga-dra/fpga-dra-driver/internal/version.gitCommit=$(GIT_COMMIT)
ARCH       ?= $(shell $(GO) env GOARCH)
IMAGES_DIR := _output/images
STATIC_DIR := $(IMAGES_DIR)/bin/linux-$(ARCH)
CONTAINER_ENGINE ?= docker

# CRDs from the Go types (api/v1alpha1) into the chart's crds/.
crds:
	hack/update-crds.sh

# Plain manifests rendered from the chart (deployments/manifests).
manifests: crds
	hack/render-manifests.sh

# Fails when the CRDs or the rendered manifests are stale; helm lint and
# helm template in every TLS mode (Helm is built once, pinned, by hack/helm.sh).
verify-deployments:
	hack/verify-crds.sh
	hack/verify-manifests.sh

# STEP WHAT COMMAND...: announces WHAT, sends COMMAND's output to the build
# log and reports how long it took (hack/e2e/buildlib.sh's step).
STEP := bash -c '. hack/e2e/buildlib.sh; step "$$@"' step
# When this make started: the demo reports its whole time from it.
MAKE_START := $(shell date +%s)

# Static Linux binaries of both commands, for the images.
static-binaries:
	@$(STEP) "building fpga-dra-driver and fpga-dra-controller, static for linux/$(ARCH) (minutes on a cold build cache)" \
		env CGO_ENABLED=0 GOOS=linux GOARCH=$(ARCH) $(GO) build -trimpath -ldflags="-s -w $(VERSION_LDFLAGS)" -o $(STATIC_DIR)/ ./cmd/fpga-dra-driver ./cmd/fpga-dra-controller

# The image without a container engine: an OCI image layout archive of the
# static binaries on an empty base, the same image the Dockerfile builds.
# Load it with: ctr -n k8s.io images import $(IMAGES_DIR)/fpga-dra-driver-$(IMAGE_TAG)-linux-$(ARCH).tar
images: static-binaries
	@$(STEP) "packing the image $(IMAGE_REPO):$(IMAGE_TAG) into $(IMAGES_DIR)/fpga-dra-driver-$(IMAGE_TAG)-linux-$(ARCH).tar" \
		$(GO) -C hack/ociimage run . --image $(IMAGE_REPO):$(IMAGE_TAG) --platform linux/$(ARCH) \
		--entrypoint /usr/bin/fpga-dra-driver \
		--labels org.opencontainers.image.source=https://github.com/fpga-dra/fpga-dra-driver,org.opencontainers.image.version=$(VERSION) \
		--file /usr/bin/fpga-dra-driver=$(CURDIR)/$(STATIC_DIR)/fpga-dra-driver \
		--file /usr/bin/fpga-dra-controller=$(CURDIR)/$(STATIC_DIR)/fpga-dra-controller \
		--output $(CURDIR)/$(IMAGES_DIR)/fpga-dra-driver-$(IMAGE_TAG)-linux-$(ARCH).tar

# The image with a container engine (multi-stage Dockerfile).
image:
	$(CONTAINER_ENGINE) build --build-arg VERSION=$(VERSION) --build-arg GIT_COMMIT=$(GIT_COMMIT) -t $(IMAGE_REPO):$(IMAGE_TAG) .
