# The two set-up commands are `make run` and `make test`; both install what they need.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-12)

.PHONY: run test check doctor install node-packages binaries corpus images image release lint unit integration e2e clean

# What the goals asked need of the machine, checked before anything is installed or built (all problems at
# once, each with what to do): `make check` Python and its venv only; the rest also Go, root, the cgroups,
# free disk and the registries (controlplane/doctor.py).
DOCTOR_FOR := $(if $(filter doctor test integration e2e binaries corpus images,$(MAKECMDGOALS)),test,$(if $(filter run release image node-packages,$(MAKECMDGOALS)),run,check))

## doctor: what `make run` and `make test` need of this machine, checked (each of them runs it first)
doctor:
	@$(PYTHON) controlplane/doctor.py --for $(DOCTOR_FOR)

$(STAMP): pyproject.toml | doctor
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,tools]'
	@rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

# The suite runs in WORKERS processes (pytest-xdist), each module whole in one of them, the modules handed out
# in the order they are collected (tests/conftest.py, worker_group); WORKERS=0 runs it in one.
WORKERS ?= 3
PARALLEL := $(if $(filter 0,$(WORKERS)),,--numprocesses=$(WORKERS))

## node-packages: containerd, runc, the CNI plugins, iptables, buildah, mmdebstrap, gcc and libc6-dev (Debian;
## pinned, but libc6-dev, which must match the host libc; root)
node-packages: | doctor
	@bash controlplane/node-packages.sh

## binaries: the Kubernetes binaries (API server, controllers, scheduler, kubelet, kube-proxy) and etcd of
## every release the suite runs (kubernetes-pins), Config Sync (every release the suite tests:
## configsync-pins), client-go's informers (the API-fault tests' yardstick), git-sync, the OpenTelemetry
## Collector, metrics-server, VPA and cert-manager, built once and cached, two at a time
## (controlplane/build_all.sh); promtool (it tests the alert rules) from Debian's package
binaries: node-packages
	@bash controlplane/build_all.sh

## corpus: the manifest corpus the differential tests read, from its archive (OBJCOUNT_MANIFEST_CORPUS, else
## ../shared) or its public repositories at the pinned commits, checked and kept in the cache (controlplane/sources.py)
corpus: | doctor
	@$(PYTHON) controlplane/sources.py corpus >/dev/null

## images: every image the suite's real nodes run (ours, Config Sync's, VPA's, ...), each cached, built before the
## tests so no test waits on a build (controlplane/suite_images.py)
images: install node-packages binaries
	@$(BIN)/python -m controlplane.suite_images

## image: our image from this checkout's Dockerfile (buildah; the base is a local stand-in, see README)
image: install node-packages
	$(BIN)/python -m controlplane.images

## release: into dist/, four manifests naming our image (built as `make image` builds it) by digest,
## objcount-cluster.yaml, objcount-cluster-cert-manager.yaml, objcount-sidecar.yaml and
## objcount-sidecar-cert-manager.yaml, the script objcount-certificate.sh (the webhook's certificate
## without cert-manager), the CLI's wheel, and that image as an OCI archive to push (controlplane/release.py):
##   make release VERSION=0.1.0 IMAGE=registry.example/team/objcount-autoscaler
release: install node-packages
	@test -n "$(VERSION)" -a -n "$(IMAGE)" || { echo "usage: make release VERSION=0.1.0 IMAGE=REGISTRY/objcount-autoscaler" >&2; exit 2; }
	$(BIN)/python -m controlplane.release --version "$(VERSION)" --image "$(IMAGE)"

## run: the service against the local control plane, whatever $$KUBECONFIG says; `make run CLUSTER=PATH`: against
## the cluster of that kubeconfig instead
run: install binaries
	$(BIN)/python -m controlplane.demo $(if $(CLUSTER),--kubeconfig $(CLUSTER))

## test: lint, type-check and every test (unit, integration on a real kube-apiserver + etcd and on real
## Config Sync, e2e if kind)
test: install binaries images corpus lint
	$(BIN)/pytest $(PARALLEL)

## check: the fast loop for every edit: lint, type-check and the unit tests (no cluster, no build)
check: lint unit

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	@# Dead code: what vulture finds unused in the wheel (autoscaler/, inventory/), tooling's uses counted.
	! $(BIN)/vulture autoscaler inventory controlplane profiles | grep -E '^(autoscaler|inventory)/'

unit: install
	$(BIN)/pytest $(PARALLEL) tests/unit

integration: install binaries images corpus
	$(BIN)/pytest $(PARALLEL) tests/integration

e2e: install binaries images
	$(BIN)/pytest $(PARALLEL) tests/e2e

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
