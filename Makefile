# cluster-api-provider-redfish (CAPRF)
#
#   make test     everything CI runs: generated files check, vet, lint, all tests
#   make dev      the embedded demo (see README)
#
# Tools and the envtest control plane are built from the Go module proxy and cached outside the
# clone, so a fresh clone on the same machine reuses them.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
.DEFAULT_GOAL := help

CACHE_DIR ?= $(or $(CAPRF_CACHE_DIR),$(HOME)/.cache/caprf)
export CAPRF_CACHE_DIR := $(CACHE_DIR)
TOOLS_BIN := $(CACHE_DIR)/bin

CONTROLLER_GEN_VERSION ?= v0.23.0
GOLANGCI_LINT_VERSION ?= v2.15.0
CONTROLLER_GEN := $(TOOLS_BIN)/controller-gen-$(CONTROLLER_GEN_VERSION)
GOLANGCI_LINT := $(TOOLS_BIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)

GO_TEST_FLAGS ?= -count=1 -timeout=40m

##@ General

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*##/ {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2} /^##@/ {printf "\n%s\n", substr($$0, 5)}' $(MAKEFILE_LIST)

##@ Tools (built once from the Go module proxy, cached in $(CACHE_DIR))

$(CONTROLLER_GEN):
	@mkdir -p $(TOOLS_BIN)/.tmp-cg
	GOBIN=$(TOOLS_BIN)/.tmp-cg go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)
	mv $(TOOLS_BIN)/.tmp-cg/controller-gen $@ && rm -rf $(TOOLS_BIN)/.tmp-cg

$(GOLANGCI_LINT):
	@mkdir -p $(TOOLS_BIN)/.tmp-gl
	GOBIN=$(TOOLS_BIN)/.tmp-gl go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv $(TOOLS_BIN)/.tmp-gl/golangci-lint $@ && rm -rf $(TOOLS_BIN)/.tmp-gl

.PHONY: tools
tools: $(CONTROLLER_GEN) $(GOLANGCI_LINT) ## Build the code generator and the linter.

.PHONY: clusterctl
clusterctl: ## Build (once) clusterctl of the pinned CAPI version from the Go module proxy; prints its path.
	@./hack/clusterctl.sh

.PHONY: envtest
envtest: ## Build (once) kube-apiserver, etcd and kube-controller-manager for envtest; prints the assets folder.
	@./hack/envtest-assets.sh

##@ Development

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Regenerate deepcopy, CRDs and RBAC.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths="./api/..." paths="./exp/api/..."
	$(CONTROLLER_GEN) crd paths="./api/..." paths="./exp/api/..." output:crd:artifacts:config=config/crd/bases
	$(CONTROLLER_GEN) rbac:roleName=manager-role paths="./..." output:rbac:artifacts:config=config/rbac
	$(CONTROLLER_GEN) webhook paths="./internal/webhooks/..." output:webhook:artifacts:config=config/webhook
	go run ./hack/release -templates

GENERATED := api exp config templates

.PHONY: verify-gen
verify-gen: generate ## Fail when generated files are stale.
	@if ! git diff --quiet -- $(GENERATED) || [ -n "$$(git ls-files --others --exclude-standard -- $(GENERATED))" ]; then \
		echo "Generated files are stale; run 'make generate' and commit:"; \
		git --no-pager diff --stat -- $(GENERATED); git ls-files --others --exclude-standard -- $(GENERATED); exit 1; \
	fi

.PHONY: fmt
fmt: ## gofmt the tree.
	gofmt -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## go vet.
	go vet ./...

.PHONY: lint
lint: $(GOLANGCI_LINT) ## golangci-lint (v2).
	$(GOLANGCI_LINT) run ./...

.PHONY: unit
unit: ## Run the tests that need no control plane (fast).
	go test $(GO_TEST_FLAGS) -short ./...

.PHONY: test
test: verify-gen vet lint ## The whole suite CI runs: generated files, vet, lint, every test (envtest included).
	KUBEBUILDER_ASSETS="$$(./hack/envtest-assets.sh)" go test -p 1 $(GO_TEST_FLAGS) ./...

# Fuzz targets (package:target). Their seed corpora run in `make test`; `make fuzz` explores each
# for FUZZ_TIME, one after the other (docs/fuzzing.md says what each checks and what they found).
FUZZ_TIME ?= 1m
FUZZ_TARGETS = ./bmc:FuzzParseAddress ./bmc:FuzzRedfishDocuments ./bmc:FuzzTaskStatus \
	./internal/seed:FuzzSeedServerRequest ./internal/seed:FuzzReadVolume ./internal/webhooks:FuzzWebhookAdmission \
	./exp/controllers/maintenance:FuzzMaintenanceWindow ./internal/install:FuzzQuote

.PHONY: fuzz
fuzz: ## Explore every fuzz target for FUZZ_TIME (default 1m; FUZZ_TARGETS=./pkg:FuzzX picks some).
	@for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; name=$${t##*:}; \
		echo "== $$name ($$pkg, $(FUZZ_TIME))"; \
		go test $$pkg -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZ_TIME) -parallel 2 || exit 1; done

.PHONY: dev
dev: ## Run the embedded demo: control plane, CAPI, CAPRF and a simulated fleet (DEV_FLAGS="--help" lists options).
	@echo "make dev: building the demo (the first build downloads and compiles the Kubernetes and CAPI modules: minutes)"
	@go build -o $(TOOLS_BIN)/caprf-dev ./cmd/caprf-dev
	KUBEBUILDER_ASSETS="$$(./hack/envtest-assets.sh)" $(TOOLS_BIN)/caprf-dev $(DEV_FLAGS)

##@ Benchmarks

BENCH_FLAGS ?=

.PHONY: bench
bench: ## Fleet-size benchmark: N hosts (default 1000) through register, provision, rolling update, idle; table + JSON (BENCH_FLAGS="--help" lists options; docs/performance.md).
	@go build -o $(TOOLS_BIN)/caprf-bench ./cmd/caprf-bench
	KUBEBUILDER_ASSETS="$$(./hack/envtest-assets.sh)" $(TOOLS_BIN)/caprf-bench -json bench.json $(BENCH_FLAGS)

.PHONY: bench-jobs
bench-jobs: ## RedfishJob benchmark: 200 power-cycle jobs on 200 hosts at 1 s power latency, at the default concurrency and at 10 (BENCH_FLAGS as for bench; docs/performance.md).
	@go build -o $(TOOLS_BIN)/caprf-bench ./cmd/caprf-bench
	KUBEBUILDER_ASSETS="$$(./hack/envtest-assets.sh)" $(TOOLS_BIN)/caprf-bench -jobs 200 -json bench-jobs.json $(BENCH_FLAGS)

##@ Release

VERSION ?= v0.1.0
RELEASE_DIR ?= out
IMAGE ?= ghcr.io/caprf/cluster-api-provider-redfish:$(VERSION)

.PHONY: release-manifests
release-manifests: ## Write the clusterctl repository (components, metadata, templates) to $(RELEASE_DIR)/infrastructure-redfish/$(VERSION).
	go run ./hack/release -out $(RELEASE_DIR) -version $(VERSION)

.PHONY: docker-build
docker-build: ## Build the manager image (needs a Docker daemon).
	docker build -t $(IMAGE) .
