# vtlab — the one build. `make` builds ./vtlab; `make test` runs every test;
# `make run` is the README's main job. Every target that needs a Debian package
# depends on `deps`, which installs only what is missing.
#
# Variables worth knowing:
#   BUILD=dir        where objects go (build/ by default; sanitize and mutation
#                    builds use their own dirs so they never mix with the main one)
#   EXTRA_CFLAGS     added to every C compile (e.g. -DVT_MUTATE_...)
#   NO_CUDA=1        build CPU-only even when nvcc is present
#   FUZZ_SECONDS=N   length of each fuzz run in `make test` (default 15)

SHELL     := /bin/bash
CC        ?= gcc
BUILD     ?= build
PYTHON    := /usr/bin/python3
FUZZ_SECONDS ?= 15
# Parallel jobs for the builds inside test, sanitize and mutation (the tests
# themselves still run one at a time).
JOBS      := $(shell nproc 2>/dev/null || echo 2)

# Synthetic models: an installed vtlab keeps them in ~/.cache/vtlab; the
# targets here (make run, the tests, make nightly) keep them in build/models/,
# where they always were and `make clean` removes them.
export VTLAB_CACHE ?= $(CURDIR)/build

CSTD      := -std=c11 -D_GNU_SOURCE
WARN      := -Wall -Wextra -Wshadow -Wno-unused-parameter
OPT       ?= -O2 -g
CFLAGS    := $(CSTD) $(WARN) $(OPT) -fopenmp -I. $(EXTRA_CFLAGS)
LDLIBS    := -Wl,--as-needed -lsqlite3 -lcjson -lopenblas -lm -fopenmp
LDFLAGS   ?=

DEB_PACKAGES := libsqlite3-dev libcjson-dev libopenblas-dev gnuplot-nox python3-numpy python3-jsonschema libcmocka-dev clang libomp-dev g++ make

MODEL_SRC   := $(wildcard model/*.c)
HARNESS_SRC := $(wildcard harness/*.c)
MODEL_OBJ   := $(MODEL_SRC:%.c=$(BUILD)/%.o)
HARNESS_OBJ := $(filter-out $(BUILD)/harness/main.o,$(HARNESS_SRC:%.c=$(BUILD)/%.o))
LIBHARNESS  := $(BUILD)/libvtharness.a
UNIT_SRC    := $(wildcard tests/unit/test_*.c)
UNIT_BIN    := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
LIBMODEL    := $(BUILD)/libvtmodel.a

# CUDA backend: compiled whenever nvcc exists and the cuBLAS/cudart libraries
# can be found next to it (and NO_CUDA is not set). nvcc may be a wrapper script
# outside the toolkit (CI has /usr/local/bin/nvcc exec'ing the real one), so the
# toolkit root is asked of nvcc itself (its -dryrun TOP), not derived from the path.
NVCC := $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
ifeq ($(NO_CUDA),1)
NVCC :=
endif
ifneq ($(NVCC),)
CUDA_HOME := $(shell $(NVCC) -dryrun -x cu -c /dev/null -o /dev/null 2>&1 | sed -n 's/^\#\$$ TOP=//p' | head -n1)
CUDA_HOME := $(abspath $(if $(CUDA_HOME),$(CUDA_HOME),$(patsubst %/bin/nvcc,%,$(NVCC))))
CUDA_LIBDIR := $(firstword $(foreach d,$(CUDA_HOME)/lib64 $(CUDA_HOME)/lib $(wildcard $(CUDA_HOME)/targets/*/lib), \
                 $(if $(wildcard $(d)/libcublas.so),$(d))))
ifeq ($(CUDA_LIBDIR),)
$(info vtlab: nvcc found ($(NVCC)) but no libcublas.so under $(CUDA_HOME); building CPU-only)
NVCC :=
endif
endif
# nvcc found is not enough to build the CUDA objects into this build: they are
# built where they can run (a GPU is present) or when asked (CUDA=1; `make cuda`
# builds them in $(BUILD)/cuda). So `make run` and the CPU tests never wait for
# nvcc on a machine without a GPU; `make test` still checks that they compile.
HAVE_GPU  := $(shell { nvidia-smi -L 2>/dev/null | grep -q '^GPU'; } || [ -e /dev/nvidia0 ] && echo 1)
CUDA      ?= $(HAVE_GPU)
BUILD_CUDA := $(if $(NVCC),$(filter 1,$(CUDA)))
ifeq ($(BUILD_CUDA),1)
CUDA_SRC  := $(wildcard model/cuda/*.cu)
CUDA_OBJ  := $(CUDA_SRC:%.cu=$(BUILD)/%.o)
NVFLAGS   := -O2 -std=c++17 -I. -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
             -Xcompiler -fPIC,-Wall
CFLAGS    += -DVT_HAVE_CUDA
LDLIBS    += -L$(CUDA_LIBDIR) -Wl,-rpath,$(CUDA_LIBDIR) -lcublas -lcudart -lstdc++
else
CUDA_OBJ  :=
endif

.PHONY: all deps deps-slurm cuda-info test unit cli-test reference-test slurm-test fuzz sanitize mutation run bench clean knobs-doc cli-doc

all: deps vtlab

# What the CUDA detection above decided (tests/cli/test_build.sh checks it).
cuda-info:
	@echo "NVCC=$(NVCC)"; echo "CUDA_HOME=$(CUDA_HOME)"; echo "CUDA_LIBDIR=$(CUDA_LIBDIR)"; \
	 echo "HAVE_GPU=$(HAVE_GPU)"; echo "BUILD_CUDA=$(BUILD_CUDA)"

# The CUDA backend in its own build dir (the same sources, with -DVT_HAVE_CUDA):
# the binaries a GPU machine runs, and on any machine with nvcc the check that
# the .cu files compile and link (a `make test` suite).
.PHONY: cuda cuda-compile
cuda: deps
	@if [ -z "$(NVCC)" ]; then echo "make cuda: no usable nvcc (see make cuda-info)" >&2; exit 1; fi
	$(MAKE) --no-print-directory CUDA=1 BUILD=$(BUILD)/cuda $(BUILD)/cuda/vtlab $(BUILD)/cuda/tests/test_cuda $(BUILD)/cuda/bench_cuda
cuda-compile:
	@mkdir -p $(BUILD)/logs; if [ -z "$(NVCC)" ]; then echo "cuda: 0 passed, 0 failed (no nvcc: not checked)" > $(BUILD)/logs/cuda.log; \
	elif $(MAKE) --no-print-directory cuda > $(BUILD)/logs/cuda-build.log 2>&1; then echo "cuda: 1 passed, 0 failed" | tee $(BUILD)/logs/cuda.log; \
	else tail -30 $(BUILD)/logs/cuda-build.log; echo "cuda: 0 passed, 1 failed" | tee $(BUILD)/logs/cuda.log; exit 1; fi

# ---------------------------------------------------------------- dependencies
# Quiet and idempotent: dpkg -s decides what is missing; only that is installed.
deps:
	@missing=""; for p in $(DEB_PACKAGES); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "make deps: installing$$missing"; \
	  if [ "$$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi; \
	  $$SUDO apt-get update -qq >/dev/null && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing >/dev/null \
	  || { echo "make deps: apt-get install$$missing failed" >&2; exit 1; }; \
	fi
ifeq ($(NVCC),)
	@echo "make: nvcc not found; building the CPU backend only"
else ifneq ($(BUILD_CUDA),1)
	@echo "make: no GPU here; building the CPU backend only (make cuda builds the CUDA one)"
endif

# Slurm and munge, for tests/slurm only (`make slurm-test`, part of `make
# test`): installed when missing, never required by anything else. When
# they cannot be installed the test reports itself skipped.
SLURM_PACKAGES := slurm-wlm munge
deps-slurm:
	@missing=""; for p in $(SLURM_PACKAGES); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "make deps-slurm: installing$$missing"; \
	  if [ "$$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi; \
	  $$SUDO apt-get update -qq >/dev/null && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing >/dev/null \
	  || echo "make deps-slurm: apt-get install$$missing failed; the Slurm test will be skipped" >&2; \
	fi

# ---------------------------------------------------------------------- build
# The code version (commit, dirty flag, compiler, flags) is written to a
# generated header that is rewritten only when its text changes, so a commit
# rebuilds one object, not the tree.
# A dirty tree gets "+dirty.<hash of the diff and untracked sources>" on its
# commit, so two different uncommitted states never share a code version.
VT_DIRTY := $(shell test -z "$$(git status --porcelain 2>/dev/null)" && echo 0 || echo 1)
VT_GIT   := $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$(if $(filter 1,$(VT_DIRTY)),+dirty.$(shell { git diff HEAD; git ls-files --others --exclude-standard | xargs -r cat; } 2>/dev/null | sha256sum | cut -c1-12))
BUILD_INFO_TEXT := \#define VT_GIT_COMMIT "$(VT_GIT)"\n\#define VT_GIT_DIRTY $(VT_DIRTY)\n\#define VT_COMPILER "$(shell $(CC) -dumpfullversion 2>/dev/null) $(CC)"\n\#define VT_BUILD_FLAGS "$(OPT) $(EXTRA_CFLAGS)$(if $(BUILD_CUDA), cuda,)"\n
$(BUILD)/gen/build_info.h: FORCE
	@mkdir -p $(dir $@)
	@printf '$(BUILD_INFO_TEXT)' > $@.tmp
	@cmp -s $@.tmp $@ && rm -f $@.tmp || mv $@.tmp $@
$(BUILD)/model/build_info.o: $(BUILD)/gen/build_info.h
$(BUILD)/model/build_info.o: CFLAGS += -I$(BUILD)/gen
.PHONY: FORCE
FORCE:

# Each object depends on the headers it includes (-MMD writes them to X.d,
# read back below; -MP keeps a deleted header from breaking the build).
$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@
-include $(MODEL_OBJ:.o=.d) $(HARNESS_OBJ:.o=.d) $(BUILD)/harness/main.d

$(BUILD)/model/cuda/%.o: model/cuda/%.cu $(wildcard model/*.h model/cuda/*.h)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c $< -o $@

$(LIBMODEL): $(MODEL_OBJ) $(CUDA_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(LIBHARNESS): $(HARNESS_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/vtlab: $(BUILD)/harness/main.o $(LIBHARNESS) $(LIBMODEL)
	$(CC) $(CFLAGS) $(LDFLAGS) $^ $(LDLIBS) -o $@

# copy-and-rename: a running ./vtlab (a sweep in another shell) keeps its inode
vtlab: $(BUILD)/vtlab
	cp $< $@.tmp && mv -f $@.tmp $@

# ---------------------------------------------------------------------- tests
$(BUILD)/tests/%: tests/unit/%.c tests/unit/vt_test.h tests/unit/vt_test_model.h tests/unit/vt_test_moe.h $(LIBHARNESS) $(LIBMODEL)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) $(TEST_LDFLAGS) $< $(LIBHARNESS) $(LIBMODEL) -lcmocka $(LDLIBS) -o $@

# test_oom fails the library's allocations one by one through linker-wrapped
# malloc/calloc/realloc (tests/unit/test_oom.c).
# (its own variable: `make sanitize` sets LDFLAGS on the command line, which would override it)
$(BUILD)/tests/test_oom: TEST_LDFLAGS := -Wl,--wrap=malloc -Wl,--wrap=calloc -Wl,--wrap=realloc

# Each suite also leaves its output in $(BUILD)/logs/ for tests/summarize.sh.
unit: deps $(UNIT_BIN)
	@mkdir -p $(BUILD)/logs; : > $(BUILD)/logs/unit.log; fail=0; for t in $(UNIT_BIN); do \
	  echo "== $$t" | tee -a $(BUILD)/logs/unit.log; \
	  $$t > $(BUILD)/logs/unit.tmp 2>&1 || fail=1; cat $(BUILD)/logs/unit.tmp | tee -a $(BUILD)/logs/unit.log; done; \
	rm -f $(BUILD)/logs/unit.tmp; exit $$fail

cli-test: deps vtlab $(BUILD)/bench
	@mkdir -p $(BUILD)/logs
	set -o pipefail; BENCH=$(BUILD)/bench bash tests/cli/run.sh ./vtlab 2>&1 | tee $(BUILD)/logs/cli.log

# A real single-node Slurm (tests/slurm/test_slurm.sh, ~10 s): skipped, never
# passed, where the daemons cannot start.
slurm-test: deps vtlab
	@mkdir -p $(BUILD)/logs
	@$(MAKE) --no-print-directory deps-slurm || true
	set -o pipefail; bash tests/slurm/test_slurm.sh ./vtlab 2>&1 | tee $(BUILD)/logs/slurm.log

reference-test: deps vtlab
	@mkdir -p $(BUILD)/logs
	set -o pipefail; bash tests/reference/run.sh ./vtlab 2>&1 | tee $(BUILD)/logs/reference.log

FUZZ_TARGETS := $(patsubst tests/fuzz/fuzz_%.c,$(BUILD)/fuzz/fuzz_%,$(wildcard tests/fuzz/fuzz_*.c))
# The library sources are compiled once with the sanitizers and coverage
# (fuzzer-no-link); each target links them with its own entry point.
FUZZ_FLAGS := $(CSTD) -O1 -g -I. -I$(BUILD)/gen
FUZZ_LIB_OBJ := $(patsubst %.c,$(BUILD)/fuzz/obj/%.o,$(MODEL_SRC) $(filter-out harness/main.c,$(HARNESS_SRC)))
$(BUILD)/fuzz/obj/%.o: %.c $(wildcard model/*.h) $(wildcard harness/*.h) $(BUILD)/gen/build_info.h
	@mkdir -p $(dir $@)
	clang $(FUZZ_FLAGS) -fopenmp -fsanitize=fuzzer-no-link,address,undefined -c $< -o $@
.SECONDARY: $(FUZZ_LIB_OBJ)
$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_LIB_OBJ)
	@mkdir -p $(dir $@)
	clang $(FUZZ_FLAGS) -fsanitize=fuzzer,address,undefined $< $(FUZZ_LIB_OBJ) -lcjson -lsqlite3 -lopenblas -lm -fopenmp -o $@

fuzz: deps $(FUZZ_TARGETS)
	@mkdir -p $(BUILD)/logs; pass=0; fail=0; for f in $(FUZZ_TARGETS); do \
	  name=$$(basename $$f); corpus=$(BUILD)/fuzz/corpus-$$name; mkdir -p $$corpus; \
	  echo "== $$name for $(FUZZ_SECONDS)s (seeds: tests/fuzz/seeds/$$name)"; \
	  if $$f -max_total_time=$(FUZZ_SECONDS) -print_final_stats=0 $$corpus tests/fuzz/seeds/$$name >$(BUILD)/fuzz/$$name.log 2>&1; \
	  then pass=$$((pass + 1)); grep -E "^Done|runs in" $(BUILD)/fuzz/$$name.log | tail -1; \
	  else fail=$$((fail + 1)); echo "FAILED: $$name"; tail -40 $(BUILD)/fuzz/$$name.log; fi; \
	done; echo "fuzz: $$pass passed, $$fail failed" | tee $(BUILD)/logs/fuzz.log; [ $$fail -eq 0 ]

# Every suite runs even when an earlier one fails (each in its own make, its
# exit status noted in logs/suites); the summary's last line is always
# "tests: N passed, M failed, S skipped" and its status is the run's.
TEST_SUITES := unit cli-test reference-test slurm-test fuzz cuda-compile
test: deps vtlab
	@rm -rf $(BUILD)/logs; mkdir -p $(BUILD)/logs; \
	$(MAKE) --no-print-directory -j$(JOBS) $(UNIT_BIN) $(BUILD)/bench $(FUZZ_TARGETS) >/dev/null 2>&1 || true; \
	for s in $(TEST_SUITES); do \
	  $(MAKE) --no-print-directory $$s; echo "$$s $$?" >> $(BUILD)/logs/suites; \
	done; bash tests/summarize.sh $(BUILD)/logs

# Unit tests under AddressSanitizer and UBSan, in their own build dir.
sanitize: deps
	$(MAKE) --no-print-directory -j$(JOBS) BUILD=build/san NO_CUDA=1 OPT="-O1 -g" \
	  EXTRA_CFLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" \
	  LDFLAGS="-fsanitize=address,undefined" unit

# Each mutation rebuilds the library with one deliberate defect; the guarding
# test must fail for every one of them, or `make mutation` fails.
# MACRO:TEST pairs: the library rebuilt with -DMACRO must turn build/.../tests/TEST red;
# MACRO:cli/TEST: vtlab rebuilt with it must turn tests/cli/TEST.sh red (a "not ok").
MUTATIONS := VT_MUTATE_SCATTER_STREAM_DTYPE:test_scatter VT_MUTATE_HALVE_ROW_BYTES:test_scatter \
             VT_MUTATE_NO_STALE_GUARD:test_oom VT_MUTATE_PROBE_LOST_UNCOUNTED:test_oom \
             VT_MUTATE_NO_WAL_RETRY:test_store VT_MUTATE_NO_FINISH_CHECK:test_store \
             VT_MUTATE_GEMM_SPLIT_K:test_gemm VT_MUTATE_ATTN_NO_CAUSAL_MASK:test_attn \
             VT_MUTATE_KDA_CHUNK_NO_DECAY:test_kda_chunk VT_MUTATE_SILU_RCP:test_vmath \
             VT_MUTATE_PANEL_BOUNDARY:test_gemm VT_MUTATE_XPACK_ANY_K:test_gemm VT_MUTATE_XMEMO_KEY:test_gemm \
             VT_MUTATE_ACK_UNCONFIRMED:cli/test_nightly_reliability VT_MUTATE_PIECE_UNROUNDED:test_forward \
             VT_MUTATE_KDA_DIAG_UNFUSED:test_kda_chunk VT_MUTATE_BATCH_STATE_LEAK:test_batch \
             VT_MUTATE_SCOPE_IGNORED:test_scope VT_MUTATE_DDMIN_NO_COMPLEMENTS:test_localize_search
# The libraries are built once without a defect (build/mut-base); each mutation
# starts from a copy of those objects and recompiles only the .c files that
# name its macro (all of them when a header does), so nine mutations cost one
# build plus a few files each. A mutant that hangs (a defect can corrupt the
# heap) is stopped after 900 s, a hang guard only, and counts as a survivor:
# only a failed test is a kill.
mutation: deps
	@mkdir -p build; $(MAKE) --no-print-directory -s -j$(JOBS) BUILD=build/mut-base NO_CUDA=1 build/mut-base/libvtmodel.a \
	  build/mut-base/libvtharness.a >build/mutation-base.log 2>&1 || { tail -20 build/mutation-base.log; exit 1; }; \
	for mt in $(MUTATIONS); do m=$${mt%%:*}; t=$${mt#*:}; \
	  echo "== mutation $$m (guarded by $$t)"; \
	  rm -rf build/mut-$$m; \
	  if grep -lq -- "$$m" model/*.h harness/*.h; then mkdir -p build/mut-$$m; \
	  else cp -a build/mut-base build/mut-$$m; \
	    for f in $$(grep -l -- "$$m" model/*.c harness/*.c); do rm -f build/mut-$$m/$${f%.c}.o; done; fi; \
	  case $$t in cli/*) goal=build/mut-$$m/vtlab; run="bash tests/$$t.sh build/mut-$$m/vtlab"; red="^not ok";; \
	    *) goal=build/mut-$$m/tests/$$t; run=build/mut-$$m/tests/$$t; red="^\[  FAILED  \] test_";; esac; \
	  $(MAKE) --no-print-directory -s -j$(JOBS) BUILD=build/mut-$$m NO_CUDA=1 EXTRA_CFLAGS=-D$$m $$goal \
	    >build/mut-$$m/build.log 2>&1 || { tail -20 build/mut-$$m/build.log; exit 1; }; \
	  timeout 900 $$run >build/mut-$$m/out.log 2>&1 </dev/null; \
	  if ! grep -qE "$$red" build/mut-$$m/out.log; then \
	    echo "mutation $$m SURVIVED: no test of $$t failed with the defect built in (a crash is not a kill)"; \
	    tail -5 build/mut-$$m/out.log; exit 1; \
	  else echo "mutation $$m killed: $$t went red, as it must, in:" \
	    $$(grep -oE "^\[  FAILED  \] test_[a-z0-9_]+|^not ok - .{1,50}" build/mut-$$m/out.log | sort -u | \
	      sed 's/^\[  FAILED  \] //; s/^not ok - \(.*\)/"\1..."/'); fi; \
	done; echo "mutation: $(words $(MUTATIONS)) killed, 0 survived"

# --------------------------------------------------------------------- run
TINY := model/configs/kimi-linear-tiny.json
run: deps vtlab
	bash harness/run-demo.sh ./vtlab

$(BUILD)/bench: tests/bench/bench.c tests/bench/blas_core.h tests/bench/contention.h tests/bench/contention_peer.h $(LIBHARNESS) $(LIBMODEL)
	$(CC) $(CFLAGS) $(LDFLAGS) $< $(LIBHARNESS) $(LIBMODEL) $(LDLIBS) -o $@

# Causal attention, reference loop vs blocked (tests/bench/attn_bench.c; not in
# `make test`). attn_bench_cblas: the same with OpenBLAS in place of
# vt_sgemm_nt/nn, a timing preview of fast matrix kernels.
$(BUILD)/attn_bench: tests/bench/attn_bench.c $(LIBMODEL)
	$(CC) $(CFLAGS) $(LDFLAGS) $< $(LIBMODEL) $(LDLIBS) -o $@
$(BUILD)/attn_bench_cblas: tests/bench/attn_bench.c tests/bench/attn_cblas_preview.c $(LIBMODEL)
	$(CC) $(CFLAGS) $(LDFLAGS) $(filter %.c,$^) $(LIBMODEL) $(LDLIBS) -o $@
# The KDA delta-rule core, token loop vs chunked form (tests/bench/kda_chunk_bench.c); run by hand.
$(BUILD)/kda_chunk_bench: tests/bench/kda_chunk_bench.c model/kda_chunk.c model/kda_chunk.h $(LIBMODEL)
	$(CC) $(CFLAGS) $(LDFLAGS) $< $(LIBMODEL) $(LDLIBS) -o $@

# The full-size CUDA benchmark (weights generated on the device); run by scripts/gpu-check.sh.
$(BUILD)/bench_cuda: tests/bench/bench_cuda.c $(LIBMODEL)
	$(CC) $(CFLAGS) $(LDFLAGS) $< $(LIBMODEL) $(LDLIBS) -o $@

# The GEMM kernels against OpenBLAS and a STREAM triad in the same process.
$(BUILD)/gemm_bench: tests/bench/gemm_bench.c tests/bench/blas_core.h $(LIBMODEL)
	$(CC) $(CFLAGS) $(LDFLAGS) $< $(LIBMODEL) $(LDLIBS) -o $@

# make bench [PEER_MODELING=/path/to/modeling_kimi_linear.py] [PEER_CONFIG=FILE]
#            [BENCH_SMALL=1] [BENCH_TMAX=N] [BENCH_BUSY=0] [BENCH_DB=PATH]  (docs/bench.md)
# python3-torch is installed only when PEER_MODELING is set (the official
# peer needs it); without it, or without the file, the peer says why it did
# not run and the bench still passes.
PEER_MODELING ?=
PEER_CONFIG   ?=
bench: deps vtlab $(BUILD)/bench $(BUILD)/gemm_bench
	@if [ -n "$(PEER_MODELING)" ]; then $(MAKE) --no-print-directory deps-peer; fi
	BUILD=$(BUILD) PEER_MODELING="$(PEER_MODELING)" PEER_CONFIG="$(PEER_CONFIG)" bash tests/bench/run.sh ./vtlab

# make bench-contention [CONTENTION_CONFIG=model/configs/kimi-linear-small.json] [CONTENTION_T=256]
#     [BENCH_CONTENTION=quiet,steady1,steady2,bursty,membw,teams,ci] [BENCH_CONTENTION_ROUNDS=9] [BENCH_DB=PATH]
#     [PEER_MODELING=/path/to/modeling_kimi_linear.py] [PEER_CONFIG=FILE]
# The contention table (tests/bench/contention.h, docs/bench.md): prefill and
# decode at the default thread count against one thread while other tenants
# hold the cores, per pattern; on the 288M model by default (synthesized once
# into $(BUILD)/contention-models/). With PEER_MODELING (python3-torch is then
# installed when missing), the official peer's prefill on 1 thread and on all
# cores in the same rounds (tests/bench/contention_peer.h); without it the
# table says "peer not run: PEER_MODELING not set". Its phases are recorded
# in $(BENCH_DB) (default results.db; BENCH_DB= skips it). A few minutes;
# ~10-15 with the peer on the 288M model (docs/bench.md).
CONTENTION_CONFIG ?= model/configs/kimi-linear-small.json
CONTENTION_T      ?= 256
BENCH_CONTENTION  ?=
.PHONY: bench-contention
bench-contention: deps vtlab $(BUILD)/bench
	@if [ -n "$(PEER_MODELING)" ]; then $(MAKE) --no-print-directory deps-peer; fi
	@d=$(BUILD)/contention-models/$(basename $(notdir $(CONTENTION_CONFIG)))-seed1; db=$${BENCH_DB-results.db}; \
	if [ ! -f $$d/config.json ]; then echo "bench-contention: synthesizing $(CONTENTION_CONFIG) into $$d"; \
	  ./vtlab synth --config $(CONTENTION_CONFIG) --seed 1 --out $$d >/dev/null || exit 1; fi; \
	PEER_MODELING="$(PEER_MODELING)" PEER_CONFIG="$(PEER_CONFIG)" BENCH_PEER_PY=tests/bench/peer.py \
	  $(BUILD)/bench $$d $(CONTENTION_T) --json $(BUILD)/contention.bench.json --contention $(BENCH_CONTENTION) || exit 1; \
	if [ -n "$$db" ]; then ./vtlab record-bench $(BUILD)/contention.bench.json --db "$$db"; fi

# python3-torch for the peer mode, when missing; a failure is reported, not fatal.
.PHONY: deps-peer bench-test
deps-peer:
	@dpkg -s python3-torch >/dev/null 2>&1 || { echo "make deps-peer: installing python3-torch"; \
	  if [ "$$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi; \
	  $$SUDO apt-get update -qq >/dev/null && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends python3-torch >/dev/null \
	  || echo "make deps-peer: apt-get install python3-torch failed; the peer will not run" >&2; }

# The peer mode and the contention table's peer rows end to end with the
# stand-in modeling file (tests/bench/test_peer_mode.sh and
# test_peer_contention.sh; each skipped, said so, when python3-torch is
# absent; not in `make test`).
bench-test: deps vtlab $(BUILD)/bench
	BUILD=$(BUILD) bash tests/bench/test_peer_mode.sh ./vtlab; rc=$$?; \
	BUILD=$(BUILD) bash tests/bench/test_peer_contention.sh ./vtlab || rc=1; exit $$rc

# The kill campaign as a bounded soak (tests/soak/kill_campaign.sh): SOAK_KILLS
# random SIGKILLs over a small sweep, report, nightly and reopen, each checked,
# then a resume compared with an uninterrupted run. `make test` runs 6 of them.
SOAK_KILLS ?= 60
.PHONY: soak
soak: deps vtlab
	bash tests/soak/kill_campaign.sh ./vtlab --kills $(SOAK_KILLS)

# The CI job (docs/nightly.md): rerun experiments/, audit, compare with the
# previous nightly in results.db; report/ gets junit.xml, nightly.md,
# regressions.atom and the HTML report. Exit 1 on a regression.
.PHONY: nightly
nightly: deps vtlab
	./vtlab nightly

knobs-doc: vtlab
	./vtlab knobs --markdown > docs/knobs.md

# docs/cli.md from help.c's table (tests/cli/test_help.sh fails when it is stale).
cli-doc: vtlab
	./vtlab help --markdown > docs/cli.md

# make install [PREFIX=/usr/local] [DESTDIR=staging]: the binary, vtprobe.h
# (include/), the shipped configs, and the experiments and ledger as examples
# (share/vtlab/), the docs (share/doc/vtlab/) and a man page made from
# `vtlab --help` (share/man/man1/vtlab.1). vtlab finds its data from its own
# prefix (bin/../share/vtlab, no path compiled in; VTLAB_DATA_DIR overrides).
# `make uninstall` removes exactly what was installed: scripts/install.sh
# lists every file in share/vtlab/install-manifest.
PREFIX ?= /usr/local
.PHONY: install uninstall
install: vtlab
	bash scripts/install.sh install "$(DESTDIR)$(PREFIX)" ./vtlab
uninstall:
	bash scripts/install.sh uninstall "$(DESTDIR)$(PREFIX)"

clean:
	rm -rf build vtlab
