// Detectors: each rule on records made to trip it or not, bad settings, and
// the trainer with injected faults: online and offline alerts agree, a halt
// stops the run cleanly, and the webhook delivers.
#include "detectors/config.h"
#include "session/https_post.h"
#include "detectors/detector.h"
#include "report/postmortem.h"
#include "session/step_views.h"
#include "session/run_session.h"
#include "telemetry/reader.h"
#include "telemetry/writer.h"
#include "roads.h"
#include "test_util.h"
#include "webhook_listener.h"
#include "trainer/checkpoint/checkpoint.h"
#include "web/api.h"
#include "web/server.h"

#include <civetweb.h>
#include <unistd.h>
#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <mutex>

namespace hlat {
namespace {

using namespace detectors;
using namespace report;
using session::replay;

std::vector<std::string> kinds(const std::vector<Fired>& fired) {
    std::vector<std::string> out;
    for (const Fired& f : fired) out.push_back(f.alert.kind);
    return out;
}

std::vector<StepView> noisy_run(int n, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<double> noise(0.0, 0.05);
    std::vector<StepView> out;
    for (int i = 0; i < n; i++) {
        StepView r;
        r.step = i;
        r.values["loss"] = 4.0 * std::exp(-i / 300.0) + 1.5 + noise(rng);
        r.values["grad_norm"] = 1.0 + 0.5 * std::exp(-i / 100.0) + std::fabs(noise(rng)) * 2;
        out.push_back(r);
    }
    return out;
}

TEST(SpikeTracker, CountsEpisodesAsThePaperDoes) {
    SpikeTracker t(3, SpikeRule::Additive, 0.1);
    std::vector<double> norms = {1, 1, 1, 5, 1, 1, 1, 3, 3, 3, 1, 1};
    std::vector<int> ended;
    for (double g : norms) {
        auto o = t.observe(g);
        if (o.ended_length) ended.push_back(o.ended_length);
    }
    // 5 is one step; then 3,3,3: the mean catches up (mean of 1,1,3 = 1.67, of 1,3,3 = 2.33) so it is 3 steps.
    EXPECT_EQ(ended, (std::vector<int>{1, 3}));
}

TEST(Detectors, CleanNoisyRunRaisesNothing) {
    for (unsigned seed : {1u, 2u, 3u}) EXPECT_TRUE(replay(noisy_run(2000, seed), DetectorsConfig{}).empty()) << seed;
}

TEST(Detectors, EachRuleFiresOnItsPattern) {
    auto run = noisy_run(600, 4);
    auto spike = run;
    spike[300].values["grad_norm"] *= 50;
    EXPECT_EQ(kinds(replay(spike, {})), std::vector<std::string>{"grad_spike"});
    auto nan = run;
    nan[200].values["grad_norm"] = NAN;
    auto fired = replay(nan, {});
    ASSERT_EQ(kinds(fired), std::vector<std::string>{"nonfinite"});
    EXPECT_EQ(fired[0].alert.step, 200);
    EXPECT_EQ(fired[0].policy, Policy::Halt) << "non-finite halts by default";
    auto jump = run;
    for (int i = 400; i < 405; i++) jump[i].values["loss"] += 3.0;
    fired = replay(jump, {});
    ASSERT_EQ(kinds(fired), std::vector<std::string>{"loss_jump"});
    EXPECT_EQ(fired[0].alert.step, 401) << "a jump is known once the next step is still up";
    EXPECT_EQ(fired[0].alert.severity, "warning");
    auto slide = run;
    for (int i = 300; i < 600; i++) slide[i].values["loss"] = 1.5 * std::exp(-(i - 300) / 20.0);
    EXPECT_EQ(kinds(replay(slide, {})), std::vector<std::string>{"loss_floor"});
    auto gap = run;
    for (int i = 500; i < 600; i += 10) gap[i].values["heldout_loss"] = 6.0;  // evaluated every 10 steps
    fired = replay(gap, {});
    ASSERT_EQ(kinds(fired), std::vector<std::string>{"loss_below_heldout"});
    EXPECT_EQ(fired[0].alert.step, 549) << "the gap has to hold for 50 steps in a row";
    // An easy stretch of real text (a table, boilerplate) dips the loss far
    // below the held-out loss for 20 steps, then it is back: not a leak.
    auto dip = run;
    dip[300].values["heldout_loss"] = dip[300].values["loss"] + 0.5;
    for (int i = 500; i < 520; i++) dip[i].values["loss"] = 1.2;
    EXPECT_TRUE(replay(dip, {}).empty()) << ::testing::PrintToString(kinds(replay(dip, {})));
    auto diverge = noisy_run(1200, 5);
    for (int i = 700; i < 1200; i++) {
        diverge[i].values["grad_norm"] = 1.0 * std::exp((i - 700) / 150.0);
        diverge[i].values["loss"] = diverge[699].values["loss"] + 0.0005 * (i - 700);
    }
    fired = replay(diverge, {});
    ASSERT_FALSE(fired.empty());
    EXPECT_EQ(fired.back().alert.kind, "divergence");
    nlohmann::json evidence = nlohmann::json::parse(fired.back().alert.data);
    EXPECT_GT(evidence["grad_trend_now"].get<double>(), 3.0 * evidence["grad_trend_then"].get<double>());
}

// Healthy runs, as real logs have them, raise no warning: a held-out loss
// measured at step 0 while the training loss falls through warm-up, one-step
// loss outliers (a rank-0 loss that is not all-reduced), and early
// training's gradient-norm swings. Each fixture fires under the old rule
// (the control), so the quiet is the rule's doing.
TEST(Detectors, AStaleHeldOutLossIsNoYardstick) {
    std::vector<StepView> warmup;
    for (int i = 0; i < 400; i++) {
        StepView r;
        r.step = i;
        r.values["loss"] = 7.0 * std::exp(-i / 15.0) + 4.0;  // 11 nats at step 0, 4.3 by step 50
        r.values["grad_norm"] = 1.0;
        if (i % 250 == 0) r.values["heldout_loss"] = r.values["loss"] + 0.05;  // steps 0 and 250
        warmup.push_back(r);
    }
    EXPECT_TRUE(replay(warmup, {}).empty()) << ::testing::PrintToString(kinds(replay(warmup, {})));
    DetectorsConfig old_rule;
    old_rule.loss_floor.heldout_max_age = 1000;
    auto fired = replay(warmup, old_rule);
    ASSERT_EQ(kinds(fired), std::vector<std::string>{"loss_below_heldout"}) << "the control: compared 50+ steps on";
    EXPECT_GE(fired[0].alert.step, 50);
}

TEST(Detectors, OneStepLossOutliersAreNotesAndAJumpWarns) {
    for (unsigned seed : {1u, 2u, 3u}) {
        auto run = noisy_run(5100, seed);
        for (int i = 100; i < 5100; i += 50) run[i].values["loss"] += 3.0;  // 100 outliers, each back at the next step
        auto fired = replay(run, {});
        ASSERT_EQ(fired.size(), 100u) << seed;
        for (const Fired& f : fired) {
            EXPECT_EQ(f.alert.kind, "loss_jump");
            EXPECT_EQ(f.alert.severity, "info") << "step " << f.alert.step;
            EXPECT_EQ(f.alert.step % 50, 0) << "dated at the outlier's own step";
        }
        auto jump = run;
        for (int i = 2620; i < 2630; i++) jump[i].values["loss"] += 3.0;  // ten steps up: sustained
        int warnings = 0;
        for (const Fired& f : replay(jump, {}))
            if (f.alert.severity == "warning") {
                warnings++;
                EXPECT_EQ(f.alert.step, 2621);
            }
        EXPECT_EQ(warnings, 1) << seed;
    }
    DetectorsConfig halting;
    halting.loss_jump.policy = Policy::Halt;
    auto run = noisy_run(600, 7);
    run[300].values["loss"] += 3.0;
    auto fired = replay(run, halting);
    ASSERT_EQ(fired.size(), 1u);
    EXPECT_EQ(fired[0].policy, Policy::Warn) << "a note halts nothing, whatever the detector's policy";
    DetectorsConfig rewinding;
    rewinding.loss_jump.policy = Policy::RewindSkip;
    fired = replay(run, rewinding);
    ASSERT_EQ(fired.size(), 1u);
    EXPECT_EQ(fired[0].policy, Policy::RewindSkip) << "a one-step outlier is the bad batch rewind_skip skips";
}

TEST(Detectors, AStretchOfNonFiniteStepsIsOneAlert) {
    auto run = noisy_run(600, 5);
    for (int i = 200; i < 500; i++) run[i].values["loss"] = NAN;  // a log that went NaN and stayed there
    run[550].values["grad_norm"] = INFINITY;                          // a later, separate one
    auto fired = replay(run, {});
    ASSERT_EQ(kinds(fired), (std::vector<std::string>{"nonfinite", "nonfinite"}));
    EXPECT_EQ(fired[0].alert.step, 200);
    EXPECT_EQ(fired[1].alert.step, 550) << "a finite step in between re-arms it";
}

TEST(Detectors, WarmUpGradientSwingsAreNotSpikes) {
    for (unsigned seed : {1u, 2u, 3u}) {
        auto run = noisy_run(600, seed);
        run[48].values["grad_norm"] *= 6.0;  // early training's swing (nanoGPT, clean: 6.4x at step 48)
        EXPECT_TRUE(replay(run, {}).empty()) << seed << ": " << ::testing::PrintToString(kinds(replay(run, {})));
        DetectorsConfig no_warmup;
        no_warmup.grad_spike.warmup_steps = 0;
        EXPECT_EQ(kinds(replay(run, no_warmup)), std::vector<std::string>{"grad_spike"}) << "the control";
        run[300].values["grad_norm"] *= 20.0;  // after warm-up
        auto fired = replay(run, {});
        ASSERT_EQ(kinds(fired), std::vector<std::string>{"grad_spike"}) << seed;
        EXPECT_EQ(fired[0].alert.step, 300);
    }
    auto early = noisy_run(600, 4);
    early[40].values["grad_norm"] *= 200.0;  // an injected fault in warm-up is still caught at once
    ASSERT_EQ(kinds(replay(early, {})), std::vector<std::string>{"grad_spike"});
}

TEST(Detectors, SustainedSpikeAndScaleFreeRules) {
    std::vector<StepView> run;
    for (int i = 0; i < 200; i++) {
        StepView r;
        r.step = i;
        r.values["loss"] = 2.0;
        r.values["grad_norm"] = i < 100 ? 1.0 : 1.0 + 0.01 * (i - 100) * (i - 100);  // keeps outrunning its own mean
        run.push_back(r);
    }
    DetectorsConfig c;
    c.grad_spike.sustained_steps = 30;
    c.grad_spike.alert_ratio = 1000;
    auto fired = replay(run, c);
    ASSERT_EQ(kinds(fired), std::vector<std::string>{"sustained_grad_spike"});
    EXPECT_EQ(nlohmann::json::parse(fired[0].alert.data)["episode_steps"], 30);
    // The same with a scale-free rule: z-score over the window.
    c.grad_spike.rule = SpikeRule::ZScore;
    c.grad_spike.threshold = 2.0;
    EXPECT_EQ(kinds(replay(run, c)), std::vector<std::string>{"sustained_grad_spike"});
}

std::string config_error(const nlohmann::json& j) {
    try {
        detectors_from_json(j);
    } catch (const DetectorConfigError& e) {
        return e.what();
    }
    return "";
}

// The report's charts on a 20,000-step run with one-step spikes: with 300
// buckets, each spike is the top of its bucket's band, and the alert steps
// are marked on the charts by step.
TEST(PostmortemReport, ChartsAreEnvelopesWithAlertMarkers) {
    test::ScratchDir dir("postmortem_envelopes");
    const std::map<int64_t, double> grad_spikes = {{1234, 4.29}, {8715, 2.02}, {15001, 1.5}};
    {
        telemetry::Writer w(dir.file("s.db"));
        telemetry::RunRecord r;
        r.name = "long";
        r.precision = "bf16";
        int64_t id = w.open_run(r, false);
        std::vector<telemetry::MetricPoint> pts;
        for (int64_t step = 0; step < 20000; step++) {
            const double grad = grad_spikes.count(step) ? grad_spikes.at(step) : 0.5 + 0.01 * (step % 7);
            pts.push_back({"grad_norm", step, grad, 1000.0 + step});
            pts.push_back({"loss", step, step == 8715 ? 9.5 : 3.0 + 0.01 * (step % 5), 1000.0 + step});
        }
        w.metrics(id, std::move(pts));
        w.alert(id, {"grad_spike", "warning", 8715, "a spike", "{}", 9715.0});
    }
    telemetry::Reader reader(dir.file("s.db"));
    auto runs = postmortem(reader, {"long"});
    ASSERT_EQ(runs.size(), 1u);
    const RunPostmortem& r = runs[0];
    ASSERT_LE(r.grad_curve.size(), 300u);
    for (auto [step, value] : grad_spikes) {
        auto bucket = std::find_if(r.grad_curve.begin(), r.grad_curve.end(), [&](const Envelope& e) { return e.x >= step; });
        ASSERT_NE(bucket, r.grad_curve.end());
        EXPECT_EQ(bucket->hi, value) << "the spike at step " << step << " tops its bucket's band";
        EXPECT_LT(bucket->mean, 0.6) << "the line is the bucket's mean";
    }
    double loss_top = 0.0;
    for (const Envelope& e : r.loss_curve) loss_top = std::max(loss_top, e.hi);
    EXPECT_EQ(loss_top, 9.5) << "the loss outlier is inside the loss band";
    EXPECT_EQ(r.alert_steps, std::vector<int64_t>{8715});
    const std::string html = postmortem_html(runs, {});
    EXPECT_NE(html.find(R"(<polygon class="band")"), std::string::npos);
    size_t markers = 0;
    for (size_t at = html.find(R"(data-step="8715")"); at != std::string::npos; at = html.find(R"(data-step="8715")", at + 1))
        markers++;
    EXPECT_EQ(markers, 2u) << "the alert is marked on the loss and grad-norm charts";
}

// A run's history is replayed a range of steps at a time; steps numbered in
// tokens (far apart) are reached by jumping over the empty ranges.
TEST(Replay, StoredRecordsOfSparseStepsInOrder) {
    test::ScratchDir dir("replay_sparse");
    int64_t id;
    {
        telemetry::Writer w(dir.file("s.db"));
        telemetry::RunRecord r;
        r.name = "tokens";
        id = w.open_run(r, false);
        w.metrics(id, {{"loss", 0, 3.0, 1.0}, {"loss", 20000, 2.5, 2.0}, {"loss", 5000000000000, 2.0, 3.0},
                       {"grad_norm", 10000000000000, 1.0, 4.0}});
    }
    telemetry::Reader reader(dir.file("s.db"));
    std::vector<StepView> records;
    session::for_each_stored_step(reader, id, DetectorSuite(DetectorsConfig{}),
                                  [&](const StepView& v) { records.push_back(v); });
    ASSERT_EQ(records.size(), 4u);
    EXPECT_EQ(records[1].step, 20000);
    EXPECT_EQ(records[2].step, 5000000000000);
    EXPECT_EQ(records[3].step, 10000000000000);
}

TEST(DetectorConfig, BadSettingsAreNamed) {
    EXPECT_NE(config_error({{"spike_hunter", nlohmann::json::object()}}).find("unknown detector \"detectors.spike_hunter\""),
              std::string::npos);
    EXPECT_NE(config_error({{"grad_spike", {{"window", 0}}}}).find("\"detectors.grad_spike.window\" is 0; expected an integer >= 1"),
              std::string::npos);
    EXPECT_NE(config_error({{"grad_spike", {{"threshold", -0.1}}}}).find("detectors.grad_spike.threshold"),
              std::string::npos);
    EXPECT_NE(config_error({{"loss_jump", {{"policy", "panic"}}}}).find("\"off\", \"warn\", \"halt\" or \"rewind_skip\""),
              std::string::npos);
    EXPECT_NE(config_error({{"grad_spike", {{"rule", "vibes"}}}}).find("detectors.grad_spike.rule"), std::string::npos);
    EXPECT_NE(config_error({{"divergence", {{"windows", 3}}}}).find("unknown config field \"detectors.divergence.windows\""),
              std::string::npos);
    EXPECT_NE(config_error({{"webhook", "ftp://x"}}).find("detectors.webhook"), std::string::npos);
    EXPECT_EQ(config_error({{"grad_spike", {{"policy", "halt"}, {"window", 5}}}, {"webhook", "http://127.0.0.1:9/x"}}), "");
    // HTTPS, the chats' payloads, a CA file; a URL refused without being quoted (its path is a secret).
    EXPECT_EQ(config_error({{"webhook", "https://hooks.slack.com/services/T0/B0/secret"}, {"webhook_format", "slack"},
                            {"webhook_ca", "/etc/ssl/certs/ca-certificates.crt"}}),
              "");
    EXPECT_NE(config_error({{"webhook_format", "teams"}}).find("detectors.webhook_format"), std::string::npos);
    EXPECT_EQ(config_error({{"webhook", "hxxps://h/secret"}}).find("secret"), std::string::npos);
}

// What a run's page and API show of its config: where alerts go, never the
// URL's path or credentials; a redacted URL read back posts nothing.
TEST(DetectorConfig, TheWebhooksSecretIsRedactedForReaders) {
    EXPECT_EQ(redacted_webhook("https://hooks.slack.com/services/T0/B0/secret"), "https://hooks.slack.com/\u2026");
    EXPECT_EQ(redacted_webhook("http://user:pw@127.0.0.1:8080/hook?key=secret"), "http://127.0.0.1:8080/\u2026");
    EXPECT_EQ(redacted_webhook("https://example.com"), "https://example.com/\u2026");
    EXPECT_EQ(redacted_webhook(""), "");
    EXPECT_EQ(redacted_webhook("https://u:p?w@h.example/x"), "https://h.example/\u2026") << "a '?' in a password";
    EXPECT_EQ(redacted_webhook("https://h.example?token=secret"), "https://h.example/\u2026");
    EXPECT_EQ(redacted_webhook("https://[::1]:8443/x"), "https://[::1]:8443/\u2026");
    const nlohmann::json stored = {{"run", {{"seed", 3}}},
                                   {"detectors", {{"webhook", "https://discord.com/api/webhooks/1/secret"}}}};
    const nlohmann::json shown = config_for_readers(stored);
    EXPECT_EQ(shown["detectors"]["webhook"], "https://discord.com/\u2026");
    EXPECT_EQ(shown["run"], stored["run"]);
    EXPECT_EQ(config_for_readers({{"detectors", {{"webhook", 42}}}}).dump().find("42"), std::string::npos);
    EXPECT_EQ(config_for_readers(nlohmann::json::array({1})), nlohmann::json::array({1}));
    EXPECT_TRUE(is_redacted_webhook(shown["detectors"]["webhook"].get<std::string>()));
    EXPECT_FALSE(is_redacted_webhook("https://example.com/a/\u2026/b"));
    EXPECT_EQ(detectors_from_json(shown["detectors"]).webhook, "") << "a redacted URL posts nothing";
    EXPECT_EQ(detectors_from_json(stored["detectors"]).webhook, "https://discord.com/api/webhooks/1/secret");
}

// The sender reads a URL as the redaction does: the host past any
// user:password@, an IPv6 address in brackets, the query as part of the
// request's target; a URL it refuses is named redacted.
TEST(DetectorConfig, TheWebhooksSenderReadsTheURLAsItsRedactionDoes) {
    session::PostTarget t = session::parse_post_url("https://user:pa@ss@hooks.example:8443/a/b?key=secret#frag");
    EXPECT_TRUE(t.tls);
    EXPECT_EQ(t.host, "hooks.example");
    EXPECT_EQ(t.port, 8443);
    EXPECT_EQ(t.path, "/a/b?key=secret");
    t = session::parse_post_url("http://[::1]:9/hook");
    EXPECT_EQ(t.host, "::1");
    EXPECT_EQ(t.port, 9);
    t = session::parse_post_url("https://h.example?token=secret");
    EXPECT_EQ(t.host, "h.example");
    EXPECT_EQ(t.port, 443);
    EXPECT_EQ(t.path, "/?token=secret");
    try {
        session::parse_post_url("https://h.example:99999/secret");
        ADD_FAILURE() << "a port past 65535 taken";
    } catch (const std::runtime_error& e) {
        EXPECT_EQ(std::string(e.what()).find("secret"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("h.example:99999/\u2026"), std::string::npos) << e.what();
    }
}

// The trainer with injected faults, through the binary.
// A run fed from outside whose steps arrive cut anywhere (a followed log read
// mid-step, a client that flushes by size): each step must reach the
// detectors once, whole, so the alerts are those of the stored run replayed.
TEST(OnlineMonitor, AStepSplitAcrossBatchesIsSeenOnceWhole) {
    test::ScratchDir dir("split-steps");
    std::vector<telemetry::MetricPoint> points;
    std::mt19937 rng(5);
    std::normal_distribution<double> noise(0.0, 0.05);
    for (int i = 0; i < 400; i++) {
        double loss = 4.0 * std::exp(-i / 300.0) + 1.5 + noise(rng);
        double grad = i == 250 ? 40.0 : 1.0 + std::fabs(noise(rng)) * 2;
        if (i >= 320) loss = 0.02;  // slides to zero past the held-out loss: a leaking mask
        points.push_back({"loss", i, loss, 0.0});
        points.push_back({"grad_norm", i, grad, 0.0});
        if (i % 20 == 19) points.push_back({"heldout_loss", i, 4.0 * std::exp(-i / 300.0) + 1.6, 0.0});
        // A data-parallel fleet's timing, rank 1 slowed from step 100: two keys of one step.
        points.push_back({"straggler_ratio", i, i >= 100 && i < 140 ? 3.0 : 1.02, 0.0});
        points.push_back({"straggler_rank", i, i >= 100 && i < 140 ? 1.0 : (double)(i % 2), 0.0});
    }
    std::vector<Fired> offline = replay(session::steps_from(points, {}, DetectorSuite(DetectorsConfig{})), DetectorsConfig{});
    ASSERT_GE(offline.size(), 2u) << "the run must trip detectors for the comparison to mean anything";

    const std::string store = dir.file("s.db");
    std::vector<Fired> online;
    {
        telemetry::Writer writer(store);
        telemetry::RunRecord run;
        run.name = "split";
        run.source = "client";
        run.id = writer.open_run(run, false);
        writer.flush();
        std::unique_ptr<session::RunSession> monitor;
        for (size_t at = 0; at < points.size(); at += 3) {  // 3 points a batch: most steps cut in two
            // Mid-step, and in the middle of the straggler's slow steps, the server
            // restarts: a new monitor replays what is stored and goes on.
            if (at == 0 || at == 420) {
                writer.flush();
                telemetry::Reader reader(store);
                monitor = session::RunSession::attach(writer, reader, *reader.find_run("split"));
            }
            std::vector<telemetry::MetricPoint> batch(points.begin() + at,
                                                      points.begin() + std::min(points.size(), at + 3));
            for (Fired& f : monitor->ingest(std::move(batch))) online.push_back(std::move(f));
        }
    }
    ASSERT_EQ(online.size(), offline.size()) << ::testing::PrintToString(kinds(online)) << " online against "
                                             << ::testing::PrintToString(kinds(offline)) << " offline";
    // Kinds and steps; the numbers in a message are those of the part of its
    // step that had arrived when it was raised.
    for (size_t i = 0; i < online.size(); i++) {
        EXPECT_EQ(online[i].alert.kind, offline[i].alert.kind);
        EXPECT_EQ(online[i].alert.step, offline[i].alert.step);
    }
    telemetry::Reader stored(store);
    EXPECT_EQ(stored.alerts(stored.find_run("split")->id).size(), offline.size()) << "each alert stored once";
}

class FaultRun : public ::testing::Test {
  protected:
    test::ScratchDir dir{"faults"};
    void SetUp() override {
        std::vector<uint16_t> ids(60000);
        std::mt19937 rng(3);
        int t = 0;
        for (auto& id : ids) {
            id = (uint16_t)t;
            t = rng() % 10 < 9 ? (t * 7 + 1 + rng() % 3) % 64 : rng() % 64;
        }
        std::ofstream(dir.file("t.u16"), std::ios::binary).write((const char*)ids.data(), ids.size() * 2);
    }
    std::string config(const nlohmann::json& detectors) {
        nlohmann::json c = {
            {"model", {{"vocab_size", 64}, {"dim", 32}, {"n_layers", 2}, {"n_heads", 2}, {"n_kv_heads", 2},
                       {"hidden_dim", 64}, {"max_seq_len", 32}}},
            {"schedule", {{"max_lr", 3e-3}, {"min_lr", 3e-4}, {"warmup_steps", 10}, {"total_steps", 120}}},
            {"run", {{"batch_size", 4}, {"seq_len", 32}, {"threads", 2}, {"eval_every", 0}, {"log_every", 1000},
                     {"tensor_norms_every", 0}}},
            {"detectors", detectors}};
        std::ofstream(dir.file("c.json")) << c.dump();
        return dir.file("c.json");
    }
    test::CommandResult train(const std::string& cfg, const std::string& name, const std::string& extra) {
        return test::run_command(fmt::format("{} train --config {} --data {} --out-dir {} --store {} --name {} {}",
                                             HLAT_BINARY, cfg, dir.file("t.u16"), dir.file(name), dir.file("s.db"),
                                             name, extra));
    }
};

TEST_F(FaultRun, OnlineAndOfflineAlertsAgree) {
    nlohmann::json warn_all = {{"nonfinite", {{"policy", "warn"}}}, {"leak_probe", {{"policy", "off"}}}};
    auto r = train(config(warn_all), "faulty", "--inject grad_spike@40:200 nan@60 lr_spike@80:100:4");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("ALERT grad_spike at step 40"), std::string::npos) << r.output;
    telemetry::Reader reader(dir.file("s.db"));
    auto run = reader.find_run("faulty");
    ASSERT_TRUE(run.has_value());
    EXPECT_NE(run->config.find("grad_spike@40:200"), std::string::npos) << "the injection is recorded with the run";
    auto online = reader.alerts(run->id);
    ASSERT_GE(online.size(), 3u);
    nlohmann::json stored_config = nlohmann::json::parse(run->config);
    auto offline = session::replay_stored(reader, run->id, detectors_from_json(stored_config["detectors"]));
    ASSERT_EQ(offline.size(), online.size());
    for (size_t i = 0; i < online.size(); i++) {
        EXPECT_EQ(offline[i].alert.kind, online[i].kind);
        EXPECT_EQ(offline[i].alert.step, online[i].step);
        EXPECT_EQ(offline[i].alert.message, online[i].message);
        // Routing adds where the flight recorder's window was stored and the
        // attribution (the tensor that moved first, the batch's sequences);
        // the detectors' numbers are the same.
        nlohmann::json routed = nlohmann::json::parse(online[i].data);
        EXPECT_TRUE(routed.contains("flight_recorder")) << online[i].data;
        routed.erase("flight_recorder");
        routed.erase("attribution");
        EXPECT_EQ(nlohmann::json::parse(offline[i].alert.data), routed);
    }
    auto detect = test::run_command(fmt::format("{} detect --store {} --run faulty", HLAT_BINARY, dir.file("s.db")));
    EXPECT_EQ(detect.exit_code, 0) << detect.output;
    EXPECT_NE(detect.output.find(fmt::format("{} alerts", online.size())), std::string::npos) << detect.output;
    EXPECT_NE(detect.output.find("nonfinite"), std::string::npos);
    // The skipped update kept the weights finite: training went on.
    EXPECT_EQ(reader.series(run->id, "loss", 0, 1000).size(), 120u);
    test::expect_roads_agree(dir.file("s.db"), "faulty", dir);  // gradient spike, NaN, lr spike
}

TEST_F(FaultRun, HaltStopsAtTheDetectedStepWithEverythingKept) {
    auto r = train(config({{"leak_probe", {{"every", 10}}}}), "leaky", "--inject mask_leak@25");
    EXPECT_EQ(r.exit_code, 3) << "the documented halt exit code\n" << r.output;
    EXPECT_NE(r.output.find("ALERT information_leak at step 29"), std::string::npos) << r.output;
    telemetry::Reader reader(dir.file("s.db"));
    auto run = reader.find_run("leaky");
    ASSERT_TRUE(run.has_value());
    EXPECT_EQ(run->status, "halted");
    auto loss = reader.series(run->id, "loss", 0, 1000);
    ASSERT_EQ(loss.size(), 30u) << "every step up to the halt";
    EXPECT_EQ(loss.back().step, 29);
    bool halt_event = false;
    for (auto& e : reader.events(run->id)) halt_event |= e.kind == "halt" && e.step == 29;
    EXPECT_TRUE(halt_event);
    // Every probe's measurement is a stored point: 0 before the leak, > 0 after it.
    std::vector<int64_t> probed;
    for (const auto& p : reader.series(run->id, "causality_leak", 0, 1000)) {
        probed.push_back(p.step);
        EXPECT_EQ(p.value > 0, p.step >= 25) << "step " << p.step;
    }
    EXPECT_EQ(probed, (std::vector<int64_t>{0, 9, 19, 29}));
    test::expect_roads_agree(dir.file("s.db"), "leaky", dir);  // the mask leak
    std::vector<std::string> skipped;
    auto ckpt = latest_good_checkpoint(dir.file("leaky"), &skipped);
    ASSERT_TRUE(ckpt.has_value());
    EXPECT_EQ(read_checkpoint_state(*ckpt).step, 30);

    // A clean start is probed before its first step and passes.
    auto clean = train(config({{"leak_probe", {{"every", 10}}}}), "clean", "--steps 25");
    EXPECT_EQ(clean.exit_code, 0) << clean.output;
    EXPECT_EQ(clean.output.find("ALERT"), std::string::npos) << clean.output;
}

TEST_F(FaultRun, NonFiniteGradientHaltsBeforeTheUpdate) {
    auto r = train(config(nlohmann::json::object()), "nan", "--inject nan@15");
    EXPECT_EQ(r.exit_code, 3) << r.output;
    std::vector<std::string> skipped;
    auto ckpt = latest_good_checkpoint(dir.file("nan"), &skipped);
    ASSERT_TRUE(ckpt.has_value()) << "the skipped update left finite weights, so the halt checkpoints them";
    telemetry::Reader reader(dir.file("s.db"));
    auto run = reader.find_run("nan");
    auto pnorm = reader.series(run->id, "param_norm", 0, 100);
    ASSERT_EQ(pnorm.size(), 16u);
    EXPECT_TRUE(std::isfinite(pnorm.back().value));
    EXPECT_EQ(pnorm[15].value, pnorm[14].value) << "no update at the poisoned step";
}

TEST_F(FaultRun, ComparePutsRunsSideBySide) {
    ASSERT_EQ(train(config(nlohmann::json::object()), "base", "--steps 60").exit_code, 0);
    nlohmann::json c = nlohmann::json::parse(std::ifstream(dir.file("c.json")));
    c["schedule"]["max_lr"] = 1e-2;
    std::ofstream(dir.file("c2.json")) << c.dump();
    ASSERT_EQ(train(dir.file("c2.json"), "hot", "--steps 60 --inject grad_spike@30:300").exit_code, 0);
    auto r = test::run_command(fmt::format("{} compare --store {} --runs base,hot --out {}", HLAT_BINARY,
                                           dir.file("s.db"), dir.file("report.html")));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("LOSS VAR"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("schedule.max_lr"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("run.inject"), std::string::npos) << r.output;
    std::ifstream in(dir.file("report.html"));
    std::string html((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(html.find(">base</td>"), std::string::npos);
    EXPECT_NE(html.find(">hot</td>"), std::string::npos);
    EXPECT_NE(html.find("<svg"), std::string::npos);
    EXPECT_NE(html.find("grad_spike × 1"), std::string::npos) << "alerts by kind";
    EXPECT_EQ(html.find("http"), html.find("http://www.w3.org/2000/svg")) << "no network needed: the only URL is the SVG namespace";
    // The loss gap is against the first run at the same steps: zero for a run
    // against itself, a number for another.
    auto js = test::run_command(fmt::format("{} compare --store {} --runs base,hot,base --json", HLAT_BINARY, dir.file("s.db")));
    ASSERT_EQ(js.exit_code, 0) << js.output;
    nlohmann::json j = nlohmann::json::parse(js.output);
    EXPECT_TRUE(j["runs"]["hot"]["loss_gap_vs_first"].is_number()) << j.dump();
    EXPECT_EQ(j["runs"]["base"]["precision"], "fp32");
    EXPECT_EQ(j["runs"]["base"]["state_bytes_per_param"], 16) << "allocated: weight, gradient, two moments";
    EXPECT_EQ(j["runs"]["base"]["format_bytes_per_param"], 16);
    EXPECT_TRUE(j["runs"]["base"]["cost_per_4m_tokens"].is_null()) << "no price, no cost";
    // Priced at 3.6 per rank-hour (one rank): 4M tokens cost 4000 / (tokens/s).
    auto priced = test::run_command(fmt::format("{} compare --store {} --runs base,hot --json --price 3.6 --out {}",
                                                HLAT_BINARY, dir.file("s.db"), dir.file("priced.html")));
    ASSERT_EQ(priced.exit_code, 0) << priced.output;
    nlohmann::json p = nlohmann::json::parse(priced.output)["runs"]["base"];
    const double tps = p["tokens_per_s"].get<double>();
    EXPECT_NEAR(p["cost_per_4m_tokens"].get<double>(), 4000.0 / tps, 1e-9 * 4000.0 / tps);
    EXPECT_NEAR(p["tokens_per_unit_price"].get<double>(), tps * 1000.0, 1e-9 * tps * 1000.0);
    std::ifstream priced_in(dir.file("priced.html"));
    std::string priced_html((std::istreambuf_iterator<char>(priced_in)), std::istreambuf_iterator<char>());
    EXPECT_NE(priced_html.find("<h2>Cost and scaling</h2>"), std::string::npos);
    EXPECT_NE(priced_html.find("cost per 4M tokens against base"), std::string::npos) << "the chart";
    EXPECT_NE(priced_html.find(">1.00x</text>"), std::string::npos) << "base against itself";
    EXPECT_EQ(j["runs"]["base"]["loss_gap_vs_first"], 0.0) << "the last entry named base is compared with itself";
    EXPECT_EQ(j["runs"]["base"]["loss_gap_std"], 0.0);
    EXPECT_NE(html.find("loss minus base"), std::string::npos) << "the gap chart";
    auto missing = test::run_command(fmt::format("{} compare --store {} --runs base,nope", HLAT_BINARY, dir.file("s.db")));
    EXPECT_EQ(missing.exit_code, 1);
    EXPECT_NE(missing.output.find("no run \"nope\""), std::string::npos) << missing.output;
}

TEST_F(FaultRun, BadInjectionOrDetectorConfigIsOneLine) {
    auto r = train(config(nlohmann::json::object()), "x", "--inject mask_leek@3");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.output.find("fault \"mask_leek@3\""), std::string::npos) << r.output;
    r = train(config({{"grad_spike", {{"window", 0}}}}), "y", "");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    EXPECT_NE(r.output.find("detectors.grad_spike.window"), std::string::npos) << r.output;
}


TEST_F(FaultRun, WebhookReceivesAlertsAsJson) {
    test::WebhookListener listener;
    ASSERT_GT(listener.port, 0);
    std::string url = fmt::format("http://127.0.0.1:{}/hook", listener.port);
    auto r = train(config({{"webhook", url}, {"grad_spike", {{"policy", "halt"}}}}), "hooked", "--inject grad_spike@40:300");
    EXPECT_EQ(r.exit_code, 3) << r.output;
    std::lock_guard<std::mutex> lock(listener.mutex);
    ASSERT_EQ(listener.bodies.size(), 1u);
    auto j = nlohmann::json::parse(listener.bodies[0]);
    EXPECT_EQ(j["run"], "hooked");
    EXPECT_EQ(j["kind"], "grad_spike");
    EXPECT_EQ(j["step"], 40);
    EXPECT_GT(j["data"]["ratio"].get<double>(), 5.0);
}

// Evaluation results take the one road too: an external trainer's held-out
// loss (Hugging Face's `eval/loss`, every 10 steps), posted beside a training
// loss that slides two nats below it after step 100 (a leaking mask's mark),
// raises loss_below_heldout online, and the same alert, with the same data
// fields, in replay, `detect --save`, `hlat ingest` and the HTTP endpoint.
TEST(EvalRoad, HeldOutResultsRaiseTheSameAlertsOnEveryRoad) {
    test::ScratchDir dir("eval_road");
    const std::string store = dir.file("s.db");
    {
        web::Api api(store, "eval-token");
        ASSERT_EQ(api.handle(test::post("/api/v1/runs/evaluated/start", "eval-token", "{}")).status, 200);
        std::string batch;
        for (int s = 0; s < 300; s++) {
            const double loss = s < 100 ? 4.0 - 0.005 * s : 1.0 + 0.3 * std::exp(-(s - 100) / 20.0);
            batch += fmt::format(R"({{"step": {}, "train/loss": {}}})", s, loss) + "\n";
            if (s % 10 == 9) batch += fmt::format(R"({{"step": {}, "eval/loss": {}}})", s, 3.5 + 0.001 * s) + "\n";
            if (s % 25 == 24) {
                ASSERT_EQ(api.handle(test::post("/api/v1/runs/evaluated/ingest", "eval-token", batch)).status, 200);
                batch.clear();
            }
        }
        api.handle(test::post("/api/v1/runs/evaluated/finish", "eval-token", R"({"status": "finished"})"));
    }
    telemetry::Reader reader(store);
    const std::vector<telemetry::Alert> online = reader.alerts(reader.find_run("evaluated")->id);
    ASSERT_EQ(online.size(), 1u);
    EXPECT_EQ(online[0].kind, "loss_below_heldout");
    EXPECT_GT(online[0].step, 150) << "after the fifty steps the gap must last";
    EXPECT_NE(online[0].data.find("\"heldout_loss\""), std::string::npos) << online[0].data;
    test::expect_roads_agree(store, "evaluated", dir);
}

}  // namespace
}  // namespace hlat
