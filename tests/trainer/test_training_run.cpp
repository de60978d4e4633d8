// A training run in phases with ordered step hooks: the calls a hook sees for
// each way a run can end, and a resumed run raising exactly the alerts of the
// uninterrupted one (the detectors' windows travel in the checkpoint).
#include "test_util.h"
#include "telemetry/reader.h"
#include "trainer/config/config.h"
#include "trainer/run/step_hook.h"
#include "trainer/run/train.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <csignal>
#include <fstream>
#include <stdexcept>

namespace hlat {
namespace {

// Writes down every call, and can end the run its own way after a step.
class RecordingHook : public StepHook {
  public:
    enum class Then { Nothing, Signal, Throw };
    RecordingHook(Then then, int at_step) : then_(then), at_step_(at_step) {}
    const char* name() const override { return "recording"; }
    void on_start() override { calls.push_back("start"); }
    void before_step(int step, StepRequest&) override { calls.push_back(fmt::format("before {}", step)); }
    void after_step(StepResult& result) override {
        calls.push_back(fmt::format("after {}", result.stats.step));
        if (result.stats.step != at_step_) return;
        if (then_ == Then::Signal) std::raise(SIGINT);
        if (then_ == Then::Throw) throw std::runtime_error("the recording hook failed");
    }
    void on_end(RunEnd how) override { calls.push_back(fmt::format("end {}", run_end_name(how))); }

    std::vector<std::string> calls;

  private:
    Then then_;
    int at_step_;
};

// on_start, then before and after each step 0..last, then on_end.
std::vector<std::string> expected_calls(int last_step, const char* end) {
    std::vector<std::string> calls = {"start"};
    for (int s = 0; s <= last_step; s++) {
        calls.push_back(fmt::format("before {}", s));
        calls.push_back(fmt::format("after {}", s));
    }
    calls.push_back(fmt::format("end {}", end));
    return calls;
}

class TrainingRunTest : public ::testing::Test {
  protected:
    TrainConfig config(const std::string& name, const std::vector<std::string>& inject = {}) {
        test::write_tiny_training(dir, 20, {{"store", dir.file("hlat.db")}, {"peak_gflops", 1.0}});
        nlohmann::json j = nlohmann::json::parse(std::ifstream(dir.file("c.json")));
        j["run"]["data"] = dir.file("t.u16");
        j["run"]["out_dir"] = dir.file(name);
        j["run"]["inject"] = inject;
        return config_from_json(j);
    }

    // Runs 6 steps in this process with the recording hook last; returns the exit code.
    int train_recording(const TrainConfig& c, RecordingHook::Then then, int at_step) {
        TrainOptions options;
        options.steps = 6;
        options.faults = parse_faults(c.run.inject);
        options.extra_hooks.push_back(hook = std::make_shared<RecordingHook>(then, at_step));
        return train(c, options);
    }

    test::ScratchDir dir{"training_run"};
    std::shared_ptr<RecordingHook> hook;
};

TEST_F(TrainingRunTest, HookSeesTheSameOrderForEveryWayARunEnds) {
    EXPECT_EQ(train_recording(config("finished"), RecordingHook::Then::Nothing, -1), 0);
    EXPECT_EQ(hook->calls, expected_calls(5, "finished"));

    EXPECT_EQ(train_recording(config("stopped"), RecordingHook::Then::Signal, 2), 128 + SIGINT);
    EXPECT_EQ(hook->calls, expected_calls(2, "stopped"));

    // A NaN gradient at step 3: the nonfinite detector's policy is halt.
    EXPECT_EQ(train_recording(config("halted", {"nan@3"}), RecordingHook::Then::Nothing, -1), kExitHalted);
    EXPECT_EQ(hook->calls, expected_calls(3, "halted"));

    EXPECT_THROW(train_recording(config("crashed"), RecordingHook::Then::Throw, 4), std::runtime_error);
    EXPECT_EQ(hook->calls, expected_calls(4, "crashed"));

    telemetry::Reader reader(dir.file("hlat.db"));
    for (const char* status : {"finished", "stopped", "halted", "crashed"}) {
        std::optional<telemetry::RunRecord> run = reader.find_run(status);
        ASSERT_TRUE(run) << status;
        EXPECT_EQ(run->status, status);
    }
}

// (kind, step) of every alert of a stored run, in the order raised.
std::vector<std::pair<std::string, int64_t>> stored_alerts(const std::string& db, const std::string& name) {
    telemetry::Reader reader(db);
    std::optional<telemetry::RunRecord> run = reader.find_run(name);
    EXPECT_TRUE(run) << name;
    std::vector<std::pair<std::string, int64_t>> out;
    if (run)
        for (const telemetry::Alert& a : reader.alerts(run->id)) out.push_back({a.kind, a.step});
    return out;
}

// A gradient spike at step 30 is judged against the 20 steps before it and a
// leaking mask from step 35 is caught by the probe every 10 steps: a run
// resumed at step 25 and again at 40 must raise what the straight run raised,
// at the same steps, and nothing more.
TEST(TrainingRun, ResumedRunRaisesTheAlertsOfTheUninterruptedOne) {
    test::ScratchDir dir("resume_alerts");
    test::write_tiny_training(dir, 50, {{"checkpoint_every", 10}, {"peak_gflops", 1.0}});
    nlohmann::json j = nlohmann::json::parse(std::ifstream(dir.file("c.json")));
    j["detectors"] = {{"leak_probe", {{"policy", "warn"}, {"every", 10}}}};
    std::ofstream(dir.file("c.json")) << j.dump(2);
    auto hlat_train = [&](const std::string& name, const std::string& extra) {
        test::CommandResult r = test::run_command(fmt::format(
            "{} train --config {} --data {} --store {} --out-dir {} --inject grad_spike@30:100 --inject "
            "mask_leak@35 {}",
            HLAT_BINARY, dir.file("c.json"), dir.file("t.u16"), dir.file("hlat.db"), dir.file(name), extra));
        EXPECT_EQ(r.exit_code, 0) << r.output;
    };
    hlat_train("straight", "");
    hlat_train("resumed", "--steps 25");
    hlat_train("resumed", "--steps 40 --resume");
    hlat_train("resumed", "--resume");

    auto straight = stored_alerts(dir.file("hlat.db"), "straight");
    auto resumed = stored_alerts(dir.file("hlat.db"), "resumed");
    for (const auto& [kind, step] : straight) std::printf("straight: %s at step %lld\n", kind.c_str(), (long long)step);
    const std::pair<std::string, int64_t> spike{"grad_spike", 30}, leak{"information_leak", 39};
    EXPECT_NE(std::find(straight.begin(), straight.end(), spike), straight.end()) << "the planted spike is caught";
    EXPECT_NE(std::find(straight.begin(), straight.end(), leak), straight.end()) << "the planted leak is caught";
    EXPECT_EQ(resumed, straight);
}

}  // namespace
}  // namespace hlat

namespace hlat {
namespace {

// The pure bf16 modes store the share of updates lost to rounding every step,
// overall and per tensor kind; fp32 stores none (nothing to lose there).
TEST(TrainingRun, Bf16RunsStoreTheirLostUpdates) {
    test::ScratchDir dir("lost_updates");
    test::write_tiny_training(dir, 20, {{"peak_gflops", 1.0}});
    for (std::string precision : {"fp32", "bf16", "bf16_kahan"}) {
        test::CommandResult r = test::run_command(fmt::format(
            "{} train --config {} --data {} --store {} --out-dir {} --precision {}", HLAT_BINARY, dir.file("c.json"),
            dir.file("t.u16"), dir.file("hlat.db"), dir.file(precision), precision));
        ASSERT_EQ(r.exit_code, 0) << r.output;
    }
    telemetry::Reader reader(dir.file("hlat.db"));
    auto keys_of = [&](const std::string& name) { return reader.keys(reader.find_run(name)->id); };
    auto has = [](const std::vector<std::string>& keys, const std::string& key) {
        return std::find(keys.begin(), keys.end(), key) != keys.end();
    };
    EXPECT_FALSE(has(keys_of("fp32"), "lost_updates"));
    for (const char* precision : {"bf16", "bf16_kahan"}) {
        std::vector<std::string> keys = keys_of(precision);
        ASSERT_TRUE(has(keys, "lost_updates")) << precision;
        EXPECT_TRUE(has(keys, "lost_updates/kind/qkv_proj")) << precision;
        auto lost = reader.series(reader.find_run(precision)->id, "lost_updates", 0, 19);
        ASSERT_EQ(lost.size(), 20u) << precision;
        for (const auto& point : lost) {
            EXPECT_GE(point.value, 0.0);
            EXPECT_LE(point.value, 1.0);
        }
    }
}

// The paper's precision lesson live: at a low learning rate pure bf16 loses
// most updates of its norm weights (near 1, where a bf16 step is 2^-7) and
// the precision-stall detector says so during the run; the modes that keep
// those updates (fp32, mixed, bf16_sr in expectation, bf16_kahan in its
// compensation buffer) record nothing it reads and raise nothing.
TEST(TrainingRun, PureBf16AtALowRateIsFlaggedAsStallingAndTheModesThatKeepUpdatesAreNot) {
    test::ScratchDir dir("precision_stall");
    test::write_tiny_training(dir, 400, nlohmann::json::object());
    nlohmann::json c = nlohmann::json::parse(std::ifstream(dir.file("c.json")));
    c["schedule"].update({{"max_lr", 3e-4}, {"min_lr", 3e-5}, {"warmup_steps", 20}});
    std::ofstream(dir.file("c.json")) << c.dump();
    for (std::string precision : {"fp32", "mixed", "bf16", "bf16_sr", "bf16_kahan"}) {
        test::CommandResult r = test::run_command(fmt::format(
            "{} train --config {} --data {} --store {} --out-dir {} --precision {} --name {}", HLAT_BINARY,
            dir.file("c.json"), dir.file("t.u16"), dir.file("hlat.db"), dir.file(precision), precision, precision));
        ASSERT_EQ(r.exit_code, 0) << r.output;
    }
    telemetry::Reader reader(dir.file("hlat.db"));
    auto stalls = [&](const std::string& name) {
        std::vector<telemetry::Alert> out;
        for (const telemetry::Alert& a : reader.alerts(reader.find_run(name)->id))
            if (a.kind == "precision_stall") out.push_back(a);
        return out;
    };
    const std::vector<telemetry::Alert> bf16 = stalls("bf16");
    ASSERT_FALSE(bf16.empty()) << "pure bf16 at 3e-4 stalls";
    EXPECT_EQ(bf16[0].step, 120) << "100 steps past the warm-up, judged on stored steps";
    EXPECT_NE(bf16[0].message.find("input_layernorm"), std::string::npos) << bf16[0].message;
    for (const char* precision : {"fp32", "mixed", "bf16_sr", "bf16_kahan"}) {
        EXPECT_TRUE(stalls(precision).empty()) << precision << ": " << stalls(precision)[0].message;
        const std::vector<std::string> vectors = reader.vector_keys(reader.find_run(precision)->id);
        EXPECT_EQ(std::count(vectors.begin(), vectors.end(), "lost_update_share"), 0) << precision;
    }
}

// A statistic recorded in one line where the step computes it
// (StepStats::record) reaches the store, the metrics JSONL and the detectors'
// view (by its name) with nothing else touched: the data wait's share of each
// step, and clipping's scale.
TEST(TrainingRun, ANewStepMetricIsStoredAndWrittenFromItsOneLine) {
    test::ScratchDir dir("new_metric");
    test::write_tiny_training(dir, 12, {{"peak_gflops", 1.0}});
    test::CommandResult r = test::run_command(fmt::format(
        "{} train --config {} --data {} --store {} --out-dir {} --metrics-jsonl {}", HLAT_BINARY, dir.file("c.json"),
        dir.file("t.u16"), dir.file("hlat.db"), dir.file("run"), dir.file("m.jsonl")));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    telemetry::Reader reader(dir.file("hlat.db"));
    const int64_t run = reader.find_run("run")->id;
    auto share = reader.series(run, "data_wait_share", 0, 100);
    auto data = reader.series(run, "data_s", 0, 100), step = reader.series(run, "step_s", 0, 100);
    ASSERT_EQ(share.size(), 12u);
    for (size_t i = 0; i < share.size(); i++) {
        EXPECT_GE(share[i].value, 0.0);
        EXPECT_LE(share[i].value, 1.0);
        EXPECT_DOUBLE_EQ(share[i].value, data[i].value / step[i].value) << "step " << i;
    }
    auto clip_scale = reader.series(run, "clip_scale", 0, 100), grad = reader.series(run, "grad_norm", 0, 100);
    ASSERT_EQ(clip_scale.size(), 12u);
    for (size_t i = 0; i < clip_scale.size(); i++)  // grad_clip 1.0 (the default)
        EXPECT_NEAR(clip_scale[i].value, std::min(1.0, 1.0 / (grad[i].value + 1e-6)), 1e-9) << "step " << i;
    std::ifstream jsonl(dir.file("m.jsonl"));
    int lines_with_it = 0;
    for (std::string line; std::getline(jsonl, line);) lines_with_it += nlohmann::json::parse(line).contains("data_wait_share");
    EXPECT_EQ(lines_with_it, 12);
}

}  // namespace
}  // namespace hlat
