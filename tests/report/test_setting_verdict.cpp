// The precision verdict: runs grouped by setting (the same config but for the
// seed), each setting's gap to fp32 judged against the seed-to-seed spread,
// by hand-made runs whose answers are worked out below, and through a store
// the way `hlat compare` reads it.
#include "report/postmortem.h"
#include "report/setting_verdict.h"
#include "telemetry/reader.h"
#include "telemetry/writer.h"
#include "test_util.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace hlat {
namespace {

using namespace report;

RunPostmortem run(const std::string& name, const std::string& precision, int64_t seed, double heldout,
                  const std::string& beta2 = "0.95") {
    RunPostmortem r;
    r.name = name;
    r.precision = precision;
    r.seed = seed;
    r.final_heldout = heldout;
    r.setting = {{"precision.mode", '"' + precision + '"'}, {"optimizer.beta2", beta2}};
    return r;
}

const SettingSummary& find(const std::vector<SettingSummary>& settings, const std::string& name) {
    for (const auto& s : settings)
        if (s.name == name) return s;
    throw std::runtime_error("no setting " + name);
}

// The paper's precision lesson as the verdict says it: pure bf16 behind fp32
// in every seed, its runs flagged by the precision-stall detector while they
// trained, names lost updates as the cause; bf16_sr, whose runs were not
// flagged and which is not behind, names none.
TEST(SettingVerdict, AStalledSettingBehindTheBaselineNamesLostUpdates) {
    std::vector<RunPostmortem> runs;
    for (int seed = 1; seed <= 3; seed++) {
        runs.push_back(run(fmt::format("fp32-{}", seed), "fp32", seed, 2.13 + 0.01 * seed));
        runs.push_back(run(fmt::format("bf16-{}", seed), "bf16", seed, 2.55 + 0.01 * seed));
        runs.back().alerts["precision_stall"] = 2;
        runs.back().lost_updates = 0.9;
        runs.push_back(run(fmt::format("sr-{}", seed), "bf16_sr", seed, 2.12 + 0.01 * seed));
        runs.back().lost_updates = 0.9;  // deferred in expectation, not lost: no stall alert
    }
    runs[1].alerts.clear();  // one run the detector missed: said as 2 of 3
    auto settings = summarize_settings(runs);
    const SettingSummary& bf16 = find(settings, "bf16");
    EXPECT_EQ(bf16.stalled, 2);
    EXPECT_EQ(bf16.verdict.rfind("worse by 0.4200 ± ", 0), 0u) << bf16.verdict;
    EXPECT_NE(bf16.verdict.find("worse in 3 of 3 seeds"), std::string::npos) << bf16.verdict;
    EXPECT_NE(bf16.verdict.find("the cause: lost updates (precision_stall in 2 of 3 runs; 90% of all updates rounded "
                                "away at the end), which bf16_sr, bf16_kahan and mixed keep"),
              std::string::npos)
        << bf16.verdict;
    EXPECT_EQ(find(settings, "bf16_sr").verdict.find("cause"), std::string::npos);
    // Flagged but not shown worse (one seed ahead, one behind): no cause is named for a gap the seeds do not resolve.
    runs[1].final_heldout = 2.10, runs[1].alerts["precision_stall"] = 1;
    runs[4].final_heldout = 2.17, runs[7].final_heldout = 2.30;
    const std::string unresolved = find(summarize_settings(runs), "bf16").verdict;
    EXPECT_EQ(unresolved.find("the cause"), std::string::npos) << unresolved;
}

TEST(SettingVerdict, GapsAgainstTheSeedSpread) {
    std::vector<RunPostmortem> runs = {
        run("bf16-1", "bf16", 1, 3.20),      run("fp32-1", "fp32", 1, 3.00),    run("fp32-2", "fp32", 2, 3.02),
        run("fp32-3", "fp32", 3, 2.98),      run("bf16-2", "bf16", 2, 3.21),    run("bf16-3", "bf16", 3, 3.19),
        run("sr-1", "bf16_sr", 1, 3.001),    run("sr-2", "bf16_sr", 2, 3.025),  run("sr-3", "bf16_sr", 3, 2.976),
        run("b99-1", "bf16", 1, 3.5, "0.99"), run("mixed-1", "mixed", 1, 2.9),
        run("other-4", "bf16_kahan", 4, 3.10), run("other-5", "bf16_kahan", 5, 3.12),
    };
    auto settings = summarize_settings(runs);
    ASSERT_EQ(settings.size(), 6u);
    EXPECT_EQ(settings[0].name, "bf16 (optimizer.beta2=0.95)") << "the order of first appearance";

    const SettingSummary& fp32 = find(settings, "fp32");
    EXPECT_TRUE(fp32.baseline) << "fp32 is the baseline wherever it is named";
    EXPECT_EQ(fp32.verdict, "the baseline");
    EXPECT_NEAR(fp32.mean, 3.00, 1e-12);
    EXPECT_NEAR(fp32.spread, 0.02, 1e-12);  // sample standard deviation of 3.00, 3.02, 2.98
    EXPECT_EQ(fp32.seeds, (std::vector<int64_t>{1, 2, 3}));

    // Paired by seed: gaps 0.20, 0.19, 0.21; mean 0.2, sd 0.01; t(2, 0.975) = 4.3027.
    const SettingSummary& bf16 = find(settings, "bf16 (optimizer.beta2=0.95)");
    EXPECT_TRUE(bf16.paired);
    EXPECT_NEAR(bf16.gap, 0.20, 1e-9);
    EXPECT_NEAR(bf16.margin, 4.302653 * 0.01 / std::sqrt(3.0), 1e-6);
    EXPECT_EQ(bf16.verdict, "worse by 0.2000 ± 0.0248, beyond the seed spread (worse in 3 of 3 seeds)");

    // Gaps 0.001, 0.005, -0.004: inside their margin.
    const SettingSummary& sr = find(settings, "bf16_sr");
    EXPECT_NEAR(sr.gap, 0.000666667, 1e-8);
    EXPECT_EQ(sr.verdict.rfind("indistinguishable from fp32 (+0.0007, worse in 2 of 3 seeds; the 95% interval ±", 0), 0u)
        << sr.verdict;
    EXPECT_EQ(sr.worse, 2);
    EXPECT_EQ(sr.compared, 3);

    EXPECT_EQ(find(settings, "bf16 (optimizer.beta2=0.99)").verdict, "gap +0.5000; one seed, no spread to judge it by");
    EXPECT_EQ(find(settings, "mixed").verdict, "gap -0.1000; one seed, no spread to judge it by");

    // Seeds 4 and 5 have no fp32 run: Welch's interval. Means 3.11 against
    // 3.00, variances of the mean 0.0002/2 and 0.0004/3, df 2.88.
    const SettingSummary& kahan = find(settings, "bf16_kahan");
    EXPECT_FALSE(kahan.paired);
    EXPECT_NEAR(kahan.gap, 0.11, 1e-9);
    const double se = std::sqrt(0.0002 / 2 + 0.0004 / 3);
    EXPECT_GT(kahan.margin, 3.18 * se) << "t at fewer than 3 degrees of freedom";
    EXPECT_LT(kahan.margin, 4.31 * se) << "t at more than 2 degrees of freedom";
    EXPECT_EQ(kahan.verdict.rfind("worse by 0.1100 ± ", 0), 0u) << kahan.verdict;

    std::vector<size_t> of = setting_of_runs(runs);
    EXPECT_EQ(of[0], of[4]);
    EXPECT_NE(of[0], of[9]) << "another beta2 is another setting";
}

// Three seeds of bf16 against three of fp32, every bf16 seed worse than its
// fp32 seed (H100 runs of issue 34: paired gaps +0.012, +0.005, +0.017), yet
// 3 seeds give t(2) = 4.30 and an interval wider than the gap. The verdict
// says what the seeds say first, then that the interval does not resolve it
// and how many seeds would: sd of the gaps 0.00603, and t(3) * 0.00603 / 2 =
// 0.0096 < 0.0113 at 4 seeds, while t(2) * 0.00603 / sqrt(3) = 0.0150 > 0.0113 at 3.
TEST(SettingVerdict, AllSeedsWorseWithAWideInterval) {
    std::vector<RunPostmortem> runs = {
        run("fp32-1", "fp32", 1, 3.0),   run("fp32-2", "fp32", 2, 3.0005), run("fp32-3", "fp32", 3, 2.9995),
        run("bf16-1", "bf16", 1, 3.012), run("bf16-2", "bf16", 2, 3.0055), run("bf16-3", "bf16", 3, 3.0165),
    };
    auto settings = summarize_settings(runs);
    const SettingSummary& bf16 = find(settings, "bf16");
    EXPECT_TRUE(bf16.paired);
    EXPECT_NEAR(bf16.gap, 0.011333, 1e-6);
    EXPECT_GT(bf16.margin, bf16.gap) << "the interval does not resolve the gap";
    EXPECT_EQ(bf16.worse, 3);
    EXPECT_EQ(bf16.seeds_to_resolve, 4);
    EXPECT_EQ(bf16.verdict, fmt::format("worse in 3 of 3 seeds (+0.0113; the 95% interval ±{:.4f} does not resolve it: "
                                        "about 4 seeds would)",
                                        bf16.margin));
    EXPECT_EQ(settings_html(settings).find("indistinguishable"), std::string::npos) << "the report says the same";
    EXPECT_NE(settings_html(settings).find("worse in 3 of 3 seeds"), std::string::npos);
}

TEST(SettingVerdict, RunsWithoutSeedsSayWhyThereIsNoVerdict) {
    auto settings = summarize_settings({run("a", "fp32", -1, 3.0), run("b", "bf16", -1, 3.1), run("c", "mixed", -1, 3.0)});
    EXPECT_NE(no_verdict_reason(settings).find("--meta seed=N"), std::string::npos);
    EXPECT_NE(settings_html(settings).find("No verdict by setting"), std::string::npos);
    EXPECT_EQ(no_verdict_reason(summarize_settings({run("a", "fp32", -1, 3.0), run("b", "bf16", -1, 3.1)})), "")
        << "two runs side by side are no puzzle";
}

// Unpaired (no baseline run of the same seeds): the seeds that would
// resolve the gap are counted with Welch's degrees of freedom, as the
// interval is, so the sentence never names the seeds already run.
TEST(SettingVerdict, SeedsToResolveAgreeWithTheInterval) {
    auto settings = summarize_settings({run("f1", "fp32", 1, 3.0), run("f2", "fp32", 2, 3.0), run("f3", "fp32", 3, 3.0),
                                        run("b4", "bf16", 4, 3.01), run("b5", "bf16", 5, 3.02), run("b6", "bf16", 6, 3.03)});
    const SettingSummary& bf16 = find(settings, "bf16");
    ASSERT_FALSE(bf16.paired);
    EXPECT_NEAR(bf16.gap, 0.02, 1e-9);
    EXPECT_GT(bf16.margin, bf16.gap) << "df 2: t = 4.30 x 0.00577";
    EXPECT_GT(bf16.seeds_to_resolve, 3) << bf16.verdict;
    EXPECT_EQ(bf16.verdict.rfind("worse in 3 of 3 runs (+0.0200; the 95% interval ±", 0), 0u) << bf16.verdict;
}

// Two runs of one seed (a log imported twice, two trainers' logs given the
// same --meta seed) are no spread across seeds: not paired, and with one
// baseline run no interval at all.
TEST(SettingVerdict, RunsOfOneSeedAreNotTwoSeeds) {
    auto settings = summarize_settings({run("f1", "fp32", 1, 3.0), run("b1", "bf16", 1, 4.7), run("b1-again", "bf16", 1, 4.71)});
    const SettingSummary& bf16 = find(settings, "bf16");
    EXPECT_FALSE(bf16.paired);
    EXPECT_NE(bf16.verdict.find("no spread to judge it by"), std::string::npos) << bf16.verdict;
}

TEST(SettingVerdict, EqualSeedsAreNeitherWorseNorBetter) {
    auto settings = summarize_settings({run("f1", "fp32", 1, 3.0), run("f2", "fp32", 2, 3.1),
                                        run("b1", "bf16_kahan", 1, 3.0), run("b2", "bf16_kahan", 2, 3.1)});
    const SettingSummary& kahan = find(settings, "bf16_kahan");
    EXPECT_EQ(kahan.worse, 0);
    EXPECT_EQ(kahan.better, 0);
    EXPECT_EQ(kahan.verdict.find("better"), std::string::npos) << kahan.verdict;
    EXPECT_NE(kahan.verdict.find("worse in 0 of 2 seeds"), std::string::npos) << kahan.verdict;
}

TEST(SettingVerdict, WithoutFp32TheFirstSettingIsTheBaseline) {
    auto settings = summarize_settings({run("a", "bf16", 1, 3.0), run("b", "mixed", 1, 3.1), run("c", "bf16", 2, 3.2)});
    ASSERT_EQ(settings.size(), 2u);
    EXPECT_TRUE(settings[0].baseline);
    EXPECT_EQ(settings[0].runs, (std::vector<std::string>{"a", "c"}));
    EXPECT_NEAR(settings[1].gap, 0.0, 1e-12) << "3.1 against the mean of 3.0 and 3.2";
    EXPECT_NE(settings[1].verdict.find("one seed, no spread to judge it by"), std::string::npos) << settings[1].verdict;
}

// Through a store: seeds read from each run's config, the other per-run
// fields (name, folder) ignored, lost updates averaged over the last steps,
// each run's loss gap taken against the first run of its seed.
TEST(SettingVerdict, ComparedRunsFromAStore) {
    test::ScratchDir dir("setting_verdict");
    {
        telemetry::Writer w(dir.file("s.db"));
        for (const char* precision : {"fp32", "bf16"})
            for (int seed = 1; seed <= 2; seed++) {
                telemetry::RunRecord r;
                r.name = fmt::format("{}-{}", precision, seed);
                r.precision = precision;
                r.config = nlohmann::json{{"run", {{"seed", seed}, {"name", r.name}, {"out_dir", "runs/" + r.name}}},
                                          {"precision", {{"mode", precision}}}}.dump();
                int64_t id = w.open_run(r, false);
                std::vector<telemetry::MetricPoint> pts;
                const bool bf16 = std::string(precision) == "bf16";
                for (int64_t step = 0; step < 100; step++) {
                    pts.push_back({"loss", step, 3.0 + (bf16 ? 0.2 : 0.0) + 0.05 * seed, 1.0 * step});
                    if (bf16) pts.push_back({"lost_updates", step, step < 50 ? 0.1 : 0.5, 1.0 * step});
                }
                pts.push_back({"heldout_loss", 99, (bf16 ? 3.3 : 3.0) + 0.01 * seed, 99.0});
                w.metrics(id, std::move(pts));
            }
    }
    telemetry::Reader reader(dir.file("s.db"));
    auto runs = postmortem(reader, {"fp32-1", "fp32-2", "bf16-1", "bf16-2"});
    EXPECT_EQ(runs[2].seed, 1);
    EXPECT_EQ(runs[2].setting.count("run.name"), 0u);
    EXPECT_NEAR(runs[2].lost_updates, 0.5, 1e-12) << "the mean over the last 50 steps";
    EXPECT_TRUE(std::isnan(runs[0].lost_updates)) << "fp32 has no lost-update series";
    EXPECT_TRUE(std::isnan(runs[1].loss_gap)) << "fp32-2 is the first run of seed 2";
    EXPECT_NEAR(runs[3].loss_gap, 0.2, 1e-9) << "bf16-2 against fp32-2, not against fp32-1";
    auto settings = summarize_settings(runs);
    ASSERT_EQ(settings.size(), 2u);
    EXPECT_EQ(settings[1].name, "bf16");
    EXPECT_TRUE(settings[1].paired);
    EXPECT_NEAR(settings[1].gap, 0.3, 1e-9);
    EXPECT_NEAR(settings[1].margin, 0.0, 1e-9) << "the same gap at both seeds";
    EXPECT_EQ(settings[1].verdict, "worse by 0.3000 ± 0.0000, beyond the seed spread (worse in 2 of 2 seeds)");
    const std::string html = postmortem_html(runs, {});
    EXPECT_NE(html.find("Verdict by setting"), std::string::npos);
    EXPECT_NE(html.find("50.0%"), std::string::npos) << "the lost-update share";
}

// A config that does not hold an integer seed (an imported run's) is a run
// without a seed, not a failed comparison.
TEST(SettingVerdict, ARunWhoseSeedIsNoIntegerHasNone) {
    test::ScratchDir dir("setting_verdict_seed");
    {
        telemetry::Writer w(dir.file("s.db"));
        telemetry::RunRecord r;
        r.name = "imported";
        r.config = R"({"run": {"seed": "abc"}, "optimizer": {"beta2": 0.95}})";
        w.open_run(r, false);
    }
    telemetry::Reader reader(dir.file("s.db"));
    auto runs = postmortem(reader, {"imported"});
    EXPECT_EQ(runs[0].seed, -1);
    EXPECT_EQ(runs[0].precision, "-") << "a run that did not say its precision";
    EXPECT_EQ(runs[0].setting.count("run.seed"), 0u);
    EXPECT_EQ(runs[0].setting.at("optimizer.beta2"), "0.95");
}

}  // namespace
}  // namespace hlat
