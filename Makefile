# make test                install what is missing, build, run the tests (the README's test command)
# make demo                install what is missing, build, run the demo on the GPU
# make all                 generate from the spec and build build/libew.so
# make all SPEC="libew/ops.toml my_ops.toml"   add your own ops
# make all SPEC='libew/ops.toml "my ops/extra.toml"'   a path with spaces goes in double quotes
# make bench               build/libew_bench.so (the kernels only the benchmark compares with), then
#                          python -m pyew bench $(BENCH_ARGS) on the GPU
# make sweep               build and run the launch-shape sweep (benchmarks/template_sweep.cu)
# make lint | wheel | clean
SPEC ?= libew/ops.toml
PYTHON ?= python3
NVCC ?= $(if $(CUDA_HOME),$(CUDA_HOME)/bin/nvcc,nvcc)
# sm_90 code (H100, H200) and compute_90 PTX (later GPUs compile it at load). A100 (sm_80) needs
# ARCH="-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
# -gencode arch=compute_90,code=compute_90", which compiles every kernel twice (build times in
# benchmarks/RESULTS.md, "Building the library").
DEFAULT_ARCH := -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
ARCH ?= $(DEFAULT_ARCH)
# -O2 is the host code's level (entry points, launch planning); ptxas optimizes device code at -O3
# whatever nvcc's -O, so the kernels are the same as at -O3 and the host compile is cheaper.
# LINEINFO=1 adds -lineinfo: source lines in compute-sanitizer's and the profilers' reports, for a
# slower build and a larger library (benchmarks/RESULTS.md, "Building the library").
LINEINFO ?=
NVCCFLAGS ?= -O2 -std=c++17
EXTRA_NVCCFLAGS ?=
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
# SPEC, ARCH and BUILD come from make's command line or this file, never from the environment:
# conda's compiler activation exports BUILD (a target triplet), and build systems export ARCH.
ifneq ($(filter environment%,$(origin BUILD)),)
override BUILD := build
endif
ifneq ($(filter environment%,$(origin ARCH)),)
override ARCH := $(DEFAULT_ARCH)
endif
ifneq ($(filter environment%,$(origin SPEC)),)
override SPEC := libew/ops.toml
endif

HEADERS := $(wildcard libew/*.cuh libew/*.h)
LIBEW_SOURCES := $(wildcard libew/*.cu)

# $(call shq,TEXT): TEXT as one single-quoted shell word
shq = '$(subst ','\'',$(1))'

# The manifest records the command that built the library (pyew repeats it when the library is
# stale): SPEC and BUILD from the generator's arguments, and these variables when they were given
# on make's command line.
RECORDED_VARS := ARCH NVCC CUDA_HOME NVCCFLAGS EXTRA_NVCCFLAGS LINEINFO PYTHON
GEN_ARGS = --out $(call shq,$(BUILD)) --spec-list $(call shq,$(SPEC)) \
           $(foreach v,$(RECORDED_VARS),$(if $(filter command line,$(origin $(v))),--make-var $(call shq,$(v)=$($(v)))))
# Generating and building hold $(BUILD)/.lock: two builds into one folder take turns.
LOCKED = $(PYTHON) -m generator.lock $(call shq,$(BUILD)/.lock) --

.PHONY: all generate deps check-nvcc locked-all locked-generate test demo lint bench bench-lib locked-bench-lib \
        sweep wheel clean FORCE

all: check-nvcc deps
	@$(LOCKED) $(MAKE) --no-print-directory locked-all

# Python packages, from pyproject.toml: what the generator needs, and for demo/test what pyew and
# the tests need. Installs only what is missing.
deps:
	@$(PYTHON) scripts/deps.py build

generate: deps
	@$(LOCKED) $(MAKE) --no-print-directory locked-generate

locked-all: locked-generate
	@$(MAKE) --no-print-directory -j$(JOBS) $(BUILD)/libew.so $(BUILD)/_ewcall.abi3.so

locked-generate:
	$(PYTHON) -m generator $(GEN_ARGS)

check-nvcc:
	@if [ -n $(call shq,$(CUDA_HOME)) ] && [ "$(origin NVCC)" = file ] && \
	    [ ! -x $(call shq,$(CUDA_HOME)/bin/nvcc) ]; then \
	  echo "error: CUDA_HOME=$(CUDA_HOME) has no bin/nvcc: set CUDA_HOME to the CUDA toolkit's folder" \
	       "(the one holding bin/nvcc, e.g. /usr/local/cuda), or unset it to use the nvcc on PATH" >&2; \
	  exit 1; fi
	@command -v $(call shq,$(firstword $(NVCC))) >/dev/null 2>&1 || { \
	  echo "error: nvcc not found (NVCC=$(NVCC)): install the CUDA toolkit, which provides nvcc, and" \
	       "put its bin/ on PATH, or set CUDA_HOME=/path/to/cuda or NVCC=/path/to/nvcc" >&2; exit 1; }

-include $(BUILD)/gen/sources.mk
-include $(BUILD)/gen/bench/sources.mk
OBJS := $(patsubst $(BUILD)/gen/%.cu,$(BUILD)/obj/%.o,$(GEN_SOURCES)) \
        $(patsubst libew/%.cu,$(BUILD)/obj/libew_%.o,$(LIBEW_SOURCES))
BENCH_OBJS := $(patsubst $(BUILD)/gen/%.cu,$(BUILD)/obj/%.o,$(BENCH_SOURCES))

# Device code is stored compressed for size where nvcc has --compress-mode (several times smaller
# than the default compression), decompressed when the library loads each module.
ifeq ($(origin FATBIN_COMPRESS),undefined)
FATBIN_COMPRESS := $(shell $(NVCC) --help 2>/dev/null | grep -q -e '--compress-mode' && echo --compress-mode=size)
endif
CUFLAGS = $(NVCCFLAGS) $(if $(filter 1,$(LINEINFO)),-lineinfo) $(EXTRA_NVCCFLAGS) $(ARCH) $(FATBIN_COMPRESS) -Xcompiler -fPIC,-fvisibility=hidden \
          -Ilibew -I$(BUILD) -I$(BUILD)/gen -MMD -MP

# The compile command and nvcc's version, rewritten only when they change: every object depends on
# it, so a build with another ARCH, NVCCFLAGS or nvcc compiles everything again.
FLAGS_STAMP := $(BUILD)/obj/flags.txt
$(FLAGS_STAMP): FORCE
	@mkdir -p $(dir $@)
	@{ printf '%s\n' $(call shq,$(NVCC) $(CUFLAGS)); $(NVCC) --version 2>/dev/null | tail -n 1; } > $@.new; \
	if cmp -s $@.new $@; then rm -f $@.new; else mv $@.new $@; fi

FORCE:

$(BUILD)/libew.so: $(OBJS)
	$(NVCC) -shared $(ARCH) -cudart static -o $@.tmp $(OBJS) && mv $@.tmp $@
	@echo "built $@ ($(words $(OBJS)) objects)"

$(BUILD)/libew_bench.so: $(BENCH_OBJS)
	$(NVCC) -shared $(ARCH) -cudart static -o $@.tmp $(BENCH_OBJS) && mv $@.tmp $@
	@echo "built $@ ($(words $(BENCH_OBJS)) objects)"

# pyew's C extension, which calls the entry points without ctypes (stable ABI: any Python >= 3.11
# with the GIL). Without the Python headers, on a free-threaded Python, or if the compile fails, it
# is left out and pyew calls through ctypes.
PYINC := $(shell $(PYTHON) -c "import sysconfig as s; print('' if s.get_config_var('Py_GIL_DISABLED') else s.get_paths()['include'])" 2>/dev/null)
$(BUILD)/_ewcall.abi3.so: pyew/_ewcall.c libew/ew_api.h
	@rm -f $@
	@if [ -n $(call shq,$(PYINC)) ] && [ -f $(call shq,$(PYINC))/Python.h ] && echo "cc $<" && \
	    $(CC) -O2 -Wall -Wextra -shared -fPIC -Ilibew -I$(call shq,$(PYINC)) -o $@.tmp $<; then \
	  mv $@.tmp $@; \
	else \
	  rm -f $@.tmp; \
	  echo "note: pyew's C extension was not built (no Python.h for $(PYTHON), a free-threaded Python, or the" \
	       "compile failed): pyew calls libew through ctypes, about a microsecond more per call"; \
	fi

# Generated sources compile through generator/nvcc.py: on an error it adds a line naming the spec
# file, op and expression behind it.
$(BUILD)/obj/%.o: $(BUILD)/gen/%.cu $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	@echo "nvcc $<"
	@$(PYTHON) -m generator.nvcc $(NVCC) $(CUFLAGS) -c $< -o $@

$(BUILD)/obj/libew_%.o: libew/%.cu $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	@echo "nvcc $<"
	@$(NVCC) $(CUFLAGS) -c $< -o $@

-include $(filter %.d,$(OBJS:.o=.d) $(BENCH_OBJS:.o=.d))

test:
	@$(PYTHON) scripts/deps.py run build test
	@$(MAKE) --no-print-directory all
	$(PYTHON) -m pytest -q tests

demo:
	@$(PYTHON) scripts/deps.py run build
	@$(MAKE) --no-print-directory all
	$(PYTHON) examples/demo.py

lint:
	@$(PYTHON) scripts/deps.py test
	$(PYTHON) -m ruff check .

# The benchmark library holds the naive one-element-per-thread twins of BENCH_NAIVE's map ops and
# dot's per-thread atomic methods: kernels users never call, so libew.so does not carry them.
BENCH_NAIVE ?= mul
BENCH_ARGS ?=
bench: bench-lib
	PYEW_LIB=$(call shq,$(abspath $(BUILD))/libew.so) $(PYTHON) -m pyew bench $(BENCH_ARGS)

bench-lib: all
	@$(LOCKED) $(MAKE) --no-print-directory locked-bench-lib

locked-bench-lib:
	$(PYTHON) -m generator $(GEN_ARGS) --bench $(call shq,$(BENCH_NAIVE))
	@$(MAKE) --no-print-directory -j$(JOBS) $(BUILD)/libew_bench.so

# a wheel with libew.so inside (nvcc needed); SPEC=... builds other specs in
wheel:
	PYEW_SPEC=$(call shq,$(SPEC)) $(PYTHON) -m pip wheel --no-deps -w dist .

# launch-shape sweep of the map kernel (benchmarks/template_sweep.cu), built and run on the GPU with
# SWEEP_ARGS (log2 sizes; default 28 25). It uses the default spec's device functions from $(BUILD)/gen/fn.
SWEEP_ARGS ?=
sweep: all
	@$(MAKE) --no-print-directory $(BUILD)/template_sweep
	$(BUILD)/template_sweep $(SWEEP_ARGS)

$(BUILD)/template_sweep: benchmarks/template_sweep.cu $(HEADERS) $(BUILD)/libew.so
	$(NVCC) $(NVCCFLAGS) $(EXTRA_NVCCFLAGS) $(ARCH) -Ilibew -I$(BUILD)/gen -o $@ $<

clean:
	rm -rf $(BUILD)
