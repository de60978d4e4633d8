# The two entry points of README: `make demo` (the main job) and `make test`.
# Both install what is missing first, then build.
BUILD := build
JOBS := $(shell nproc)

.PHONY: setup build test demo bench clean

setup:
	bash scripts/setup.sh

build: setup
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j 2

demo: build
	bash scripts/demo_data.sh data/demo.u16
	$(BUILD)/cli/hlat train --config configs/demo.json --data data/demo.u16 --save data/demo.safetensors

bench: build
	bench/train_vs_pytorch

clean:
	rm -rf $(BUILD)
