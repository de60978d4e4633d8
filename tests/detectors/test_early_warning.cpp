// Statistics over layers, heads and tensors on the one road (issue 35): the
// store's vector rows and heatmaps, JSONL and HTTP values that are lists or
// objects, the early-warning detectors, the flight recorder, and a resumed
// detector suite raising what an uninterrupted one raises.
#include "api_requests.h"
#include "test_util.h"

#include "detectors/detector.h"
#include "session/run_session.h"
#include "telemetry/ingest.h"
#include "telemetry/reader.h"
#include "telemetry/writer.h"
#include "web/api.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <optional>
#include <random>

namespace hlat {
namespace {

using detectors::DetectorsConfig;
using detectors::DetectorSuite;
using detectors::StepView;
using telemetry::VectorPoint;

std::shared_ptr<const std::vector<std::string>> head_labels(int layers, int heads) {
    auto labels = std::make_shared<std::vector<std::string>>();
    for (int l = 0; l < layers; l++)
        for (int h = 0; h < heads; h++) labels->push_back(fmt::format("layers.{}.head.{}", l, h));
    return labels;
}

StepView view_of(int64_t step, const std::string& key, std::vector<float> values,
                 std::shared_ptr<const std::vector<std::string>> labels) {
    StepView v;
    v.step = step;
    v.vectors[key] = {std::move(values), std::move(labels)};
    return v;
}

std::vector<telemetry::Alert> alerts_of(DetectorSuite& suite, const StepView& v) {
    std::vector<telemetry::Alert> out;
    for (auto& f : suite.observe(v)) out.push_back(f.alert);
    return out;
}

// ---- the store ----

TEST(VectorStore, RowsComeBackWithTheirNamesAndHeatmapsReduceEachBucket) {
    test::ScratchDir dir("vectors");
    const std::string path = dir.file("s.db");
    auto labels = head_labels(2, 2);
    int64_t run;
    {
        telemetry::Writer w(path);
        run = w.open_run({0, "r", "{}", "fp32", "running", "", "", "hlat"}, false);
        std::vector<VectorPoint> points;
        for (int s = 0; s < 100; s++)
            points.push_back({"attn_logit_max", s, {(float)s, (float)-s, s == 50 ? NAN : 1.0f, 2.0f}, 1.0 * s,
                              s == 0 ? labels : nullptr});
        w.vectors(run, points);
        w.flush();
    }
    telemetry::Reader r(path);
    EXPECT_EQ(r.vector_keys(run), std::vector<std::string>{"attn_logit_max"});
    EXPECT_EQ(r.vector_labels(run, "attn_logit_max"), *labels);
    auto rows = r.vector_series(run, "attn_logit_max", 10, 12);
    ASSERT_EQ(rows.size(), 3u);
    EXPECT_EQ(rows[1].step, 11);
    EXPECT_EQ(rows[1].values[1], -11.0f);
    EXPECT_EQ((*rows[1].labels)[3], "layers.1.head.1");
    EXPECT_TRUE(std::isnan(r.vector_series(run, "attn_logit_max", 50, 50)[0].values[2]));

    telemetry::Heatmap max = r.heatmap(run, "attn_logit_max", 0, 99, 10);
    ASSERT_EQ(max.buckets(), 10u);
    EXPECT_EQ(max.first_step[5], 50);
    EXPECT_EQ(max.last_step[5], 59);
    EXPECT_EQ(max.values[5 * 4 + 0], 59.0f);  // the bucket's largest
    EXPECT_EQ(max.values[5 * 4 + 2], 1.0f);   // the NaN at step 50 skipped
    telemetry::Heatmap min = r.heatmap(run, "attn_logit_max", 0, 99, 10, telemetry::Reduce::Min);
    EXPECT_EQ(min.values[5 * 4 + 0], 50.0f);
    EXPECT_EQ(min.values[5 * 4 + 1], -59.0f);
    EXPECT_EQ(r.heatmap(run, "attn_logit_max", 0, 99, 1000).buckets(), 100u) << "never more buckets than rows";
}

// Each reduction skips NaN and infinities; an element with no finite value in
// a bucket is NaN; a sub-range is bucketed from its own first stored step.
TEST(VectorStore, HeatmapReductionsSkipNonFiniteValues) {
    test::ScratchDir dir("vector-reduce");
    const std::string path = dir.file("s.db");
    int64_t run;
    {
        telemetry::Writer w(path);
        run = w.open_run({0, "r", "{}", "fp32", "running", "", "", "hlat"}, false);
        std::vector<VectorPoint> points;
        // Every 10th step only (as the flight recorder stores between alerts).
        for (int s = 0; s < 100; s += 10) {
            const float inf = s == 30 ? INFINITY : s == 40 ? -INFINITY : (float)s;
            points.push_back({"residual_rms", s, {(float)s, inf, NAN}, 1.0 * s, nullptr});
        }
        w.vectors(run, points);
        w.flush();
    }
    telemetry::Reader r(path);
    using telemetry::Reduce;
    // Buckets of 20 steps from 0: {0, 10}, {20, 30}, {40, 50}, ...
    auto mean = r.heatmap(run, "residual_rms", 0, 99, 5, Reduce::Mean);
    ASSERT_EQ(mean.buckets(), 5u);
    EXPECT_EQ(mean.values[0 * 3 + 0], 5.0f);
    EXPECT_EQ(mean.values[1 * 3 + 1], 20.0f) << "+inf at step 30 left out";
    EXPECT_EQ(mean.values[2 * 3 + 1], 50.0f) << "-inf at step 40 left out";
    EXPECT_TRUE(std::isnan(mean.values[0 * 3 + 2])) << "no finite value: NaN";
    auto last = r.heatmap(run, "residual_rms", 0, 99, 5, Reduce::Last);
    EXPECT_EQ(last.values[1 * 3 + 1], 20.0f);
    EXPECT_EQ(last.values[4 * 3 + 0], 90.0f);
    auto max = r.heatmap(run, "residual_rms", 0, 99, 5, Reduce::Max);
    EXPECT_EQ(max.values[1 * 3 + 1], 20.0f);
    EXPECT_TRUE(std::isnan(max.values[3 * 3 + 2]));
    auto min = r.heatmap(run, "residual_rms", 0, 99, 5, Reduce::Min);
    EXPECT_EQ(min.values[2 * 3 + 1], 50.0f);
    auto part = r.heatmap(run, "residual_rms", 25, 75, 100, Reduce::Max);
    ASSERT_EQ(part.buckets(), 5u);
    EXPECT_EQ(part.first_step.front(), 30);
    EXPECT_EQ(part.last_step.back(), 70);
    EXPECT_EQ(r.heatmap(run, "residual_rms", 91, 99, 10).buckets(), 0u) << "no rows in the range";
}

// ---- ingest ----

TEST(VectorIngest, ObjectsListsAndMatricesAreVectorsAndBadOnesAreNamed) {
    telemetry::LineParser parser("log", telemetry::LogFormat::Jsonl);
    auto batch = parser.parse(
        R"({"step": 3, "loss": 2.5, "update_ratio": {"layers.10.o_proj": 3, "layers.2.o_proj": 2, "embed": 1}, )"
        R"("residual_rms": [1, 2, null], "attn_logit_max": [[1, 2], [3, 4]]})"
        "\n",
        100.0);
    ASSERT_EQ(batch.points.size(), 1u);
    ASSERT_EQ(batch.vectors.size(), 3u);
    std::map<std::string, VectorPoint> by_key;
    for (auto& v : batch.vectors) by_key[v.key] = v;
    // Names in natural order: layer 2 before layer 10.
    EXPECT_EQ(*by_key["update_ratio"].labels, (std::vector<std::string>{"embed", "layers.2.o_proj", "layers.10.o_proj"}));
    EXPECT_EQ(by_key["update_ratio"].values, (std::vector<float>{1, 2, 3}));
    EXPECT_EQ(by_key["update_ratio"].step, 3);
    EXPECT_TRUE(std::isnan(by_key["residual_rms"].values[2]));
    EXPECT_EQ(*by_key["attn_logit_max"].labels, (std::vector<std::string>{"0.0", "0.1", "1.0", "1.1"}));
    EXPECT_EQ(by_key["attn_logit_max"].values[2], 3.0f);

    const std::vector<std::string> bad_lines = {
        R"({"step": 1, "x": [1, "a"]})", R"({"step": 1, "x": [[1, 2], [3]]})", R"({"step": 1, "x": {"a": {"b": 1}}})",
        R"({"step": 1, "x": []})", R"({"step": 1, "x": {")" + std::string(300, 'n') + R"(": 1}})"};
    for (const std::string& bad : bad_lines) {
        telemetry::LineParser p("log", telemetry::LogFormat::Jsonl);
        try {
            p.parse(bad + "\n", 0.0);
            ADD_FAILURE() << bad << " was taken";
        } catch (const telemetry::IngestError& e) {
            EXPECT_NE(std::string(e.what()).find("field \"x\""), std::string::npos) << e.what();
        }
    }
}

// The parser remembers each key's names from line to line: a line with other
// names (a layer added, one renamed, one with a bad name) is read as itself.
TEST(VectorIngest, NamesThatChangeFromLineToLineAreReadAsThemselves) {
    telemetry::LineParser parser("log", telemetry::LogFormat::Jsonl);
    auto batch = parser.parse(R"({"step": 1, "r": {"layers.10": 10, "layers.2": 2}})"
                              "\n"
                              R"({"step": 2, "r": {"layers.2": 20, "layers.10": 100}})"
                              "\n"
                              R"({"step": 3, "r": {"layers.2": 200, "layers.3": 300, "layers.10": 1000}})"
                              "\n"
                              R"({"step": 4, "r": {"layers.2": 2000, "layers.9": 9000}})"
                              "\n",
                              100.0);
    ASSERT_EQ(batch.vectors.size(), 4u);
    EXPECT_EQ(batch.vectors[0].labels, batch.vectors[1].labels) << "the same names: one shared copy";
    EXPECT_EQ(batch.vectors[1].values, (std::vector<float>{20, 100}));
    EXPECT_EQ(*batch.vectors[2].labels, (std::vector<std::string>{"layers.2", "layers.3", "layers.10"}));
    EXPECT_EQ(batch.vectors[2].values, (std::vector<float>{200, 300, 1000}));
    EXPECT_EQ(*batch.vectors[3].labels, (std::vector<std::string>{"layers.2", "layers.9"}));
    EXPECT_EQ(batch.vectors[3].values, (std::vector<float>{2000, 9000}));
    try {
        parser.parse(R"({"step": 5, "r": {"layers.2": 1, ")" + std::string(300, 'n') + R"(": 2}})"
                     "\n",
                     100.0);
        ADD_FAILURE() << "a bad element name after good lines was taken";
    } catch (const telemetry::IngestError& e) {
        EXPECT_NE(std::string(e.what()).find("field \"r\""), std::string::npos) << e.what();
    }
    auto again = parser.parse(R"({"step": 6, "r": {"layers.2": 7, "layers.9": 8}})"
                              "\n",
                              100.0);
    ASSERT_EQ(again.vectors.size(), 1u);
    EXPECT_EQ(again.vectors[0].values, (std::vector<float>{7, 8})) << "the refused line left nothing behind";
}

// Every line the fast reader (telemetry/jsonl_fast.h) takes gives what the
// full reader gives: each line read as it is, and again with a bare NaN field
// added (not JSON: only the full way reads it), compared but for that field.
TEST(JsonlFastPath, AgreesWithTheFullReaderLineByLine) {
    const std::vector<std::string> lines = {
        R"({"step": 1, "loss": 2.5, "lr": 3e-4, "n": 12345678901234567890, "z": -0, "w": -1.5E+2})",
        R"({"step": 2, "loss": 2, "loss": null})",                           // repeated, the last null: no loss
        R"({"step": 3, "iter": 5, "loss": 1})",                               // iter=step: the last taken wins
        R"({"step": 4, "train_loss": 3, "loss": 2})",                         // two names mapped to one
        R"({"step": 5, "v": {"a1": 1, "a01": 2}, "A": 1})",              // equal as numbers, two names
        R"({"step": 6, "v": {"a01": 1, "a1": 2}})",                           // the same names, the other order
        R"({"step": 7, "v": {"a1": 1, "a01": 2, "a1": 3}})",                  // a repeated element
        R"({"step": 8, "r": {"layers.10": 1, "layers.2": null}, "time": 5})",
        R"({"step": 9, "r": {"layers.2": 1, "layers.10": "x"}})",             // refused half way through
        R"({"step": 10, "r": {"layers.2": 4, "layers.10": 5}, "event": 3})",  // a number named event
        R"({"step": 11, "r": {"layers.2": 6}, "train_loss": {"x": 1}})",
        R"({"step": 12, "loss": null, "r": {"layers.2": 7, "layers.3": 8, "layers.10": 9}})",
        R"({"step": 13, "l\u00f6ss": 1, "r": {"layers.2": 1e-50, "layers.3": 1e39, "layers.10": 1e400}})",
        R"({"step": 14, "loss": 1} {"x": 2})",                                // trailing content
        R"({"step": 15, "loss": 1, })",                                       // a trailing comma
        "{\"step\": 16, \"lo\xffss\": 1}",                                   // not UTF-8
        "{\"step\": 17, \"lo\tss\": 1}",                                     // a raw control character
        R"({"step": 18, "r": {}, "loss": 1})",                                // an empty object
        R"({"step": 19, "r": {"a": {"b": 1}}})",                              // deeper
        R"({"step": 20, "loss": [1, 2], "ok": true})",
        R"({"step": 21, "\udc00": 1})",                                      // a lone low surrogate
        R"({"step": 22, "\ud888\u1234": 1})",                                // a high one, then no low one
        R"({"step": 23, "\ud83d\ude00": 1, "r": {"\u00e9": 2}})",           // a pair, escaped names
    };
    const telemetry::KeyMap map = {{"iter", "step"}, {"train_loss", "loss"}};
    telemetry::LineParser fast("log", telemetry::LogFormat::Jsonl, "", map);
    telemetry::LineParser full("log", telemetry::LogFormat::Jsonl, "", map);
    auto same = [](double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); };
    for (const std::string& line : lines) {
        SCOPED_TRACE(line);
        const std::string forced = line.substr(0, line.size() - 1) + R"(, "zz_forced": NaN})";
        std::optional<telemetry::ParsedBatch> a, b;
        try {
            a = fast.parse(line + "\n", 100.0);
        } catch (const telemetry::IngestError&) {
        }
        try {
            b = full.parse(forced + "\n", 100.0);
        } catch (const telemetry::IngestError&) {
        }
        ASSERT_EQ(a.has_value(), b.has_value()) << "both read it, or both refuse it";
        if (!a) continue;
        std::erase_if(b->points, [](const auto& p) { return p.key == "zz_forced"; });
        ASSERT_EQ(a->points.size(), b->points.size());
        for (size_t i = 0; i < a->points.size(); i++) {
            EXPECT_EQ(a->points[i].key, b->points[i].key);
            EXPECT_EQ(a->points[i].step, b->points[i].step);
            EXPECT_TRUE(same(a->points[i].value, b->points[i].value)) << a->points[i].key;
        }
        ASSERT_EQ(a->vectors.size(), b->vectors.size());
        for (size_t i = 0; i < a->vectors.size(); i++) {
            EXPECT_EQ(a->vectors[i].key, b->vectors[i].key);
            EXPECT_EQ(a->vectors[i].step, b->vectors[i].step);
            EXPECT_EQ(*a->vectors[i].labels, *b->vectors[i].labels);
            ASSERT_EQ(a->vectors[i].values.size(), b->vectors[i].values.size());
            for (size_t k = 0; k < a->vectors[i].values.size(); k++)
                EXPECT_TRUE(same(a->vectors[i].values[k], b->vectors[i].values[k])) << a->vectors[i].key << " " << k;
        }
    }
}

// ---- the detectors ----

TEST(EarlyWarning, AnAttentionLogitPastItsBoundNamesTheHeadAndTheFirstToMove) {
    DetectorSuite suite(DetectorsConfig{});
    auto labels = head_labels(2, 2);
    std::vector<telemetry::Alert> all;
    for (int s = 0; s < 40; s++) {
        // Head 1.0 grows first (past 50, half the floor, at step 8), head 0.1 later and
        // faster (past the bound of 1,000 at step 31).
        const float h10 = 20.0f + 4.0f * (float)s, h01 = s < 20 ? 20.0f : 20.0f + 90.0f * (float)(s - 20);
        for (auto& a : alerts_of(suite, view_of(s, "attn_logit_max", {20, h01, std::min(h10, 95.0f), 20}, labels)))
            all.push_back(a);
    }
    ASSERT_EQ(all.size(), 1u) << "once per episode";
    EXPECT_EQ(all[0].kind, "attention_logit");
    EXPECT_EQ(all[0].step, 31);
    auto data = nlohmann::json::parse(all[0].data);
    EXPECT_EQ(data["head"], "layers.0.head.1");
    EXPECT_EQ(data["first_moved"], "layers.1.head.0");
    EXPECT_EQ(data["first_moved_step"], 8);
    EXPECT_FALSE(data.contains("projected")) << "no schedule recorded: the bound itself";
    EXPECT_NE(all[0].message.find("layers.0.head.1"), std::string::npos) << all[0].message;

    // A clean model's logits (20-50) raise nothing, nor do logits held at
    // 500 by a client that does not record its schedule.
    DetectorSuite clean(DetectorsConfig{});
    for (int s = 0; s < 500; s++) {
        EXPECT_TRUE(alerts_of(clean, view_of(s, "attn_logit_max", {20, 50, 35, 28}, labels)).empty());
        EXPECT_TRUE(alerts_of(clean, view_of(s, "attn_logit_max", {20, 500, 35, 28}, labels)).empty());
    }
}

// An episode ends once every head is back below 0.8 x the bound in force:
// a logit held at 500 after one past 1,000 (no schedule recorded) ends it,
// one held past the bound (here a bound below the floor) does not.
TEST(EarlyWarning, AnAttentionLogitEpisodeEndsBelowTheBoundInForce) {
    auto labels = head_labels(1, 2);
    auto count = [&](DetectorsConfig c, const std::vector<float>& logits) {
        DetectorSuite suite(c);
        size_t n = 0;
        for (size_t s = 0; s < logits.size(); s++) n += alerts_of(suite, view_of((int64_t)s, "attn_logit_max",
                                                                                    {20, logits[s]}, labels)).size();
        return n;
    };
    std::vector<float> twice = {1500, 500, 500, 500, 1500, 1500};
    EXPECT_EQ(count(DetectorsConfig{}, twice), 2u);
    DetectorsConfig low;
    low.attention_logit.bound = 50;  // below the floor: the bound alone
    EXPECT_EQ(count(low, std::vector<float>(10, 70.0f)), 1u);
    // An overflowed head (inf as a float) is past any bound.
    EXPECT_EQ(count(DetectorsConfig{}, {20, INFINITY}), 1u);
}

// Logits past the floor while the schedule still climbs: projected to the
// largest rate ahead as lr^1.5, they pass the bound long before the logits do.
std::vector<telemetry::Alert> projected_alerts(double lr, double lr_max_ahead, float logit) {
    DetectorSuite suite(DetectorsConfig{});
    auto labels = head_labels(1, 2);
    std::vector<telemetry::Alert> all;
    for (int s = 0; s < 20; s++) {
        StepView v = view_of(s, "attn_logit_max", {30, s < 10 ? 30.0f : logit}, labels);
        v.values["lr"] = lr, v.values["lr_max_ahead"] = lr_max_ahead;
        for (auto& a : alerts_of(suite, v)) all.push_back(a);
    }
    return all;
}

TEST(EarlyWarning, AnAttentionLogitIsProjectedToThePeakRateTheScheduleHasAhead) {
    // 150 at lr 0.05 with 0.3 ahead: 150 x 6^1.5 = 2,204 > 1,000.
    auto ahead = projected_alerts(0.05, 0.3, 150.0f);
    ASSERT_EQ(ahead.size(), 1u);
    EXPECT_EQ(ahead[0].step, 10);
    auto data = nlohmann::json::parse(ahead[0].data);
    EXPECT_EQ(data["head"], "layers.0.head.1");
    EXPECT_NEAR(data["projected"].get<double>(), 150.0 * std::pow(6.0, 1.5), 1e-6 * 2204);
    EXPECT_NE(ahead[0].message.find("climbs to 0.3"), std::string::npos) << ahead[0].message;

    // The same logit with the rate at most doubling (150 x 2^1.5 = 424), or
    // with the rate already at its peak: nothing.
    EXPECT_TRUE(projected_alerts(0.05, 0.1, 150.0f).empty());
    EXPECT_TRUE(projected_alerts(0.3, 0.3, 150.0f).empty());
    // Below the floor nothing is projected, however far the rate will climb:
    // a fresh model's logits (30-90) do not grow with the rate.
    EXPECT_TRUE(projected_alerts(0.003, 0.3, 90.0f).empty());
    // Past the bound itself, the schedule does not matter; the alert
    // counts the heads past the bound itself.
    auto past = projected_alerts(0.3, 0.3, 1500.0f);
    ASSERT_EQ(past.size(), 1u);
    EXPECT_EQ(nlohmann::json::parse(past[0].data)["heads_past"], 1);
    DetectorsConfig c;
    c.attention_logit.lr_exponent = 0;  // the projection off
    DetectorSuite suite(c);
    StepView v = view_of(0, "attn_logit_max", {30, 150}, head_labels(1, 2));
    v.values["lr"] = 0.05, v.values["lr_max_ahead"] = 0.3;
    EXPECT_TRUE(alerts_of(suite, v).empty());
}

TEST(EarlyWarning, AttentionEntropyCollapseIsJudgedAfterWarmUp) {
    DetectorsConfig c;
    c.attention_entropy.warmup_steps = 10;
    DetectorSuite suite(c);
    auto labels = head_labels(1, 2);
    std::vector<telemetry::Alert> all;
    for (int s = 0; s < 60; s++) {
        const float collapsing = s < 5 ? 1e-4f : std::max(1e-4f, 2.0f - 0.06f * (float)s);  // low in warm-up too
        for (auto& a : alerts_of(suite, view_of(s, "attn_entropy", {2.0f, collapsing}, labels))) all.push_back(a);
    }
    ASSERT_EQ(all.size(), 1u);
    EXPECT_EQ(all[0].kind, "attention_entropy");
    EXPECT_EQ(nlohmann::json::parse(all[0].data)["head"], "layers.0.head.1");
    EXPECT_EQ(all[0].step, 34);  // 2 - 0.06 s < 0.001 from step 34 (the warm-up's low values not judged)
}

// Update ratios of `n` tensors under a learning rate `lr(step)`: Adam's
// update over the weight is about lr times a noisy constant per tensor.
std::vector<telemetry::Alert> update_ratio_alerts(const std::function<double(int)>& lr, unsigned seed, int steps,
                                                  DetectorSuite& suite) {
    std::mt19937 rng(seed);
    std::normal_distribution<double> noise(0.0, 0.08);
    auto labels = std::make_shared<std::vector<std::string>>();
    for (int i = 0; i < 12; i++) labels->push_back(fmt::format("layers.{}.qkv_proj", i));
    std::vector<telemetry::Alert> out;
    for (int s = 0; s < steps; s++) {
        std::vector<float> ratios;
        for (int i = 0; i < 12; i++) ratios.push_back((float)(lr(s) * (1 + 0.1 * i) * std::exp(noise(rng))));
        for (auto& a : alerts_of(suite, view_of(s, "update_ratio", ratios, labels))) out.push_back(a);
    }
    return out;
}

double schedule(int s) {  // linear warm-up over 50 steps, then cosine to a tenth over 1000
    if (s < 50) return 1e-3 * (s + 1) / 50.0;
    return 1e-4 + 0.5 * 9e-4 * (1 + std::cos(M_PI * std::min(1.0, (s - 50) / 1000.0)));
}

TEST(EarlyWarning, AnUpdateRatioJumpFlagsALearningRateFaultInItsFirstStepAndASchedulePassesQuietly) {
    for (unsigned seed = 0; seed < 5; seed++) {
        for (double factor : {3.0, 10.0, 30.0}) {
            DetectorSuite suite(DetectorsConfig{});
            auto fault = [&](int s) { return schedule(s) * (s >= 300 && s < 320 ? factor : 1.0); };
            auto alerts = update_ratio_alerts(fault, seed, 600, suite);
            ASSERT_EQ(alerts.size(), 1u) << "seed " << seed << " x" << factor;
            EXPECT_EQ(alerts[0].step, 300) << "seed " << seed << " x" << factor;
            EXPECT_EQ(alerts[0].kind, "update_ratio");
        }
        DetectorSuite clean(DetectorsConfig{});
        EXPECT_TRUE(update_ratio_alerts(schedule, seed, 1100, clean).empty()) << "seed " << seed;
    }
}

TEST(EarlyWarning, EpsRegimeAndLogzDriftNameWhatMoved) {
    DetectorSuite suite(DetectorsConfig{});
    auto labels = std::make_shared<std::vector<std::string>>(std::vector<std::string>{"embed_tokens", "lm_head"});
    std::vector<telemetry::Alert> all;
    for (int s = 0; s < 300; s++) {
        StepView v = view_of(s, "eps_share", {0.02f, s < 200 ? 0.1f : 0.8f}, labels);
        v.values["logz_mean"] = s < 250 ? 9.0 : 9.0 + (s - 250);
        for (auto& a : alerts_of(suite, v)) all.push_back(a);
    }
    ASSERT_EQ(all.size(), 2u);
    EXPECT_EQ(all[0].kind, "eps_regime");
    EXPECT_EQ(all[0].step, 200);
    EXPECT_NE(all[0].message.find("lm_head"), std::string::npos) << all[0].message;
    EXPECT_EQ(all[1].kind, "logz_drift");
    EXPECT_EQ(all[1].step, 261);  // 11 nats from 9 > the 10-nat bound
}

// A run resumed from a checkpoint restores the detectors' windows: the
// detectors then raise at the same steps as in an uninterrupted run.
TEST(EarlyWarning, AResumedSuiteRaisesWhatAnUninterruptedOneRaises) {
    auto fault = [](int s) { return schedule(s) * (s >= 300 && s < 320 ? 10.0 : 1.0); };
    DetectorSuite whole(DetectorsConfig{});
    auto expected = update_ratio_alerts(fault, 7, 600, whole);
    ASSERT_EQ(expected.size(), 1u);

    DetectorSuite before(DetectorsConfig{});
    update_ratio_alerts(fault, 7, 295, before);
    const nlohmann::json saved = nlohmann::json::parse(before.state().dump());  // through a checkpoint's JSON
    DetectorSuite after(DetectorsConfig{});
    after.restore(saved);
    // The same noise: the rng replays from the start, so feed the resumed suite the same values.
    std::mt19937 rng(7);
    std::normal_distribution<double> noise(0.0, 0.08);
    auto labels = std::make_shared<std::vector<std::string>>();
    for (int i = 0; i < 12; i++) labels->push_back(fmt::format("layers.{}.qkv_proj", i));
    std::vector<telemetry::Alert> resumed;
    for (int s = 0; s < 600; s++) {
        std::vector<float> ratios;
        for (int i = 0; i < 12; i++) ratios.push_back((float)(fault(s) * (1 + 0.1 * i) * std::exp(noise(rng))));
        if (s < 295) continue;
        for (auto& a : alerts_of(after, view_of(s, "update_ratio", ratios, labels))) resumed.push_back(a);
    }
    ASSERT_EQ(resumed.size(), 1u);
    EXPECT_EQ(resumed[0].step, expected[0].step);
    EXPECT_EQ(resumed[0].message, expected[0].message);
}

// ---- the flight recorder ----

TEST(FlightRecorder, AnAlertStoresItsWindowAtFullResolution) {
    test::ScratchDir dir("flight");
    const std::string path = dir.file("s.db");
    telemetry::Writer writer(path);
    telemetry::RunRecord run{0, "r", R"({"detectors": {"flight_recorder": {"steps": 16, "store_every": 10}}})",
                             "fp32", "running", "", "", "hlat"};
    auto session = session::RunSession::open(&writer, run, {});
    auto labels = head_labels(1, 2);
    std::vector<session::Fired> fired;
    for (int s = 0; s < 60; s++) {
        session::StepPoints p;
        p.add("loss", 2.0);
        p.add("attn_logit_max", {30.0f, s >= 45 ? 1500.0f : 30.0f}, labels);
        for (auto& f : session->step(s, p)) fired.push_back(f);
    }
    session->flush();
    ASSERT_EQ(fired.size(), 1u);
    telemetry::Reader r(path);
    std::vector<int64_t> steps;
    for (const auto& v : r.vector_series(session->run_id(), "attn_logit_max", 0, 100)) steps.push_back(v.step);
    // Every 10th step, and every step of the 16 up to the alert at 45.
    std::vector<int64_t> expected = {0, 10, 20};
    for (int s = 30; s <= 45; s++) expected.push_back(s);
    expected.push_back(50);
    EXPECT_EQ(steps, expected);
    auto alerts = r.alerts(session->run_id());
    ASSERT_EQ(alerts.size(), 1u);
    auto data = nlohmann::json::parse(alerts[0].data);
    EXPECT_EQ(data["flight_recorder"]["first_step"], 30);
    EXPECT_EQ(data["flight_recorder"]["last_step"], 45);
}

// ---- over HTTP ----

TEST(VectorApi, AClientsVectorsAreDetectedStoredAndServedAsAHeatmap) {
    test::ScratchDir dir("vector-api");
    web::Api api(dir.file("s.db"), "token");
    ASSERT_EQ(api.handle(test::post("/api/v1/runs/c/start", "token", R"({"precision": "fp32"})")).status, 200);
    std::string body;
    for (int s = 0; s < 30; s++)
        body += fmt::format(R"({{"step": {}, "loss": 2, "attn_logit_max": {{"layers.0.head.0": 20, "layers.0.head.1": {}}}}})",
                            s, s == 25 ? 1500 : 20) + "\n";
    web::Response ingest = api.handle(test::post("/api/v1/runs/c/ingest", "token", body));
    ASSERT_EQ(ingest.status, 200) << ingest.body;
    auto reply = nlohmann::json::parse(ingest.body);
    ASSERT_EQ(reply["alerts"].size(), 1u) << ingest.body;
    EXPECT_EQ(reply["alerts"][0]["kind"], "attention_logit");

    auto keys = nlohmann::json::parse(api.handle(test::get("/api/v1/runs/c/keys")).body);
    ASSERT_EQ(keys["vectors"].size(), 1u);
    EXPECT_EQ(keys["vectors"][0]["key"], "attn_logit_max");
    EXPECT_EQ(keys["vectors"][0]["elements"], 2);
    web::Response heat = api.handle(test::get("/api/v1/runs/c/heatmap", {{"key", "attn_logit_max"}, {"buckets", "3"}}));
    ASSERT_EQ(heat.status, 200) << heat.body;
    auto h = nlohmann::json::parse(heat.body);
    EXPECT_EQ(h["labels"], (nlohmann::json{"layers.0.head.0", "layers.0.head.1"}));
    EXPECT_EQ(h["reduce"], "max");
    ASSERT_FALSE(h["values"].empty());
    EXPECT_EQ(h["values"].back()[1], 1500) << "the alert's window is stored at full resolution";
    EXPECT_EQ(api.handle(test::get("/api/v1/runs/c/heatmap", {{"key", "nope"}})).status, 404);
    EXPECT_EQ(api.handle(test::get("/api/v1/runs/c/heatmap", {{"key", "attn_logit_max"}, {"reduce", "sum"}})).status,
              400);
}

}  // namespace
}  // namespace hlat
