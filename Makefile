# make all                 generate from the spec and build build/libew.so
# make all SPEC="libew/ops.toml my_ops.toml"   add your own ops
# make test | demo | bench | sweep | clean
SPEC ?= libew/ops.toml
PYTHON ?= python3
NVCC ?= $(if $(CUDA_HOME),$(CUDA_HOME)/bin/nvcc,nvcc)
ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
        -gencode arch=compute_90,code=compute_90
NVCCFLAGS ?= -O3 -std=c++17 -lineinfo
EXTRA_NVCCFLAGS ?=
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)

HEADERS := $(wildcard libew/*.cuh libew/*.h)
LIBEW_SOURCES := $(wildcard libew/*.cu)

.PHONY: all generate test demo bench sweep clean

all: generate
	@$(MAKE) --no-print-directory -j$(JOBS) $(BUILD)/libew.so

generate:
	$(PYTHON) -m generator --out $(BUILD) $(SPEC)

-include $(BUILD)/gen/sources.mk
OBJS := $(patsubst $(BUILD)/gen/%.cu,$(BUILD)/obj/%.o,$(GEN_SOURCES)) \
        $(patsubst libew/%.cu,$(BUILD)/obj/libew_%.o,$(LIBEW_SOURCES))

CUFLAGS = $(NVCCFLAGS) $(EXTRA_NVCCFLAGS) $(ARCH) -Xcompiler -fPIC,-fvisibility=hidden \
          -Ilibew -I$(BUILD) -I$(BUILD)/gen -MMD -MP

$(BUILD)/libew.so: $(OBJS)
	$(NVCC) -shared $(ARCH) -cudart static -o $@.tmp $^ && mv $@.tmp $@
	@echo "built $@ ($(words $(OBJS)) objects)"

# Generated sources compile through generator/nvcc.py: on an error it adds a line naming the spec
# file, op and expression behind it.
$(BUILD)/obj/%.o: $(BUILD)/gen/%.cu
	@mkdir -p $(dir $@)
	@echo "nvcc $<"
	@$(PYTHON) -m generator.nvcc $(NVCC) $(CUFLAGS) -c $< -o $@

$(BUILD)/obj/libew_%.o: libew/%.cu
	@mkdir -p $(dir $@)
	@echo "nvcc $<"
	@$(NVCC) $(CUFLAGS) -c $< -o $@

-include $(OBJS:.o=.d)

test:
	$(PYTHON) -m pytest -q tests

demo:
	$(PYTHON) examples/demo.py

bench:
	$(PYTHON) -m pyew bench

# launch-shape sweep of the map kernel (benchmarks/template_sweep.cu); runs on the GPU. It uses
# the default spec's gelu, gelu_tanh and elu device functions from $(BUILD)/gen/fn.
sweep: all
	@$(MAKE) --no-print-directory $(BUILD)/template_sweep

$(BUILD)/template_sweep: benchmarks/template_sweep.cu $(HEADERS) $(BUILD)/libew.so
	$(NVCC) $(NVCCFLAGS) $(EXTRA_NVCCFLAGS) $(ARCH) -Ilibew -I$(BUILD)/gen -o $@ $<

clean:
	rm -rf $(BUILD)
