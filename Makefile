# Reeve. `make run` starts the one-process dev mode, `make test` runs everything CI runs.
SHELL := /bin/bash
TOOLS := $(CURDIR)/.tools/bin
export PATH := $(TOOLS):$(PATH)

PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
BUF_VERSION                := v1.75.0
GRPCURL_VERSION            := v1.9.4
ETCD_VERSION               := v3.7.3
TOXIPROXY_VERSION          := v2.12.0
HELM_VERSION               := v3.19.0

# The OpenTelemetry Collector of `make e2e-otel`, built by the collector
# builder from internal/telemetry/otelcol/builder.yaml (components pinned
# there to the same release). Bump both together, and the binary's name.
OTELCOL_VERSION            := v0.162.0
OTELCOL                    := $(TOOLS)/otelcol-reeve-$(OTELCOL_VERSION)

.PHONY: all tools generate check-generate check-breaking api-release check-fmt lint build run test test-throughput vet fuzz e2e e2e-grpcurl e2e-node e2e-conformance node-example bench etcd toxiproxy cluster chaos e2e-otel test-cluster e2e-console

all: build

# PostgreSQL for the archive's tests (internal/pgtest starts throwaway servers
# with its initdb and pg_ctl): Debian's postgresql, installed when missing.
.PHONY: postgres
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { apt-get update && apt-get install -y postgresql; }

.PHONY: image test-image helm test-helm test-deploy python-example e2e-python e2e-trip test-repeat

# Pinned tools, installed once into .tools/bin (skipped when the version matches).
tools: $(TOOLS)/protoc-gen-go $(TOOLS)/protoc-gen-go-grpc $(TOOLS)/buf

$(TOOLS)/protoc-gen-go: Makefile
	GOBIN=$(TOOLS) go install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	@touch $@
$(TOOLS)/protoc-gen-go-grpc: Makefile
	GOBIN=$(TOOLS) go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	@touch $@
$(TOOLS)/buf: Makefile
	GOBIN=$(TOOLS) go install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
	@touch $@

# grpcurl for the README's examples; the stamp file names the version.
$(TOOLS)/grpcurl-$(GRPCURL_VERSION):
	GOBIN=$(TOOLS) go install github.com/fullstorydev/grpcurl/cmd/grpcurl@$(GRPCURL_VERSION)
	@touch $@

# Built once (about 2.5 minutes), then reused while the file exists.
# A private build directory next to the binary: the rename is atomic, so an
# interrupted build never leaves a partial binary that looks installed.
$(OTELCOL):
	GOBIN=$(TOOLS) go install go.opentelemetry.io/collector/cmd/builder@$(OTELCOL_VERSION)
	d=$$(mktemp -d $(TOOLS)/otelcol-build.XXXXXX) && \
	$(TOOLS)/builder --config internal/telemetry/otelcol/builder.yaml --output-path $$d && \
	mv $$d/otelcol-reeve $@ && rm -rf $$d

# End-to-end tracing: a real collector receives the spans of `reeve dev
# --demo` and the CLI; the test checks the traces of two demo tasks.
e2e-otel: $(OTELCOL) build
	REEVE_E2E_OTELCOL=$(OTELCOL) REEVE_E2E_REEVE=$(CURDIR)/bin/reeve go test -count=1 -timeout 5m -run TestCollectorReceivesTaskTraces ./internal/telemetry/otelcol/

# The official etcd server and etcdctl, built from their Go modules in a
# scratch module: `go install` refuses them (their go.mod has replace
# directives). Debian's etcd-server is 3.4.23, end of life and older than the
# 3.7.3 client and embedded server Reeve is built and tested with.
etcd: $(TOOLS)/etcd-$(ETCD_VERSION)
$(TOOLS)/etcd-$(ETCD_VERSION):
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; cd $$tmp; \
	go mod init reeve.tools/etcd >/dev/null 2>&1; \
	go get go.etcd.io/etcd/server/v3@$(ETCD_VERSION) go.etcd.io/etcd/etcdctl/v3@$(ETCD_VERSION); \
	go build -o $(TOOLS)/etcd go.etcd.io/etcd/server/v3; \
	go build -o $(TOOLS)/etcdctl go.etcd.io/etcd/etcdctl/v3
	@touch $@

# toxiproxy's commands are named server and cli: installed as toxiproxy-server
# and toxiproxy-cli. `@latest` resolves to an old v2.5.0 here: pinned.
toxiproxy: $(TOOLS)/toxiproxy-$(TOXIPROXY_VERSION)
$(TOOLS)/toxiproxy-$(TOXIPROXY_VERSION):
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	GOBIN=$$tmp go install github.com/Shopify/toxiproxy/v2/cmd/server@$(TOXIPROXY_VERSION); \
	GOBIN=$$tmp go install github.com/Shopify/toxiproxy/v2/cmd/cli@$(TOXIPROXY_VERSION); \
	mv $$tmp/server $(TOOLS)/toxiproxy-server; mv $$tmp/cli $(TOOLS)/toxiproxy-cli
	@touch $@

# gen/ (the public API) and internal/gen/ (the store's records), from
# proto/ by buf.gen.yaml.
generate: tools
	rm -rf gen internal/gen
	buf generate

lint: tools
	buf lint

# The API's compatibility: buf breaking under the FILE rules (buf.yaml)
# against the last released schema, api/released.binpb — an image that
# `make api-release` writes when a release is cut, committed with it. A
# change that would break generated clients fails `make test`.
check-breaking: tools
	buf breaking --against api/released.binpb

# Cutting a release also updates RELEASED (the commit a rolling upgrade
# starts from, for make test-cluster).
api-release: tools
	buf build --exclude-source-info -o api/released.binpb

# Fails when gen/ or internal/gen/ differs from what the pinned generators produce.
check-generate: generate
	@git diff --exit-code --stat -- gen internal/gen || (echo "gen/ is stale: run 'make generate' and commit" >&2; exit 1)
	@test -z "$$(git status --porcelain -- gen internal/gen)" || (git status --porcelain -- gen internal/gen; echo "gen/ has untracked files: run 'make generate' and commit" >&2; exit 1)

# What `reeve version` prints (internal/version): GOFLAGS has -buildvcs=false
# here, so the commit comes through the linker, not the build information.
REEVE_VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REEVE_COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
REEVE_LDFLAGS := -X github.com/reeve-org/reeve/internal/version.version=$(REEVE_VERSION) -X github.com/reeve-org/reeve/internal/version.commit=$(REEVE_COMMIT)

build:
	go build -ldflags '$(REEVE_LDFLAGS)' -o bin/reeve ./cmd/reeve

# The container image without a container engine: a static linux binary in
# an OCI layout archive built by deploy/image (go-containerregistry, a module
# of its own), on an empty base; times from the commit, so the same commit
# gives the same image. Load it with `docker load -i bin/reeve-image.tar`.
IMAGE_ARCH ?= $(shell go env GOARCH)
image:
	CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) go build -trimpath -ldflags '$(REEVE_LDFLAGS)' -o bin/reeve-linux-$(IMAGE_ARCH) ./cmd/reeve
	cd deploy/image && SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct) go run . --binary $(CURDIR)/bin/reeve-linux-$(IMAGE_ARCH) --arch $(IMAGE_ARCH) \
		--out $(CURDIR)/bin/reeve-image.tar --version $(REEVE_VERSION) --revision $(REEVE_COMMIT)
	@echo "wrote bin/reeve-image.tar (reeve:$(REEVE_VERSION)); load it with: docker load -i bin/reeve-image.tar"

# The Helm chart (deploy/helm/reeve) without a cluster: helm lint and
# helm template for each value set, then a Go test (deploy/helm/test, a module
# of its own so k8s.io/api stays out of go.mod) decoding every rendered
# document strictly into the Kubernetes API types and checking the chart's
# promises (probes, non-root, read-only root, replicas, PDBs).
HELM_VALUE_SETS := "" deploy/helm/reeve/ci/secure-values.yaml deploy/helm/reeve/ci/external-etcd-values.yaml
helm: $(TOOLS)/helm-$(HELM_VERSION)
$(TOOLS)/helm-$(HELM_VERSION):
	GOBIN=$(TOOLS) go install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)
	@touch $@
test-helm: helm build
	@set -e; for f in $(HELM_VALUE_SETS); do \
		echo "helm lint/template deploy/helm/reeve $${f:+-f $$f}"; \
		$(TOOLS)/helm lint --strict deploy/helm/reeve $${f:+-f $$f} >/dev/null; \
		$(TOOLS)/helm template reeve deploy/helm/reeve $${f:+-f $$f} >/dev/null; \
	done
	cd deploy/helm/test && HELM=$(TOOLS)/helm REEVE_BIN=$(CURDIR)/bin/reeve go test -race -count=1 -timeout 5m ./...

# What deploys Reeve: the image and the Helm chart (about 1 minute once the
# tools are installed).
test-deploy: test-image test-helm

# Opens the archive `make image` wrote and checks it (deploy/image/image_test.go).
test-image: image
	cd deploy/image && REEVE_IMAGE=$(CURDIR)/bin/reeve-image.tar REEVE_IMAGE_VERSION=$(REEVE_VERSION) REEVE_IMAGE_REVISION=$(REEVE_COMMIT) \
		go test -race -count=1 -timeout 5m ./...

run: build
	./bin/reeve dev --demo

# A local cluster of separate processes (3 etcd members, 2 schedulers, 2
# supervisors, 3 demo agents); Ctrl-C stops it. ARGS passes flags, e.g.
# make cluster ARGS='--dir /tmp/c --agents 5'.
cluster: build etcd
	./bin/reeve cluster $(ARGS)

# The chaos suite on a local cluster: 2,000 tasks under process kills and
# network faults, then the invariant check (see docs/reliability.md). ARGS
# passes flags, e.g. make chaos ARGS='--seed 42 --tasks 500'. A short run
# (300 tasks, under a minute) is part of `make test` (make test-cluster).
chaos: build etcd toxiproxy
	./bin/reeve chaos --json chaos-report.json $(ARGS)

vet:
	go vet ./...

check-fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -Ev '^(internal/)?gen/')); test -z "$$out" || (echo "gofmt needed: $$out" >&2; exit 1)

# Short fuzz runs, one target at a time (go test -fuzz takes one). The budget
# is a count of executions, not a duration: Go 1.26's fuzz coordinator can
# fail a duration-bounded run with a bare "context deadline exceeded" when
# the deadline races a busy worker (golang/go#75804, fixed in Go 1.27), which
# made `make test` fail at random on a loaded machine. FUZZTIME applies to
# every target; a target may name its own count as pkg:Name:COUNT (about 10 s
# each here). Seeds live in each package's testdata/fuzz; a failing input is
# written there too, to be committed as a regression test.
FUZZTIME ?=
FUZZ_TARGETS := ./internal/workflow:FuzzValidateWorkflow:60000 ./internal/workflow:FuzzValidateWorkflowJSON:60000 \
	./internal/workflow:FuzzValidateSubmit:60000 ./cmd/reeve:FuzzParseWorkflowFile:40000 ./cmd/reeve:FuzzParseInput:30000 \
	./internal/taskstate:FuzzResultFencing:60000 ./internal/taskstate:FuzzStateMachineModel:10000 ./scheduler:FuzzAgentStream:20000 \
	./scheduler:FuzzParseToken:20000

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		IFS=: read -r pkg name count <<< "$$t"; count=$${FUZZTIME:-$${count}x}; \
		echo "fuzz $$name in $$pkg for $$count"; \
		go test -run '^$$' -fuzz "^$$name$$" -fuzztime "$$count" $$pkg; \
	done

test: postgres check-generate check-fmt lint check-breaking vet
	go test -race -count=1 -timeout 15m ./...
	$(MAKE) test-throughput
	$(MAKE) test-cluster
	$(MAKE) fuzz
	$(MAKE) e2e
	$(MAKE) test-deploy

# Throughput scenarios that skip themselves under the race detector (a
# race-instrumented flood cannot outrun its agents on a loaded machine).
test-throughput:
	go test -count=1 -timeout 5m -run '^TestBenchFloodAdmission$$' ./cmd/reeve/

# Tests that start real clusters of separate processes (internal/cluster,
# and the short chaos run of internal/chaos: about 2 minutes in all), among
# them a rolling upgrade under load from the last release (the commit in
# RELEASED, built from git history: about 1.5 minutes more). A
# step of its own, so that their load does not disturb timing-sensitive tests
# of other packages.
test-cluster: etcd toxiproxy
	REEVE_CLUSTER_TESTS=1 REEVE_REQUIRE_BINARIES=1 go test -race -count=1 -timeout 10m ./internal/cluster/... ./internal/chaos/...

# The cluster tests (test-cluster's packages) and the tests that once
# depended on the machine's timing, REPEAT times (default 10), stopping at
# the first failure and naming the run (scripts/test-repeat.sh; not part of
# `make test`). ONLY=cluster or ONLY=timing runs one part; BUSY=1 keeps one
# core busy meanwhile. See docs/reliability.md, "Deterministic tests".
REPEAT ?= 10
test-repeat: etcd toxiproxy
	REPEAT=$(REPEAT) ONLY=$(ONLY) BUSY=$(BUSY) scripts/test-repeat.sh

# End-to-end checks against real processes (about 45s once the tools are
# installed): the README's grpcurl examples against reeve dev, the Node
# example client and agent against reeve dev, the conformance suite
# against the Node agent and the Go SDK agent, and traces through a real
# OpenTelemetry Collector (about 10s; 2.5 minutes more to build it once),
# the Python example, the web console in headless Chromium (about 20s), and
# the trip saga of examples/trip with the Go agent and Go client (about 5s).
e2e: e2e-grpcurl e2e-node e2e-conformance e2e-otel e2e-python e2e-console e2e-trip

e2e-grpcurl: build $(TOOLS)/grpcurl-$(GRPCURL_VERSION)
	GRPCURL=$(TOOLS)/grpcurl scripts/e2e/grpcurl.sh

e2e-node: build node-example
	scripts/e2e/node.sh

e2e-conformance: build
	scripts/e2e/conformance-go.sh

e2e-trip: build
	scripts/e2e/trip.sh

# The TypeScript example: npm packages from its lockfile, stubs generated
# from proto/, compiled with the pinned typescript. Needs node 20 or later.
node-example:
	@command -v node >/dev/null || { echo "node 20 or later is required (apt-get install nodejs)" >&2; exit 1; }
	@node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)' || { echo "node 20 or later is required, found $$(node --version)" >&2; exit 1; }
	cd examples/node && npm ci --ignore-scripts --no-audit --no-fund && npm run build

# The Python example: Debian's grpcio, grpc_tools and protobuf (the Python
# package index is not reachable; apt-get installs them when missing, as
# root), stubs generated from proto/ into examples/python/gen (git-ignored,
# regenerated every time so they never go stale). Debian's /usr/bin/python3,
# not a pyenv python without these packages. grpc_tools' bundled protoc is
# old: its well-known types come from -I <grpc_tools>/_proto.
PYTHON := /usr/bin/python3
python-example:
	@$(PYTHON) -c 'import grpc, grpc_tools, google.protobuf' 2>/dev/null || \
		{ echo "installing python3-grpcio python3-grpc-tools python3-protobuf (apt-get)"; \
		  apt-get install -y -q python3-grpcio python3-grpc-tools python3-protobuf >/dev/null || \
		  { apt-get update -q >/dev/null && apt-get install -y -q python3-grpcio python3-grpc-tools python3-protobuf >/dev/null; }; }
	rm -rf examples/python/gen && mkdir -p examples/python/gen
	$(PYTHON) -m grpc_tools.protoc -I proto -I "$$($(PYTHON) -c 'import grpc_tools, os; print(os.path.dirname(grpc_tools.__file__))')/_proto" \
		--python_out=examples/python/gen --grpc_python_out=examples/python/gen proto/reeve/v1/*.proto \
		proto/google/api/field_behavior.proto proto/google/rpc/status.proto

# The Python client and agent against reeve dev (plaintext and mutual TLS),
# then `reeve conformance` against the Python agent (about 25 s).
e2e-python: build python-example
	PYTHON=$(PYTHON) scripts/e2e/python.sh

# Reproduces docs/benchmarks.md (about 12 minutes; not part of `make test`).
# Results in bench-results/<time>/. SOAK=180s and SUSTAIN=60s set run lengths.
bench: build
	./scripts/bench.sh

# The web console in a real headless Chromium (Debian's chromium, installed
# when missing): live pages, actions, escaping, secure mode. Screenshots go
# to console-screenshots/ (see docs/console.md).
e2e-console:
	@command -v chromium >/dev/null || { apt-get update && apt-get install -y chromium; }
	REEVE_REQUIRE_BROWSER=1 REEVE_CONSOLE_SCREENSHOTS=$(CURDIR)/console-screenshots go test -race -count=1 -timeout 10m -run 'TestBrowser' ./internal/console/
