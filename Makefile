# The two entry points of README: `make demo` (the main job) and `make test`.
# Both install what is missing first, then build.
BUILD := build
JOBS := $(shell nproc)
HLAT := $(BUILD)/cli/hlat
CORPUS := data/corpus/python-docs.jsonl
TOKENIZER := data/tokenizer/python-docs.model
TASKS := data/tasks/next_sentence_mc4.jsonl

.PHONY: setup build test demo data bench clean

setup:
	bash scripts/setup.sh

build: setup
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j 2

# The default corpus (Debian's Python documentation), its tokenizer and the
# evaluation tasks built from its held-out split (once: they are frozen).
data: build
	bash scripts/fetch_corpus.sh data/raw
	test -s $(CORPUS) || $(HLAT) corpus --info "$$(ls data/raw/python3.*.info.gz | head -1)" --out $(CORPUS)
	test -s $(TOKENIZER) || $(HLAT) tokenizer --config configs/demo.json
	test -s $(TASKS) || $(HLAT) make-tasks --config configs/demo.json --out data/tasks

# The main job: train the default model with the store and detectors on and
# serve the page while it trains (until Ctrl-C); scripts/demo.sh.
demo: data
	HLAT=$(HLAT) bash scripts/demo.sh

# Every bench in full (several hours on 2 cores: docs/benchmarks.md lists
# each one's time); `bench/NAME --small` runs one in seconds, as the tests do.
# Not here: bench/side_by_side (two hlat binaries to compare) and
# bench/page_screenshots.mjs (retakes docs/*.png).
bench: data
	bench/train_vs_pytorch
	$(BUILD)/bench/hlat_kernels_bench
	bench/loader_vs_trainer
	bench/eval_vs_pytorch
	bench/precision_throughput
	bench/internals_overhead
	bench/precision_verdict
	bench/precision_sweep
	bench/telemetry_store
	bench/detector_matrix
	bench/early_warning
	bench/spike_recovery
	bench/scaling
	bench/uptime
	bench/soak
	bench/client_overhead
	bench/web_dashboard
	node bench/run_page_draw.mjs $(HLAT)
	bench/fuzz

clean:
	rm -rf $(BUILD)
