# Reeve. `make run` starts the one-process dev mode, `make test` runs everything CI runs.
SHELL := /bin/bash
TOOLS := $(CURDIR)/.tools/bin
export PATH := $(TOOLS):$(PATH)

PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
BUF_VERSION                := v1.75.0

.PHONY: all tools generate check-generate check-fmt lint build run test vet fuzz

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
