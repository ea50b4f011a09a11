# Reeve. `make run` starts the one-process dev mode, `make test` runs everything CI runs.
SHELL := /bin/bash
TOOLS := $(CURDIR)/.tools/bin
export PATH := $(TOOLS):$(PATH)

PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
BUF_VERSION                := v1.75.0
GRPCURL_VERSION            := v1.9.4

.PHONY: all tools generate check-generate check-fmt lint build run test vet fuzz e2e e2e-grpcurl e2e-node e2e-conformance node-example

all: build

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

generate: tools
	rm -rf gen
	buf generate

lint: tools
	buf lint

# Fails when gen/ differs from what the pinned generators produce.
check-generate: generate
	@git diff --exit-code --stat -- gen || (echo "gen/ is stale: run 'make generate' and commit" >&2; exit 1)
	@test -z "$$(git status --porcelain -- gen)" || (git status --porcelain -- gen; echo "gen/ has untracked files: run 'make generate' and commit" >&2; exit 1)

build:
	go build -o bin/reeve ./cmd/reeve

run: build
	./bin/reeve dev --demo

vet:
	go vet ./...

check-fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^gen/')); test -z "$$out" || (echo "gofmt needed: $$out" >&2; exit 1)

# Short fuzz runs (FUZZTIME each, one target at a time: go test -fuzz takes
# one). Seeds live in each package's testdata/fuzz; a failing input is written
# there too, to be committed as a regression test.
FUZZTIME ?= 10s
FUZZ_TARGETS := ./internal/workflow:FuzzValidateWorkflow ./internal/workflow:FuzzValidateWorkflowJSON \
	./internal/workflow:FuzzValidateSubmit ./cmd/reeve:FuzzParseWorkflowFile ./cmd/reeve:FuzzParseInput \
	./internal/taskstate:FuzzResultFencing ./scheduler:FuzzAgentStream

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; echo "fuzz $$name in $$pkg for $(FUZZTIME)"; \
		go test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) $$pkg; \
	done

test: check-generate check-fmt lint vet
	go test -race -count=1 -timeout 15m ./...
	$(MAKE) fuzz
	$(MAKE) e2e

# End-to-end checks against real processes (about 45s once the tools are
# installed): the README's grpcurl examples against reeve dev, the Node
# example client and agent against reeve dev, and the conformance suite
# against the Node agent and the Go SDK agent.
e2e: e2e-grpcurl e2e-node e2e-conformance

e2e-grpcurl: build $(TOOLS)/grpcurl-$(GRPCURL_VERSION)
	GRPCURL=$(TOOLS)/grpcurl scripts/e2e/grpcurl.sh

e2e-node: build node-example
	scripts/e2e/node.sh

e2e-conformance: build
	scripts/e2e/conformance-go.sh

# The TypeScript example: npm packages from its lockfile, stubs generated
# from proto/, compiled with the pinned typescript. Needs node 20 or later.
node-example:
	@command -v node >/dev/null || { echo "node 20 or later is required (apt-get install nodejs)" >&2; exit 1; }
	@node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)' || { echo "node 20 or later is required, found $$(node --version)" >&2; exit 1; }
	cd examples/node && npm ci --ignore-scripts --no-audit --no-fund && npm run build
