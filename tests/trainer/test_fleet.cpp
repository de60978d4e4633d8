// Fleet health during training: the straggler summary and detector on made-up
// steps, then real distributed runs under mpirun: a rank slowed by
// --inject slow_rank is flagged within the detector's K steps, clean 2- and
// 4-rank runs over 3 seeds raise nothing, and silent data corruption injected
// mid-run is caught by the health check at the step it runs.
#include "roads.h"
#include "test_util.h"
#include "detectors/detector.h"
#include "trainer/run/fleet_hook.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <random>

namespace hlat {
namespace {

TEST(Stragglers, TheSummaryComparesEachRankWithTheMedianOfTheOthers) {
    StragglerSummary s = summarize_stragglers({1.0, 1.1, 3.3, 0.9});
    EXPECT_EQ(s.rank, 2);
    EXPECT_DOUBLE_EQ(s.ratio, 3.3 / 1.0);
    EXPECT_TRUE(std::isnan(summarize_stragglers({1.0}).ratio)) << "one rank has no others";
}

std::vector<telemetry::Alert> observe(const std::vector<std::pair<double, int>>& steps) {
    detectors::DetectorsConfig config;
    detectors::DetectorSuite suite(config);
    std::vector<telemetry::Alert> alerts;
    for (size_t i = 0; i < steps.size(); i++) {
        detectors::StepView r;
        r.step = (int64_t)i;
        r.values = {{"loss", 3.0}, {"grad_norm", 1.0}, {"straggler_ratio", steps[i].first},
                    {"straggler_rank", (double)steps[i].second}};
        for (const detectors::Fired& f : suite.observe(r))
            if (f.alert.kind == "straggler") alerts.push_back(f.alert);
    }
    return alerts;
}

TEST(Stragglers, TheDetectorWantsTheSameRankSlowForKStepsInARow) {
    std::vector<std::pair<double, int>> steps(20, {1.1, 0});
    for (int i = 8; i < 20; i++) steps[i] = {3.0, 3};
    auto alerts = observe(steps);
    ASSERT_EQ(alerts.size(), 1u) << "once per episode";
    EXPECT_EQ(alerts[0].step, 14) << "the fifth slow step (K = 5) after the 10 of warm-up";
    EXPECT_NE(alerts[0].message.find("rank 3 is a straggler"), std::string::npos) << alerts[0].message;
    // Slow steps that move from rank to rank are a noisy machine, not a straggler.
    for (int i = 8; i < 20; i++) steps[i] = {3.0, i % 2};
    EXPECT_TRUE(observe(steps).empty());
    // Nor is a slow rank that recovers before K steps.
    steps.assign(20, {1.0, 0});
    for (int i = 12; i < 16; i++) steps[i] = {3.0, 1};
    EXPECT_TRUE(observe(steps).empty());
    // Nor the first steps of a run (allocation, page faults).
    steps.assign(20, {1.0, 0});
    for (int i = 0; i < 10; i++) steps[i] = {5.0, 0};
    EXPECT_TRUE(observe(steps).empty());
}

class FleetRun : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        dir_ = new test::ScratchDir("fleet");
        std::mt19937 rng(3);
        std::vector<uint16_t> tokens(100000);
        for (size_t i = 0; i < tokens.size(); i++) tokens[i] = (uint16_t)((i * 7 + rng() % 5) % 256);
        std::ofstream(dir_->file("tokens.bin"), std::ios::binary)
            .write(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
    }
    static void TearDownTestSuite() { delete dir_; }

    // A tiny model trained data-parallel on np ranks; alerts as kind@step.
    // With `store`, the run is also stored there under its name (returned in *name).
    static std::vector<std::string> train(int np, int seed, const std::string& args, const std::string& store = "none",
                                          std::string* stored_name = nullptr) {
        const std::string name = fmt::format("np{}-seed{}-{}", np, seed, std::hash<std::string>{}(args));
        if (stored_name) *stored_name = name;
        std::ofstream(dir_->file(name + ".json")) << nlohmann::json{
            // Steps of tens of milliseconds: far longer than the scheduler's time
            // slice, which 4 ranks on 2 cores share.
            {"model", {{"vocab_size", 256}, {"dim", 128}, {"n_layers", 2}, {"n_heads", 4}, {"n_kv_heads", 2},
                       {"hidden_dim", 256}, {"max_seq_len", 64}}},
            {"schedule", {{"max_lr", 3e-3}, {"min_lr", 3e-4}, {"warmup_steps", 5}, {"total_steps", 60}}},
            {"run", {{"batch_size", 4}, {"seq_len", 64}, {"threads", 1}, {"eval_every", 0}, {"seed", seed},
                     {"tensor_norms_every", 0}, {"checkpoint_every", 0}, {"data", dir_->file("tokens.bin")}}},
            {"parallel", {{"health_every", 10}}},
            {"detectors", {{"leak_probe", {{"policy", "off"}}}}}};
        auto r = test::run_command(fmt::format("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun "
                                               "--oversubscribe -np {} {} train --config {} --dp {} --out-dir {} "
                                               "--store {} --metrics-jsonl {}.jsonl {}",
                                               np, HLAT_BINARY, dir_->file(name + ".json"), np, dir_->file(name),
                                               store, dir_->file(name), args));
        EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 3) << r.output;
        std::vector<std::string> alerts;
        std::ifstream in(dir_->file(name) + ".jsonl");
        for (std::string line; std::getline(in, line);) {
            auto j = nlohmann::json::parse(line);
            if (j.value("event", "") == "alert")
                alerts.push_back(fmt::format("{}@{}", j["kind"].get<std::string>(), j["step"].get<int>()));
        }
        return alerts;
    }
    static test::ScratchDir* dir_;
};
test::ScratchDir* FleetRun::dir_ = nullptr;

TEST_F(FleetRun, CleanRunsOnTwoAndFourRanksRaiseNothing) {
    for (int np : {2, 4})
        for (int seed : {1, 2, 3}) EXPECT_TRUE(train(np, seed, "").empty()) << np << " ranks, seed " << seed;
}

// The slowed rank's measured ratio is noisy on 2 shared cores: on 2 ranks a
// 3x slowdown measured 2.1-3.1x at its first slow step (a noisy step of the
// other rank put it under the detector's 2x, the streak began a step late
// and CI failed), and on 4 ranks, whose others share the cores and stretch
// too, 6x measured 2.3-7x. So 2 ranks slow theirs 6x (7.3-8.3x measured at
// the first slow step, Zen 3) and 4 ranks 10x (4.4x at the lowest step of 4
// runs): the test is of the detector's delay, not of its threshold.
TEST_F(FleetRun, ASlowedRankIsFlaggedWithinKSteps) {
    for (int np : {2, 4}) {
        // On 2 ranks the run is stored too, for the four roads; 4 ranks on 2
        // cores are measured as before, without the store's writer thread.
        std::string name;
        const std::string store = np == 2 ? dir_->file("slow.db") : "none";
        auto alerts = train(np, 1, np == 2 ? "--inject slow_rank@20:1:6" : "--inject slow_rank@20:1:10", store, &name);
        ASSERT_FALSE(alerts.empty()) << np << " ranks";
        EXPECT_EQ(alerts[0].substr(0, alerts[0].find('@')), "straggler");
        int step = std::stoi(alerts[0].substr(alerts[0].find('@') + 1));
        EXPECT_GE(step, 20);
        EXPECT_LE(step, 24) << "within K = 5 steps of the slowdown";
        if (np == 2) test::expect_roads_agree(store, name, *dir_);
    }
}

TEST_F(FleetRun, TheHealthCheckCatchesSilentDataCorruptionAtItsStep) {
    std::string name;
    auto alerts = train(2, 1, "--inject sdc@30:1", dir_->file("sdc.db"), &name);
    EXPECT_EQ(alerts, (std::vector<std::string>{"health_check@39"})) << "the first check after step 30, and a halt";
    test::expect_roads_agree(dir_->file("sdc.db"), name, *dir_);
}

}  // namespace
}  // namespace hlat
