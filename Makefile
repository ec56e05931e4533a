# fsprof build and entry points. `make run` and `make test` each pull in set-up themselves.
SHELL := /bin/bash
PY_SYS ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
CLANG ?= clang
# bpftool is in /usr/sbin, not on a user's PATH in Debian (make test-unit builds the objects as any user).
BPFTOOL ?= $(or $(shell command -v bpftool),/usr/sbin/bpftool)
ARCH := $(shell uname -m | sed 's/x86_64/x86/;s/aarch64/arm64/')

BPF_SRC := $(wildcard bpf/*.bpf.c)
BPF_OBJ := $(patsubst bpf/%.bpf.c,build/%.bpf.o,$(BPF_SRC))
# The same objects for kernels before task storage (5.10): FSPROF_LEGACY picks the older forms
# (bpf/fsprof.h); kernels/legacy_objects.py checks that no instruction 5.10 refuses crept in.
BPF_LEGACY_OBJ := $(patsubst bpf/%.bpf.c,build/legacy/%.bpf.o,$(BPF_SRC))
BPF_HDR := $(wildcard bpf/*.h)
# Workload engines written in C (where Python's per-call cost would make the workload the bottleneck).
WL_SRC := $(wildcard workloads/*.c)
WL_BIN := $(patsubst workloads/%.c,build/workloads/%,$(WL_SRC))

# Debian packages fsprof needs at run time and in tests (prometheus and golang-go: the independent
# readers of `record --continuous`'s metrics and pprof profiles in tests/test_continuous.py).
DEB_PKGS := clang llvm bpftool libbpf1 libbpf-dev libelf-dev zlib1g-dev e2fsprogs xfsprogs \
            btrfs-progs util-linux bpftrace fio python3-venv liburing-dev libaio-dev libarchive-dev \
            sysbench bonnie++ chromium prometheus golang-go clang-format dmsetup
# The untar workload's real kernel tree; without it the workload generates a synthetic one.
OPT_PKGS := linux-source-6.1

.PHONY: setup deps tracefs build bytecode inferno run report test test-unit test-stress lint bench clean
setup: deps $(VENV)/.installed tracefs build bytecode inferno

# Install only what is missing, so a second `make setup` is quick and needs no network.
deps:
	@missing=$$(for p in $(DEB_PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing: $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi
	@for p in $(OPT_PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$p >/dev/null || \
	  echo "note: $$p could not be installed; the untar workload will use a synthetic tree"; done

$(VENV)/.installed: setup.cfg pyproject.toml
	$(PY_SYS) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,lint]'
	touch $@

# Flame graphs are rendered by inferno (crates.io), which cargo installs into $(CARGO_HOME)/bin:
# fsprof looks there even when it is not on PATH. Without cargo, fsprof writes folded stacks only.
CARGO_HOME ?= $(HOME)/.cargo
CARGO ?= $(firstword $(shell command -v cargo) $(wildcard $(CARGO_HOME)/bin/cargo $(HOME)/.cargo/bin/cargo))
inferno:
	@if command -v inferno-flamegraph >/dev/null || [ -x "$(CARGO_HOME)/bin/inferno-flamegraph" ]; then :; \
	elif [ -n "$(CARGO)" ]; then \
	  echo "installing inferno (cargo install inferno --locked: about a minute)"; \
	  PATH="$(dir $(CARGO)):$$PATH" $(CARGO) install --quiet --locked inferno; \
	else echo "note: cargo not found: fsprof will write flame graphs as folded stacks only (no SVG)"; fi

# What `pip install .` does: the package's bytecode compiled once. Where PYTHONDONTWRITEBYTECODE
# is set (CI, containers), an editable install would otherwise compile every module at every start:
# about 50 ms of `fsprof record`'s start (docs/benchmarks.md).
bytecode: $(VENV)/.installed
	@$(PY) -m compileall -q profiler >/dev/null

tracefs:
	@mountpoint -q /sys/kernel/tracing || mount -t tracefs tracefs /sys/kernel/tracing

build: $(BPF_OBJ) $(BPF_LEGACY_OBJ) $(WL_BIN)

build/vmlinux.h:
	@mkdir -p build
	$(BPFTOOL) btf dump file /sys/kernel/btf/vmlinux format c > $@.tmp && mv $@.tmp $@

build/%.bpf.o: bpf/%.bpf.c $(BPF_HDR) build/vmlinux.h
	$(CLANG) -target bpf -mcpu=v3 -D__TARGET_ARCH_$(ARCH) -g -O2 -Wall -Werror -Ibuild -Ibpf -c $< -o $@

build/legacy/%.bpf.o: bpf/%.bpf.c $(BPF_HDR) build/vmlinux.h kernels/legacy_objects.py
	@mkdir -p build/legacy
	$(CLANG) -target bpf -mcpu=v3 -DFSPROF_LEGACY -D__TARGET_ARCH_$(ARCH) -g -O2 -Wall -Werror -Ibuild -Ibpf -c $< -o $@.tmp
	$(PY_SYS) kernels/legacy_objects.py $@.tmp && mv $@.tmp $@

build/workloads/%: workloads/%.c workloads/phase.h
	@mkdir -p build/workloads
	$(CC) -O2 -g -Wall -Werror -o $@ $< -Wl,--as-needed -lpthread -luring -laio -larchive -lm

# The main job on the embedded default: scratch ext4, xfs and btrfs images, nothing of the user's touched.
run: setup
	$(PY) -m profiler run --fs ext4,xfs,btrfs --workload fsync-loop

# The comparison users come for, in one command: ext4, XFS and btrfs under sysbench-style random
# writes with an fsync after each, explained in one self-contained HTML file (fsprof-report.html).
report: setup
	$(PY) -m profiler run --fs ext4,xfs,btrfs --workload fsync-heavy --file-test-mode rndwr \
	  --file-fsync-freq 1 --time 10 --file-num 16 --file-total-size 256M --html fsprof-report.html

# pytest exits 5 when it collected no test. That passes only when `fsprof doctor` finds a piece of
# the machine missing (the tests skip themselves then); otherwise an empty selection is an error.
test: setup
	@$(PY) -m pytest -q tests $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then \
	  if $(PY) -m profiler doctor; then echo "no test ran, and nothing is missing: failing"; \
	  else echo "no test ran: this machine lacks what the tests need (above)"; rc=0; fi; \
	fi; exit $$rc

# The tests that need no root (-m "not root": no BPF, no mounts), in seconds, for any user who can read
# the tree: only the venv, no cache written into the tree, pytest's temp files in a fresh dir of the
# user's. A user who cannot write the venv (root made it) runs it as it is: refreshing it would fail.
# The BPF objects are built when the user can (test_btf_layout reads their BTF; skipped without).
test-unit: $(if $(shell [ -w $(VENV) ] || [ ! -e $(VENV) ] && echo yes),$(VENV)/.installed) $(if $(shell command -v $(CLANG) && [ -w . ] && { [ -w build ] || [ ! -e build ]; } && echo yes),$(BPF_OBJ))
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	$(PY) -m pytest -q -m "not root" -p no:cacheprovider --basetemp="$$tmp/pytest" tests $(PYTEST_ARGS)

# Static checks (CONTRIBUTING.md), run by CI before the tests: ruff's lint and format check on the
# Python, mypy on profiler/, clang-format (.clang-format: the kernel's style) on bpf/. Needs no root.
LINT_PY := profiler workloads bench kernels tests
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check $(LINT_PY)
	$(VENV)/bin/ruff format --check $(LINT_PY)
	$(VENV)/bin/mypy
	clang-format --dry-run --Werror bpf/*.c bpf/*.h

# The suite on a busy machine (not part of CI): `make test` while stress-ng keeps both CPUs busy
# and writes and fsyncs a file on the root filesystem (`--cpu 2 --hdd 1`), the usual state of a
# shared machine. A figure that agrees with its oracle only on a quiet machine fails here. Not
# `--io`: its sync() in a loop writes back and flushes every filesystem, the scratch ones too,
# which is another workload on the devices under test, not load beside them. stress-ng's own
# --timeout ends it even if this target is killed before its trap runs.
STRESS_DIR := /var/tmp/fsprof-stress-ng
STRESS_ARGS ?= --cpu 2 --hdd 1 --hdd-bytes 256M --hdd-opts fsync --temp-path $(STRESS_DIR)
test-stress: setup
	@dpkg-query -W -f='$${Status}\n' stress-ng 2>/dev/null | grep -q '^install ok installed' || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq stress-ng >/dev/null; }
	@mkdir -p $(STRESS_DIR); stress-ng $(STRESS_ARGS) --timeout 3h --quiet & stress=$$!; \
	trap 'kill $$stress 2>/dev/null; wait $$stress 2>/dev/null; rm -rf $(STRESS_DIR)' EXIT; \
	echo "stress-ng $(STRESS_ARGS) running beside the suite (pid $$stress)"; \
	$(MAKE) --no-print-directory test PYTEST_ARGS="$(PYTEST_ARGS)"

# Benchmarks (never part of `make test`), about 35 minutes: fsprof's own cost (tracing overhead
# against bpftrace and libbpf-tools, PostgreSQL pgbench, start-up, capacity, report, the continuous-mode
# soak; each with and without --stack-sample, and whether sampling changes the causes) and each
# bundled workload against its reference tool; writes docs/benchmarks.md
# (bench/run_all.py). `make bench BENCH_LONG=1`: 10-minute capacity and soak runs; BENCH_QUICK=1: few, short repeats; BENCH_WORKLOADS=0: fsprof's cost only.
# postgresql: bench/bench_pgbench.py runs a cluster of its own on a scratch filesystem (Debian's
# package may also create and start its default cluster on port 5432; the bench does not use it).
BENCH_PKGS := libbpf-tools postgresql
bench: setup
	@missing=$$(for p in $(BENCH_PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing: $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi
	BENCH_QUICK=$(BENCH_QUICK) BENCH_LONG=$(BENCH_LONG) BENCH_WORKLOADS=$(BENCH_WORKLOADS) $(PY) bench/run_all.py

clean:
	rm -rf build

# `make test-kernels` (issues 16, 33): fsprof's checks on Debian's 5.10, 6.1, 6.12 and 6.1 PREEMPT_RT
# kernels, each booted in a qemu VM by virtme-ng with this tree shared, and on the host; prints the
# matrix kernel x check and writes it into docs/kernels.md (kernels/matrix.py). KERNELS picks rows
# (versions in /boot, `rt`, `host`), KERNEL_CHECKS a subset of checks. virtme-ng comes from PyPI
# into its own venv, .venv-vm.
comma := ,
# Debian 11's 5.10 comes from bullseye-security (kernels/install_bullseye_kernel.sh), only when a row
# asks for it (KERNELS holds 5.10): CI's 6.1 row needs no download from another suite.
VM_PKGS := linux-image-amd64 linux-image-6.12-amd64 linux-image-rt-amd64 qemu-system-x86 busybox-static
VM_VENV := .venv-vm
VNG_VERSION := 1.42
KERNELS ?= 5.10,6.1,6.12,rt,host
KERNEL_CHECKS ?=
KERNEL_MATRIX_ARGS ?=
.PHONY: vm-deps test-kernels
vm-deps:
	@missing=$$(for p in $(VM_PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing: $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi
	@$(if $(filter 5.10,$(subst $(comma), ,$(KERNELS))),kernels/install_bullseye_kernel.sh)
	@[ -x $(VM_VENV)/bin/vng ] || { $(PY_SYS) -m venv $(VM_VENV) && \
	  $(VM_VENV)/bin/pip install -q virtme-ng==$(VNG_VERSION); }

test-kernels: setup vm-deps
	$(PY) -m kernels.matrix --kernels $(KERNELS) $(if $(KERNEL_CHECKS),--checks $(KERNEL_CHECKS)) $(KERNEL_MATRIX_ARGS)
