# fpga-dra-driver: build, test and demo targets. Everything runs on a fresh
# machine with Go; tools are built with `go run`/`go install` at pinned versions.

GO        ?= go
BIN       := bin
PKGS      := ./...
DEMO_DIR  ?= $(CURDIR)/_output/demo

.PHONY: all build test vet fmt-check codegen verify-codegen unit bench fuzz demo demo-down clean

all: build

build:
	$(GO) build -trimpath -o $(BIN)/ ./cmd/...

# The whole test suite: formatting, vet, generated code, unit and
# integration tests with the race detector (fuzz seed corpora included).
test: fmt-check vet verify-codegen unit

fmt-check:
	@out="$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"; \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

codegen:
	hack/update-codegen.sh

verify-codegen:
	hack/verify-codegen.sh

unit:
	$(GO) test -race -count=1 $(PKGS)

# Benchmarks quoted in the issue notes.
bench:
	$(GO) test -run XXX -bench . -benchmem ./pkg/discovery/ ./pkg/program/ ./internal/...

# Short coverage-guided fuzzing of every parser of outside input.
FUZZTIME ?= 20s
fuzz:
	$(GO) test -run XXX -fuzz FuzzParseUevent -fuzztime $(FUZZTIME) ./pkg/discovery/
	$(GO) test -run XXX -fuzz FuzzCanonicalID -fuzztime $(FUZZTIME) ./pkg/discovery/
	$(GO) test -run XXX -fuzz FuzzDecodeFpgaConfig -fuzztime $(FUZZTIME) ./api/v1alpha1/

# The main job on an embedded default: a simulated FPGA node, then what the
# driver publishes for it.
demo: build
	rm -rf $(DEMO_DIR)
	$(BIN)/fpga-dra-driver simulate --dir $(DEMO_DIR) --driver dfl --cards 2 --ports-per-card 2
	$(BIN)/fpga-dra-driver discover --root $(DEMO_DIR) --node-name demo-node -o yaml

demo-down:
	rm -rf $(DEMO_DIR)

clean:
	rm -rf $(BIN) _output
