// Helpers shared by the tests: random buffers, comparisons that report where
// they differ, a scratch folder, and running a command.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

namespace hlat::test {

inline std::vector<float> random_vector(long n, unsigned seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}

// max |a - b| / max |b|: the relative error measure of the parity tests.
inline double relative_error(const float* a, const float* b, long n) {
    double max_diff = 0.0, max_ref = 0.0;
    for (long i = 0; i < n; i++) {
        max_diff = std::max(max_diff, std::fabs((double)a[i] - b[i]));
        max_ref = std::max(max_ref, std::fabs((double)b[i]));
    }
    return max_ref > 0 ? max_diff / max_ref : max_diff;
}

inline double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    return relative_error(a.data(), b.data(), (long)std::min(a.size(), b.size()));
}

// A fresh folder under the system temp dir, removed when the object dies.
class ScratchDir {
  public:
    explicit ScratchDir(const std::string& name) {
        path_ = std::filesystem::temp_directory_path() /
                ("hlat_test_" + name + "_" + std::to_string(::getpid()));
        std::filesystem::remove_all(path_);
        std::filesystem::create_directories(path_);
    }
    ~ScratchDir() { std::filesystem::remove_all(path_); }
    std::string file(const std::string& name) const { return (path_ / name).string(); }
    const std::filesystem::path& path() const { return path_; }

  private:
    std::filesystem::path path_;
};

struct CommandResult {
    int exit_code;
    std::string output;  // stdout and stderr together
};

inline CommandResult run_command(const std::string& command) {
    CommandResult r{-1, ""};
    FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
    if (!pipe) return r;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) r.output.append(buf, n);
    int status = ::pclose(pipe);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return r;
}

}  // namespace hlat::test

#include "trainer/data/corpus.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>

namespace hlat::test {

// For tests that drive `hlat train` on something tiny: writes dir/c.json (a
// 2-layer, d 32, vocab 64 model, batch 2 x 32, one thread; `run` fields
// override) and dir/t.u16 (a learnable token stream).
inline void write_tiny_training(const ScratchDir& dir, int total_steps, const nlohmann::json& run) {
    nlohmann::json c = {
        {"model", {{"vocab_size", 64}, {"dim", 32}, {"n_layers", 2}, {"n_heads", 2}, {"n_kv_heads", 2},
                   {"hidden_dim", 64}, {"max_seq_len", 32}}},
        {"schedule", {{"warmup_steps", 10}, {"total_steps", total_steps}}},
        {"run", {{"batch_size", 2}, {"seq_len", 32}, {"threads", 1}, {"log_every", 100000}, {"eval_every", 0}}}};
    c["run"].update(run);
    std::ofstream(dir.file("c.json")) << c.dump(2);
    std::vector<uint16_t> ids(20000);
    for (size_t i = 0; i < ids.size(); i++) ids[i] = (uint16_t)((i * 7 + i / 13) % 64);
    std::ofstream(dir.file("t.u16"), std::ios::binary).write((const char*)ids.data(), ids.size() * 2);
}

// Documents of word salad with paragraphs, for tokenizer and loader tests:
// word lengths and counts vary so BPE has something to merge, and document
// lengths vary from a sentence to many sequences.
inline std::vector<Document> synthetic_documents(int n, unsigned seed) {
    static const char* words[] = {"the", "model", "gradient", "norm", "spike", "loss", "step", "layer", "token",
                                  "attention", "mask", "rank", "checkpoint", "resume", "python", "def", "return",
                                  "import", "class", "value", "=", "(", ")", "1", "2024", "list", "dict", "of", "in",
                                  "training", "precision", "bf16", "weights", "optimizer", "schedule", "warmup"};
    const int nwords = sizeof(words) / sizeof(words[0]);
    std::mt19937 rng(seed);
    std::vector<Document> docs;
    for (int d = 0; d < n; d++) {
        std::string text;
        int paragraphs = 1 + rng() % (d % 7 == 0 ? 40 : 4);
        for (int p = 0; p < paragraphs; p++) {
            if (p) text += "\n\n";
            int len = 5 + rng() % 40;
            for (int w = 0; w < len; w++) {
                if (w) text += (rng() % 12 == 0) ? "\n" : " ";
                text += words[rng() % nwords];
            }
            text += " doc" + std::to_string(d) + "p" + std::to_string(p) + ".";
        }
        docs.push_back({"doc-" + std::to_string(d), text, "", 0});
    }
    return docs;
}

}  // namespace hlat::test

#include "trainer/data/tokenizer.h"

namespace hlat::test {

// A small BPE tokenizer trained on synthetic_documents, in its own folder.
// Building one takes well under a second.
struct SmallTokenizer {
    ScratchDir dir{"tokenizer"};
    std::vector<Document> docs = synthetic_documents(300, 5);
    std::string model_path = dir.file("tok.model");
    std::unique_ptr<Tokenizer> tokenizer;
    SmallTokenizer() {
        train_tokenizer(docs, dir.file("tok"), 320, 1);
        tokenizer = std::make_unique<Tokenizer>(model_path);
    }
};

}  // namespace hlat::test
