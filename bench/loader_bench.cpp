// Tokenize-and-pack throughput of the online loader on one core: the packer
// the loader thread runs, over a config's training documents.
// usage: hlat_loader_bench CONFIG.json [SECONDS]   (prints one JSON object)
#include "trainer/config/config.h"
#include "trainer/data/dataset.h"
#include "trainer/data/loader.h"
#include "trainer/data/tokenizer.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <exception>

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: hlat_loader_bench CONFIG.json [SECONDS]\n");
        return 2;
    }
    try {
        hlat::TrainConfig config = hlat::load_config(argv[1]);
        double seconds = argc > 2 ? std::atof(argv[2]) : 5.0;
        hlat::Dataset ds = hlat::load_dataset(config.data);
        hlat::Tokenizer tokenizer(config.data.tokenizer);
        hlat::Packer packer(ds.train, tokenizer, config.run.seed, 0, 1, true, {});
        const int length = config.run.seq_len + 1;
        std::vector<int32_t> seq;
        long tokens = 0;
        auto t0 = std::chrono::steady_clock::now();
        double elapsed = 0.0;
        while (elapsed < seconds) {
            for (int i = 0; i < 64; i++) {
                seq.clear();
                packer.next_sequence(seq, length);
                tokens += length;
            }
            elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        }
        std::printf("%s\n", fmt::format(R"({{"loader_tokens_per_s": {:.0f}, "tokens": {}, "seconds": {:.2f}, "epochs": {}}})",
                                        tokens / elapsed, tokens, elapsed, packer.epoch())
                                .c_str());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "hlat_loader_bench: error: %s\n", e.what());
        return 1;
    }
    return 0;
}
