// The fixture of the distributed tests (test_distributed.cpp,
// test_sequence_parallel.cpp): a token file with structure to learn, a tiny
// model's config, `hlat train` under mpirun, and the runs' step records.
//
// Tolerances. In fp32 the layouts compute the same sums in another order: DP
// averages two half-batch gradient means instead of one batch mean, TP sums
// partial matmul outputs across ranks, ZeRO-1 reduce-scatters instead of
// all-reducing. Each reordering moves a result by a few float ulps (relative
// 1e-7); Adam's normalised update carries such differences forward without
// shrinking them, and 20 steps measured at most 4e-8 relative on the loss and
// 5e-7 on the gradient norm. The tests allow 1e-5 relative: far above
// reordering noise, far below any real difference (one wrong token in a
// batch of 256 moves the loss by ~1e-3).
#pragma once

#include "test_util.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace hlat {

constexpr double kTolerance = 1e-5;

class DistributedTest : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        dir_ = new test::ScratchDir("distributed");
        // Tokens with structure to learn: fragments of one random sequence.
        std::mt19937 rng(7);
        std::vector<uint16_t> base(2000), tokens;
        for (uint16_t& t : base) t = (uint16_t)(rng() % 256);
        while (tokens.size() < 60000) {
            size_t at = rng() % (base.size() - 50);
            tokens.insert(tokens.end(), base.begin() + at, base.begin() + at + 50);
        }
        std::ofstream(dir_->file("tokens.bin"), std::ios::binary)
            .write(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
    }
    static void TearDownTestSuite() { delete dir_; }

    // A config of the tiny model: heads, kv heads, hidden units and vocabulary
    // all divide by 2 so TP=2 splits them. Its steps take a few milliseconds,
    // the scheduler's time slice, so on 2 cores shared with other tests any
    // rank can look like a straggler: the straggler detector is off here and
    // tested alone (test_fleet.cpp).
    static std::string config(const std::string& name, int batch, const std::string& extra = "") {
        std::string path = dir_->file(name + ".json");
        std::ofstream(path) << fmt::format(R"({{
          "model": {{"vocab_size": 256, "dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2,
                    "hidden_dim": 128, "max_seq_len": 32}},
          "schedule": {{"max_lr": 3e-3, "min_lr": 3e-4, "warmup_steps": 5, "total_steps": 30}},
          "run": {{"batch_size": {}, "seq_len": 32, "threads": 1, "data": "{}", "eval_every": 0,
                  "peak_gflops": 100, "tensor_norms_every": 0, "checkpoint_every": 10, "keep_checkpoints": 0}},
          "detectors": {{"leak_probe": {{"policy": "off"}}, "straggler": {{"policy": "off"}}}}{}
        }})", batch, dir_->file("tokens.bin"), extra);
        return path;
    }

    // Runs `hlat train` on np processes (np 1: no mpirun); the run's files
    // are named after out.
    static test::CommandResult train(int np, const std::string& config_path, const std::string& out,
                                     const std::string& args, const std::string& store = "none") {
        std::string launch = np == 1 ? ""
                                     : fmt::format("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun "
                                                   "--oversubscribe -np {} ",
                                                   np);
        return test::run_command(fmt::format("{}{} train --config {} --out-dir {} --metrics-jsonl {}.jsonl --store {} {}",
                                             launch, HLAT_BINARY, config_path, dir_->file(out), dir_->file(out),
                                             store, args));
    }

    // step -> step record of a run's metrics file.
    static std::map<int, nlohmann::json> steps(const std::string& out) {
        std::map<int, nlohmann::json> r;
        std::ifstream in(dir_->file(out) + ".jsonl");
        for (std::string line; std::getline(in, line);) {
            auto j = nlohmann::json::parse(line);
            if (!j.contains("event")) r[j["step"].get<int>()] = j;
        }
        return r;
    }

    // Loss, gradient norm and parameter norm of steps [from, to) of two runs,
    // within a relative tolerance.
    static void expect_same_curves(const std::string& a, const std::string& b, int from, int to,
                                   double tolerance = kTolerance) {
        auto sa = steps(a), sb = steps(b);
        for (int s = from; s < to; s++) {
            SCOPED_TRACE(fmt::format("{} vs {} at step {}", a, b, s));
            ASSERT_TRUE(sa.count(s) && sb.count(s));
            for (const char* key : {"loss", "grad_norm", "param_norm"}) {
                double x = sa[s][key].get<double>(), y = sb[s][key].get<double>();
                EXPECT_LE(std::fabs(x - y), tolerance * std::fabs(x)) << key << ": " << x << " vs " << y;
            }
        }
    }

    static std::vector<std::string> alerts(const std::string& out) {
        std::vector<std::string> r;
        std::ifstream in(dir_->file(out) + ".jsonl");
        for (std::string line; std::getline(in, line);) {
            auto j = nlohmann::json::parse(line);
            if (j.value("event", "") == "alert") r.push_back(fmt::format("{}@{}", j["kind"].get<std::string>(),
                                                                         j["step"].get<int>()));
        }
        return r;
    }

    static inline test::ScratchDir* dir_ = nullptr;
};

}  // namespace hlat
