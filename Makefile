# The one task runner. `make serve` and `make test` are all a newcomer needs.
# The virtualenv's interpreter: the image's, Debian's /usr/bin/python3.11 (built with
# profile-guided and link-time optimisation), when the machine has it, else python3.
# A pyenv build without --enable-optimizations serves 6-15% less, by the machine
# (docs/performance.md).
PYTHON ?= $(firstword $(wildcard /usr/bin/python3.11) python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: serve check test test-prerequisites lint lint-code lint-openapi typecheck docs unit browser servers operator-tools image kubernetes-tools kubernetes-check kubernetes-pin clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,docs]'
	touch $(STAMP)

## serve: install into .venv and serve http://127.0.0.1:8000/v1 on the embedded SQLite database
serve: $(STAMP)
	$(BIN)/petstore serve

## test: lint, type-check, lint the OpenAPI document, build the docs site, check the Kubernetes manifests and run the whole test suite (schemathesis included)
test: lint typecheck lint-openapi docs kubernetes-check unit

## check: the loop for development, under 2 minutes and with nothing installed by apt: lint-code, typecheck and the tests that start no server process, on SQLite, on both cores (pytest --in-process -n 2)
check: lint-code typecheck
	$(BIN)/pytest --in-process -n 2 -q

## lint: lint-code, and the image's locks up to date with pyproject.toml (uv pip compile, from uv's cache when it has what they need, else the package index)
lint: lint-code
	$(BIN)/python -m release.image lock --check

## lint-code: ruff, the layer contracts (import-linter) and every imported distribution declared (deptry)
lint-code: $(STAMP)
	$(BIN)/ruff check src tests testbed bench release
	$(BIN)/ruff format --check src tests testbed bench release
	$(BIN)/lint-imports --no-cache
	$(BIN)/deptry .

typecheck: $(STAMP)
	$(BIN)/mypy

## docs: the docs site from docs/ into build/docs (Sphinx, MyST, autodoc; docs/contributing.md), strict: a broken link or anchor, a page missing from the navigation or a docstring reference that resolves to nothing fails it
DOCS_SITE := build/docs
docs: $(STAMP)
	rm -rf $(DOCS_SITE)
	$(BIN)/sphinx-build -b html -n -W --keep-going -q docs $(DOCS_SITE)
	@echo "The docs site: $(DOCS_SITE)/index.html"

# Redocly CLI (npm), pinned, in .tools, its telemetry off; Debian's nodejs is installed when missing.
REDOCLY_VERSION := 2.77.0
REDOCLY := .tools/node_modules/.bin/redocly
$(REDOCLY):
	@command -v npm >/dev/null 2>&1 || { \
	  echo "Installing Debian's nodejs and npm for the OpenAPI lint..."; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm) \
	    >/dev/null 2>&1 || echo "Could not install nodejs (needs root and apt)."; }
	npm install --no-audit --no-fund --silent --prefix .tools @redocly/cli@$(REDOCLY_VERSION)

# The README's TypeScript route (npm, pinned, in .tools): openapi-typescript generates
# types from the served document, tsc type-checks clients/typescript/check.ts with them.
OPENAPI_TYPESCRIPT_VERSION := 7.13.0
OPENAPI_FETCH_VERSION := 0.17.0
TYPESCRIPT_VERSION := 5.9.3
OPENAPI_TYPESCRIPT := .tools/node_modules/.bin/openapi-typescript
$(OPENAPI_TYPESCRIPT): $(REDOCLY)
	npm install --no-audit --no-fund --silent --prefix .tools \
	  @redocly/cli@$(REDOCLY_VERSION) openapi-typescript@$(OPENAPI_TYPESCRIPT_VERSION) \
	  openapi-fetch@$(OPENAPI_FETCH_VERSION) typescript@$(TYPESCRIPT_VERSION)

## lint-openapi: the served OpenAPI document through openapi-spec-validator and Redocly's recommended rules, and the README's TypeScript types type-checked
lint-openapi: $(STAMP) $(REDOCLY) $(OPENAPI_TYPESCRIPT)
	@mkdir -p .tools/typescript
	$(BIN)/petstore openapi > .tools/openapi.json
	$(BIN)/openapi-spec-validator .tools/openapi.json
	REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true $(REDOCLY) lint --config redocly.yaml .tools/openapi.json
	cp clients/typescript/check.ts clients/typescript/tsconfig.json .tools/typescript/
	$(OPENAPI_TYPESCRIPT) .tools/openapi.json --default-non-nullable false -o .tools/typescript/petstore-api.ts
	.tools/node_modules/.bin/tsc -p .tools/typescript/tsconfig.json

# On both cores; the tests that share the test hosts or HAProxy's ports (the xdist
# group "hosts") run one after another on one of them.
unit: $(STAMP) browser servers operator-tools
	$(BIN)/pytest -n 2 --dist loadgroup

## test-prerequisites: everything make test installs, so that it can then run with no network (the image included)
test-prerequisites: $(STAMP) $(REDOCLY) $(OPENAPI_TYPESCRIPT) browser servers operator-tools image kubernetes-tools
	$(BIN)/python -m release.image lock --check

# The suite starts its own PostgreSQL and Redis (tests/servers.py), and its short
# chaos run the whole deployment (deploy/), from Debian's binaries (tcpdump: the
# wire capture); install the packages when missing, saying so in one line.
servers:
	@missing=""; \
	{ command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; } || missing="$$missing postgresql"; \
	command -v redis-server >/dev/null 2>&1 || missing="$$missing redis-server"; \
	command -v haproxy >/dev/null 2>&1 || missing="$$missing haproxy"; \
	command -v pg_autoctl >/dev/null 2>&1 || missing="$$missing postgresql-15-auto-failover pg-auto-failover-cli"; \
	command -v keepalived >/dev/null 2>&1 || missing="$$missing keepalived"; \
	command -v ip >/dev/null 2>&1 || missing="$$missing iproute2"; \
	command -v iptables >/dev/null 2>&1 || missing="$$missing iptables"; \
	command -v pgbackrest >/dev/null 2>&1 || missing="$$missing pgbackrest"; \
	command -v openssl >/dev/null 2>&1 || missing="$$missing openssl"; \
	command -v curl >/dev/null 2>&1 || missing="$$missing curl"; \
	command -v socat >/dev/null 2>&1 || missing="$$missing socat"; \
	command -v tcpdump >/dev/null 2>&1 || missing="$$missing tcpdump"; \
	[ -z "$$missing" ] || { \
	  echo "Installing Debian's$$missing for the test servers and the deployment..."; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing) \
	    >/dev/null 2>&1 || echo "Could not install$$missing (needs root and apt)."; }

## cluster: the deployment on loopback: HAProxy at https://127.0.0.1:8080/v1 (the test bed's CA in .cluster/certificates/ca.crt), 3 instances, PostgreSQL (monitor + 3 data nodes) with failover, Redis (make cluster ARGS="--instances 5 --environment staging"; ARGS="--hosts": every part on a test host, a network namespace of its own)
.PHONY: cluster cluster-down chaos chaos-network
cluster: $(STAMP) servers
	$(BIN)/python -m testbed.cluster_command up $(ARGS)

## cluster-down: stop everything make cluster started; fails if a process, port or test host (namespace) is left
cluster-down: $(STAMP)
	$(BIN)/python -m testbed.cluster_command down

## chaos: faults under load through HAProxy (kill, rolling restart, failover, Redis), at most 10 minutes (make chaos ARGS="--rounds 1")
chaos: $(STAMP) servers
	timeout --signal=INT 600 $(BIN)/python -m testbed.chaos $(ARGS)

## chaos-network: the deployment on test hosts under a seeded schedule of partitions, pauses, packet loss and kills, the history checked; at most 15 minutes, about 9 by default here (make chaos-network ARGS="--duration 120 --seed 7")
chaos-network: $(STAMP) servers
	timeout --signal=INT --kill-after=60 900 $(BIN)/python -m testbed.chaos_network $(ARGS)

## recovery-drill: D28 on test hosts under load: the primary lost with no gap left in the archive, an operator's mistake undone by a restore to the moment before it (pgBackRest), then every data node lost and restored to the latest point, each step timed; at most 15 minutes (make recovery-drill ARGS="--load 60"; a store of a million animals seeded by COPY first, about 5 minutes: ARGS="--animals 1000000")
.PHONY: recovery-drill
recovery-drill: $(STAMP) servers
	timeout --signal=INT --kill-after=60 900 $(BIN)/python -m testbed.recovery_drill $(ARGS)

# The operator's kit (deploy/image, deploy/prometheus, deploy/systemd) and its tests
# use Debian's mmdebstrap, buildah, podman, runc and binutils (the image), prometheus (promtool
# and the live rules test), prometheus-postgres-exporter and pgbackrest (the backup
# alerts' live test), prometheus-blackbox-exporter (the certificate alerts' live
# test), faketime (the backup retention test) and systemd-analyze; install them when
# missing.
operator-tools:
	@missing=""; \
	for tool in mmdebstrap buildah podman; do \
	  command -v $$tool >/dev/null 2>&1 || missing="$$missing $$tool"; done; \
	command -v runc >/dev/null 2>&1 || [ -x /usr/sbin/runc ] || missing="$$missing runc"; \
	command -v strip >/dev/null 2>&1 || missing="$$missing binutils"; \
	command -v promtool >/dev/null 2>&1 || missing="$$missing prometheus"; \
	command -v prometheus-postgres-exporter >/dev/null 2>&1 || missing="$$missing prometheus-postgres-exporter"; \
	command -v prometheus-blackbox-exporter >/dev/null 2>&1 || missing="$$missing prometheus-blackbox-exporter"; \
	command -v pgbackrest >/dev/null 2>&1 || missing="$$missing pgbackrest"; \
	command -v faketime >/dev/null 2>&1 || missing="$$missing faketime"; \
	command -v systemd-analyze >/dev/null 2>&1 || missing="$$missing systemd"; \
	[ -z "$$missing" ] || { \
	  echo "Installing Debian's$$missing for the image, the alert tests and the unit checks..."; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing) \
	    >/dev/null 2>&1 || echo "Could not install$$missing (needs root and apt)."; }

## image: build localhost/petstore:<version> from Debian's packages and the wheels locked with their hashes in deploy/image, no registry (the first build needs the network; then cached in .tools/image); re-lock with `.venv/bin/python -m release.image lock`
image: $(STAMP) operator-tools
	$(BIN)/python -m release.image

# make kubernetes-check's checkers, in a virtualenv of their own under .tools so that
# the project's dependencies (and deptry) never see them. Exact versions: checkov's
# checks and kubernetes-validate's schemas come with the version (1.37.0 ships the
# schemas of Kubernetes 1.25 to 1.37 inside the package, so it validates offline),
# and a new check must not fail a tree that passed. kubectl (its kustomize renders
# the overlays) is the machine's; Debian's kubernetes-client (1.20) is too old for
# the overlays.
CHECKOV_VERSION := 3.3.30
KUBERNETES_VALIDATE_VERSION := 1.37.0
K8S_VENV := .tools/k8s-venv
K8S_STAMP := $(K8S_VENV)/.installed-$(CHECKOV_VERSION)-$(KUBERNETES_VALIDATE_VERSION)
$(K8S_STAMP):
	rm -rf $(K8S_VENV)
	$(PYTHON) -m venv $(K8S_VENV)
	$(K8S_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(K8S_VENV)/bin/python -m pip install --quiet checkov==$(CHECKOV_VERSION) kubernetes-validate==$(KUBERNETES_VALIDATE_VERSION)
	touch $@

kubernetes-tools: $(K8S_STAMP)
	@command -v kubectl >/dev/null 2>&1 || { \
	  echo "Installing kubectl for the Kubernetes manifests' check..."; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kubectl) \
	    >/dev/null 2>&1 || echo "Could not install kubectl: install kubectl 1.27 or later (kustomize 5)."; }

## kubernetes-check: the overlays of deploy/kubernetes rendered (kubectl kustomize), validated for Kubernetes 1.32-1.37 (strict), scanned by checkov (no failed check), the pinned image digest compared with the image's, and the local overlay run under podman kube play (201, drained stop, nothing left)
kubernetes-check: $(STAMP) kubernetes-tools operator-tools image
	$(BIN)/python -m release.kubernetes

## kubernetes-pin: write the digest of the image make image built into the production and staging overlays (after a change to what the image is made from; commit it on its own)
kubernetes-pin: $(STAMP) operator-tools image
	$(BIN)/python -m release.kubernetes pin

# The docs-page test drives Debian's chromium headless; install it when missing.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "Installing Debian's chromium for the browser test..."; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) \
	    >/dev/null 2>&1 || echo "Could not install chromium (needs root and apt)."; }

## bench: load benchmark of petstore serve against a raw ASGI baseline (flags: make bench ARGS="--help")
.PHONY: bench
bench: $(STAMP)
	$(BIN)/python -m bench $(ARGS)

## compare: two versions served at once on one core, AFTER/BEFORE req/s (make compare ARGS="main .")
.PHONY: compare
compare: $(STAMP)
	$(BIN)/python -m bench.compare $(ARGS)

## profile: where a request's CPU time goes, step by step, in the service and in the baseline under the load of make bench (py-spy): flame graphs into bench/results/profile/ and the table on stdout (make profile ARGS="--scenarios S3 --backend postgres")
.PHONY: profile
profile: $(STAMP)
	$(BIN)/python -m bench.profile $(ARGS)

## instructions: the machine instructions one read costs the app in process (valgrind), for each revision: the same count whatever the machine does (make instructions ARGS="main . --scenarios S1,S3")
.PHONY: instructions
instructions: $(STAMP)
	$(BIN)/python -m bench.instructions $(ARGS)

## tail: the latency distribution of durable creates (S4, 64 connections) with what the worker did meanwhile: collections, commits, batches, event-loop lateness, log writes (make tail ARGS="--variants shipped,no-autocheckpoint --repeat 3")
.PHONY: tail
tail: $(STAMP)
	$(BIN)/python -m bench.tail $(ARGS)

## soak: a mixed load against one instance, 5 min by default (make soak ARGS="--duration 60")
.PHONY: soak
soak: $(STAMP)
	$(BIN)/python -m bench.soak $(ARGS)

clean:
	rm -rf $(VENV) .tools data build .pytest_cache .mypy_cache .ruff_cache .hypothesis
