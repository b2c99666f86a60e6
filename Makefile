# fleetd — `make help` lists the targets.
SHELL := /bin/sh
.DEFAULT_GOAL := help

GO        ?= go
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X main.version=$(VERSION)
FLEETSIM_DIR ?= $(CURDIR)/.fleetsim
export FLEETSIM_DIR
# Tests that start a TPM simulator need cgo; the production binary does not. The timeout is per
# package: TestRelease's cold cross-builds of fleetd for two architectures took over 30 minutes on
# a fresh, busy 2-core machine, and CI's own limit (90 minutes for everything) is the one that counts.
TEST_FLAGS ?= -count=1 -timeout 60m

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z][a-z0-9-]*:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: deps
deps: ## install the Debian packages the tests and the dev stack need (only those missing)
	@./scripts/install-deps.sh

# The opt-in tools (scripts/tools.sh list) are built by the targets that run them: make
# test-compat (Tinkerbell v0.12.2), make mutants (gremlins), make lint (golangci-lint, which make
# test runs: make run does not wait for its build).
.PHONY: tools
tools: ## build the third-party tools the tests run (scripts/tools.sh list) once per machine, into a cache outside the checkout
	@for t in $$(./scripts/tools.sh list | awk '$$3 != "opt-in" {print $$1}'); do ./scripts/tools.sh build $$t >/dev/null || exit 1; done

.PHONY: build
build: ## build bin/fleetd (production, static) and bin/fleetsim (development stack)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/fleetd .
	$(GO) build -ldflags '-X main.version=$(VERSION)' -o bin/fleetsim ./dev/fleetsim

.PHONY: run
run: deps tools build ## run the development stack in the foreground (state in $FLEETSIM_DIR)
	bin/fleetsim up

.PHONY: demo
demo: deps tools build ## walk one machine of each class kind through its lifecycle against the dev stack
	bin/fleetsim demo --cert-lifetime 4m

.PHONY: test
# The packages with locks and goroutines run under the race detector in make test (it needs cgo:
# gcc from make deps). workflows has them too but runs without: its tests link the in-process
# Kubernetes API server and etcd, whose race-instrumented build alone took 27 minutes on the
# shared 2-core machine (CI's limit is 90 for everything); the ones below (render among them: one
# Renderer serves every request) cost about 8 minutes of build the first time and a few seconds of
# run after that.
RACE_PKGS := fleet render handlers webhook netbox kea
MODULE    := github.com/folly-infra/fleetd
empty     :=
space     := $(empty) $(empty)
RACE_RE    = ^$(MODULE)/($(subst $(space),|,$(strip $(RACE_PKGS))))$$

# make test also runs every benchmark once (-benchtime 1x, after the package's tests, in the same
# binary), so none can rot unnoticed between `make bench` runs: about 30 s more when warm.
TEST_BENCH := -bench . -benchtime 1x

# make test checks first what fails fastest (the drift checks, vet, golangci-lint), so a finding
# ends the run before the tests' half hour. Warm, the three take under a minute and a half (drift
# 7 s, vet 9 s, golangci-lint 3 s unchanged to 50 s after a wide change); on a fresh machine
# golangci-lint's build (once per machine, scripts/tools.sh) and first run add about 8 minutes.
test: deps tools check-drift vet lint ## the whole test suite (what CI runs): drift checks, vet and golangci-lint first, then the tests (the concurrent packages under -race, every benchmark once) and the covering chaos run
	@$(MAKE) --no-print-directory -j3 test-packages test-race test-chaos

# The three parts of make test's tests, which make test runs at once: each mostly waits (on the
# development stacks' programs, Tinkerbell's Workflows, the chaos run's faults and timeouts), so
# on two cores they take little longer together than the longest alone (docs/testing.md). Each
# also runs on its own. make test fails if any of them fails, after all three have ended.
.PHONY: test-packages test-race test-chaos
# The packages whose tests take minutes, mostly waiting on development stacks and Tinkerbell's
# Workflows: listed first, so that they start first and the short packages fill the slots beside
# them; three test binaries at a time (-p 3), since these wait far more than they compute.
SLOW_PKGS := dev/stack workflows dev/stack/runbooks dev/stack/cluster handlers/clusterauthz
SLOW_RE    = ^$(MODULE)/($(subst $(space),|,$(strip $(SLOW_PKGS))))$$
test-packages: deps tools ## every package's tests but the race detector's and the chaos run's, every benchmark once
	$(GO) test -p 3 $(TEST_FLAGS) $(TEST_BENCH) $(addprefix ./,$(SLOW_PKGS)) $$($(GO) list ./... | grep -v -E '/dev/stack/chaos$$|$(RACE_RE)|$(SLOW_RE)')
test-race: deps tools ## the packages with locks and goroutines (RACE_PKGS) under the race detector, then the SPIRE interoperability module
	$(GO) test $(TEST_FLAGS) $(TEST_BENCH) -race $(addprefix ./,$(RACE_PKGS))
	cd interop/spire && $(GO) test $(TEST_FLAGS) $(TEST_BENCH) ./...
test-chaos: deps tools ## the covering chaos run make test plays (CHAOS_TEST_SEED)
	@$(MAKE) --no-print-directory chaos CHAOS_SEED=$(CHAOS_TEST_SEED) CHAOS_COVERING=1

# The Tinkerbell lifecycle tests against tink v0.12.2 (docs/operate.md, "Tinkerbell"): make test
# runs them against v0.25.0, the Tinkerbell new installs get; this runs the packages that start
# Tinkerbell's own programs again with v0.12.2's (FLEETD_TINKERBELL), building them first (opt-in
# tools: about 8 minutes once per machine). Outside make test's time budget.
COMPAT_PKGS := ./dev/tinkerbell ./workflows ./dev/stack

.PHONY: test-compat
test-compat: deps tools ## the Tinkerbell lifecycle tests against tink v0.12.2 (builds its programs first; opt-in, not in make test)
	@for t in tink-controller tink-server tink-worker; do ./scripts/tools.sh build $$t >/dev/null || exit 1; done
	FLEETD_TINKERBELL=v0.12.2 $(GO) test $(TEST_FLAGS) $(COMPAT_PKGS)

# The randomized fault schedules of dev/stack/chaos (docs/security.md, "Proof under faults"):
# each run prints "schedules=N violations=M not-played=P foreign-writes=W restores=R", the coverage table (each step, fault and kill point:
# drawn, happened, idle, failed) and, for each violation or schedule whose steps did not happen,
# its seed and schedule. A seed is replayed with: go test ./dev/stack/chaos -run TestChaos -seed N
# (CHAOS_SEED=N starts a run there; 0 draws it from the clock). CHAOS_COVERING=1 (make test) plays
# the covering seeds from CHAOS_SEED instead: every step, fault and kill point drawn twice, and
# the run fails unless each happened.
CHAOS_SCHEDULES ?= 5
SOAK_SCHEDULES  ?= 200
CHAOS_SEED      ?= 0
# make test plays the covering seeds from a fixed one, so CI is reproducible and covers every
# kind of step; make chaos and make soak draw new seeds.
CHAOS_TEST_SEED ?= 1
CHAOS_COVERING  ?=
CHAOS_LOG       ?= $(CURDIR)/.chaos.log

.PHONY: chaos soak
chaos: CHAOS_ARGS = -timeout 30m -schedules $(CHAOS_SCHEDULES)
chaos: deps tools ## the checker's tests and a short chaos run (CHAOS_SCHEDULES schedules, default 5)
soak: CHAOS_ARGS = -timeout 0 -run '^TestChaos$$' -schedules $(SOAK_SCHEDULES)
soak: deps tools ## many chaos schedules (SOAK_SCHEDULES, default 200), no time limit
chaos soak:
	@$(GO) test -count=1 -v ./dev/stack/chaos $(CHAOS_ARGS) -seed $(CHAOS_SEED) $(if $(CHAOS_COVERING),-covering) > $(CHAOS_LOG) 2>&1; rc=$$?; \
	  grep -E '^(schedules=|coverage:|--- (PASS|FAIL)|[[:space:]]+chaos_test.go:[0-9]+: (VIOLATION|NOT PLAYED|COVERAGE|chaos:)|[[:space:]]+(replay|not played):)' $(CHAOS_LOG); \
	  if [ $$rc -ne 0 ]; then echo "$@: failed (exit $$rc); the whole output is in $(CHAOS_LOG)"; fi; exit $$rc

.PHONY: test-short
test-short: deps ## the fast inner loop: every package with -short (no development stack, OpenTofu apply, release build or cloud-init validation)
	$(GO) test -short -count=1 ./...

.PHONY: bench
# Where make bench keeps the benchmarks' output for the table it writes into docs/performance.md.
BENCH_OUT ?= $(or $(TMPDIR),/tmp)/fleetd-bench
bench: deps tools ## Go benchmarks, then their table (figure, floor or peer, ratio) written to docs/performance.md
	$(GO) test -run '^$$' -bench . -benchmem -count=1 ./... >$(BENCH_OUT).main.txt 2>&1; s=$$?; cat $(BENCH_OUT).main.txt; exit $$s
	cd interop/spire && $(GO) test -run '^$$' -bench . -benchmem -count=1 ./... >$(BENCH_OUT).spire.txt 2>&1; s=$$?; cat $(BENCH_OUT).spire.txt; exit $$s
	$(GO) run ./dev/benchtable -out docs/performance.md $(BENCH_OUT).main.txt $(BENCH_OUT).spire.txt

FUZZTIME ?= 30s
FUZZ_TARGETS := ./webhook:FuzzWebhook ./handlers:FuzzNodeBodies ./attest:FuzzEventLog ./fleet:FuzzLoadCatalog ./config:FuzzParse

.PHONY: fuzz
fuzz: deps ## run every fuzz target for FUZZTIME each (default 30s); failures land in testdata/fuzz
	@for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; fn=$${t##*:}; \
	  echo "== $$fn ($$pkg, $(FUZZTIME))"; \
	  $(GO) test $$pkg -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZTIME) || exit 1; done

# Mutation testing (docs/testing.md): gremlins mutates each package's operators one at a time and
# runs the package's own tests against each mutant. Opt-in: a package takes minutes (pki) to an
# hour or two (handlers, fleet) on two cores. PKG=attest measures one package; MUTANTS_FILES='bootcheck'
# mutates only the package's files whose name matches (figures printed, not written).
MUTANTS_PKGS    ?= attest pki webhook handlers fleet
MUTANTS_TARGETS ?= attest=90 pki=90 fleet=80 webhook=80 handlers=80
MUTANTS_WORKERS ?= 2
MUTANTS_OUT     ?= $(or $(TMPDIR),/tmp)/fleetd-mutants
MUTANTS_FILES   ?=
PKG ?=

.PHONY: mutants
mutants: deps ## mutation testing with gremlins (PKG=attest for one package): figures into docs/testing.md, fails below a package's efficacy target
	GO='$(GO)' MUTANTS_WORKERS='$(MUTANTS_WORKERS)' MUTANTS_TARGETS='$(MUTANTS_TARGETS)' MUTANTS_FILES='$(MUTANTS_FILES)' \
	  ./scripts/mutants.sh $(MUTANTS_OUT) $(or $(PKG),$(MUTANTS_PKGS))

LOAD_DEVICES ?= 1000
# The NetBox emulator's added latency per request in the load test, e.g. 25ms (a real NetBox's pace).
LOAD_NETBOX_LATENCY ?= 0s
# LOAD_PHASES=storms stops after the two storms (minutes instead of tens of minutes).
LOAD_PHASES ?= all
# LOAD_MODE=steady measures an installed fleet instead of installing it: LOAD_DEVICES sealed active
# devices (LOAD_POOL of them real machines, whose boot checks run), NetBox's latency scaled by page,
# LOAD_STEADY_MINUTES of boot checks at the hourly rate, the authorization webhook's traffic, a storm,
# a renewal wave; LOAD_INSTANCES fleetd instances (docs/performance.md).
LOAD_MODE ?= lifecycle
LOAD_POOL ?= 32
LOAD_INSTANCES ?= 1
LOAD_STEADY_MINUTES ?= 15

.PHONY: load
load: deps tools ## the load test: LOAD_DEVICES (default 1,000) machines installed, storms, every boot check; LOAD_MODE=steady an installed fleet (tens of minutes)
	FLEETD_LOAD=1 LOAD_DEVICES=$(LOAD_DEVICES) LOAD_NETBOX_LATENCY=$(LOAD_NETBOX_LATENCY) LOAD_PHASES=$(LOAD_PHASES) \
	  LOAD_MODE=$(LOAD_MODE) LOAD_POOL=$(LOAD_POOL) LOAD_INSTANCES=$(LOAD_INSTANCES) LOAD_STEADY_MINUTES=$(LOAD_STEADY_MINUTES) \
	  $(GO) test -count=1 -timeout 0 -v -run '^TestLoad$$' ./dev/stack/load

.PHONY: vet
vet: deps ## go vet (the main module and the interop modules with code)
	$(GO) vet ./...
	cd interop/spire && $(GO) vet ./...
	cd interop/quamina && $(GO) vet ./...

# golangci-lint's analysis cache: a stable place outside the checkout, shared by every clone.
LINT_CACHE   ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/golangci-lint
LINT_TIMEOUT ?= 15m

.PHONY: lint
lint: ## golangci-lint v2 with .golangci.yml (built once into the tools cache), bounded by LINT_TIMEOUT
	@lint=$$(./scripts/tools.sh build golangci-lint) && \
		GOLANGCI_LINT_CACHE='$(LINT_CACHE)' nice "$$lint" run --timeout '$(LINT_TIMEOUT)' ./...

.PHONY: check-drift
check-drift: ## fail when gofmt or go mod tidy (the main module and each interop module) would change something
	GO='$(GO)' ./scripts/check-drift.sh

.PHONY: ci
ci: test ## the same as make test, which runs the drift checks and vet itself

.PHONY: release
release: ## static, reproducible fleetd for linux/arm64 and linux/amd64 with SHA256SUMS in dist/
	VERSION='$(VERSION)' DIST=dist GO='$(GO)' ./scripts/release.sh build

.PHONY: release-check
release-check: ## build the release twice and fail unless the two builds are byte-identical
	VERSION='$(VERSION)' GO='$(GO)' ./scripts/release.sh check

.PHONY: clean
clean: ## remove build output and the dev stack's state
	rm -rf bin dist $(FLEETSIM_DIR) $(CHAOS_LOG)
