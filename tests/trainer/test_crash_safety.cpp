// A trainer killed with SIGKILL leaves a readable store holding every step up
// to its last commit, and a resumed run continues the same series with no
// duplicate and no missing step.
#include "telemetry/reader.h"
#include "telemetry/clock.h"
#include "test_util.h"

#include <fmt/format.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <thread>

namespace hlat {
namespace {

TEST(CrashSafety, SigkillLosesAtMostTheLastBatchAndResumeFillsTheSeries) {
    test::ScratchDir dir("crash");
    test::write_tiny_training(dir, 100000, {{"checkpoint_every", 25}, {"keep_checkpoints", 2}, {"tensor_norms_every", 10}});
    std::string db = dir.file("s.db");
    std::string args = fmt::format("train --config {} --data {} --out-dir {} --store {} --name crashy", dir.file("c.json"),
                                   dir.file("t.u16"), dir.file("run"), db);

    // Start the trainer, wait until the store holds some steps, kill it without warning.
    auto started = test::run_command(fmt::format("sh -c '{} {} > {} 2>&1 & echo $!'", HLAT_BINARY, args, dir.file("log1")));
    int pid = std::stoi(started.output);
    int64_t run = -1;
    size_t seen = 0;
    for (int i = 0; i < 600 && seen < 80; i++) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        try {
            telemetry::Reader r(db);
            if (auto found = r.find_run("crashy")) {
                run = found->id;
                seen = r.series(run, "loss", 0, 1 << 30).size();
            }
        } catch (const telemetry::StoreError&) {  // not created yet
        }
    }
    ASSERT_GE(seen, 80u) << "the trainer did not get going";
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    double killed_at = telemetry::now_seconds();

    int64_t last_before;
    {
        telemetry::Reader r(db);
        auto loss = r.series(run, "loss", 0, 1 << 30);
        ASSERT_GE(loss.size(), seen);
        last_before = loss.back().step;
        EXPECT_EQ((int64_t)loss.size(), last_before + 1) << "every step up to the last commit, none missing";
        EXPECT_EQ(r.find_run("crashy")->status, "running") << "a killed process cannot say it crashed";
        EXPECT_FALSE(r.series(run, "grad_norm/layers.1.qkv_proj", 0, 1 << 30).empty()) << "per-layer norms streamed";
        EXPECT_FALSE(r.checkpoints(run).empty());
    }

    // Resume to a few steps past the kill: the steps after the checkpoint are recomputed and replace the old rows.
    const int64_t target = last_before + 30;
    auto resumed = test::run_command(fmt::format("{} {} --resume --steps {}", HLAT_BINARY, args, target));
    ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
    telemetry::Reader r(db);
    auto loss = r.series(run, "loss", 0, 1 << 30);
    ASSERT_EQ((int64_t)loss.size(), target) << "no duplicate and no missing step";
    EXPECT_EQ(loss.back().step, target - 1);
    // The store is flushed before every checkpoint, so it never lags behind one.
    size_t at = resumed.output.find(" at step ");
    ASSERT_NE(at, std::string::npos) << resumed.output;
    int64_t checkpoint = std::stoll(resumed.output.substr(at + 9));
    EXPECT_LE(checkpoint, last_before + 1);
    EXPECT_LT(loss[checkpoint - 1].wall_time, killed_at) << "steps up to the checkpoint are the first run's";
    for (int64_t s = checkpoint; s <= last_before; s++)
        EXPECT_GT(loss[s].wall_time, killed_at) << "step " << s << " after the checkpoint was recomputed and replaced";
    auto events = r.events(run);
    bool restart = false;
    for (auto& e : events) restart |= e.kind == "restart";
    EXPECT_TRUE(restart);
    EXPECT_EQ(r.find_run("crashy")->status, "finished");
    telemetry::Uptime u = r.uptime(run);
    EXPECT_EQ(u.restarts, 1);
    EXPECT_LT(u.ratio, 1.0) << "the time between the kill and the restart is downtime";
    EXPECT_GT(u.ratio, 0.0);
}

}  // namespace
}  // namespace hlat
