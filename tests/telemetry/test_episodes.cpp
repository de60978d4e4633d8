// Alert episodes and the diverged status (issue 37): 600 alerts of a run
// that went NaN and stayed so are one episode in the API, `hlat alerts` and
// the webhook; the run ends "diverged", not "finished"; a run that had a NaN
// step and came back is "finished".
#include "report/palette.h"
#include "session/webhook.h"
#include "telemetry/alert_episodes.h"
#include "telemetry/reader.h"
#include "telemetry/writer.h"
#include "api_requests.h"
#include "test_util.h"
#include "webhook_listener.h"
#include "web/api.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <mutex>
#include <random>

namespace hlat {
namespace {

using json = nlohmann::json;
using namespace telemetry;
using test::get;
using test::post;

constexpr const char* kToken = "a-token-of-sixteen-chars";

Alert alert(const std::string& kind, int64_t step, const std::string& data = "{}", const char* severity = "warning") {
    return {kind, severity, step, fmt::format("{} at {}", kind, step), data, 0.0};
}

TEST(AlertEpisodes, AStretchOfOneKindIsOneEpisodeWithItsWorstValue) {
    std::vector<Alert> alerts;
    for (int s = 900; s < 1500; s++) alerts.push_back(alert("nonfinite", s, s == 1000 ? R"({"loss": null})" : R"({"loss": 5.0})"));
    alerts.push_back(alert("grad_spike", 950, R"({"ratio": 7.5})"));
    alerts.push_back(alert("grad_spike", 958, R"({"ratio": 30})"));  // within 10 steps: the same episode
    alerts.push_back(alert("grad_spike", 990, R"({"ratio": 6})"));   // 32 steps on: a new one
    alerts.push_back(alert("loss_jump", 960, R"({"loss": 9})", "info"));
    std::vector<AlertEpisode> e = alert_episodes(alerts);
    ASSERT_EQ(e.size(), 4u);
    EXPECT_EQ(e[0].kind, "nonfinite");
    EXPECT_EQ(e[0].first_step, 900);
    EXPECT_EQ(e[0].last_step, 1499);
    EXPECT_EQ(e[0].count, 600);
    EXPECT_EQ(e[0].worst_step, 1000) << "a NaN is worse than any number";
    EXPECT_TRUE(std::isnan(e[0].worst_value));
    EXPECT_EQ(episode_json(e[0])["worst_value"], "nan");
    EXPECT_EQ(e[1].kind, "grad_spike");
    EXPECT_EQ(e[1].count, 2);
    EXPECT_EQ(e[1].worst_step, 958);
    EXPECT_EQ(e[1].worst_value, 30.0);
    EXPECT_EQ(e[1].message, "grad_spike at 958");
    EXPECT_EQ(e[2].kind, "loss_jump");
    EXPECT_EQ(e[2].severity, "info");
    EXPECT_EQ(e[3].first_step, 990);
    EXPECT_EQ(episode_json(alert_episodes({alert("straggler", 5)})[0])["worst_value"], nullptr) << "no value";
    // The nonfinite detector spells its evidence as strings: a "nan" loss is the worst, not the finite grad norm.
    e = alert_episodes({alert("nonfinite", 60, R"({"loss": "nan", "grad_norm": 1.0})")});
    EXPECT_TRUE(std::isnan(e[0].worst_value));
}

// A builder that keeps K episodes lists exactly the K of the whole list
// whose last steps are newest, in order of first step, each whole (counts,
// worst values): checked over seeds against the unbounded grouping, with an
// episode that goes on from early in the run to its end (a run stuck NaN
// among thousands of one-step spikes) always among them.
TEST(AlertEpisodes, AKeepingBuilderListsTheNewestEpisodesWhole) {
    for (uint32_t seed = 1; seed <= 20; seed++) {
        std::mt19937 rng(seed);
        std::vector<Alert> alerts;
        const char* kinds[] = {"grad_spike", "loss_jump", "straggler"};
        for (int s = 0; s < 6000; s++) {
            if (s >= 700 && s % 9 != 0) alerts.push_back(alert("nonfinite", s, R"({"loss": null})"));
            for (const char* kind : kinds)
                if (rng() % 13 == 0) alerts.push_back(alert(kind, s, fmt::format(R"({{"ratio": {}}})", rng() % 100)));
        }
        const std::vector<AlertEpisode> all = alert_episodes(alerts);
        const size_t keep = 1 + rng() % 300;
        EpisodeBuilder builder(keep);
        for (const Alert& a : alerts) builder.add(a);
        std::vector<size_t> newest(all.size());  // indices, newest last step first; of a tie, the later opened
        for (size_t i = 0; i < all.size(); i++) newest[i] = all.size() - 1 - i;
        std::stable_sort(newest.begin(), newest.end(), [&](size_t a, size_t b) { return all[a].last_step > all[b].last_step; });
        newest.resize(keep);
        std::sort(newest.begin(), newest.end());
        std::vector<AlertEpisode> expected;
        for (size_t i : newest) expected.push_back(all[i]);
        const std::vector<AlertEpisode> kept = builder.episodes();
        EXPECT_EQ(builder.total(), (int64_t)all.size()) << "seed " << seed;
        ASSERT_EQ(kept.size(), keep) << "seed " << seed;
        for (size_t i = 0; i < keep; i++) {
            EXPECT_EQ(episode_json(kept[i]), episode_json(expected[i])) << "seed " << seed << ", episode " << i;
        }
        EXPECT_TRUE(std::any_of(kept.begin(), kept.end(), [](const AlertEpisode& e) {
            return e.kind == "nonfinite" && e.first_step == 700 && e.last_step == 5999;
        })) << "seed " << seed << ": the stretch going on since step 700 is listed whole";
    }
}

// A chart marks a NaN or an Inf where the bucket says so: a bucket of one
// +Inf point reads min = max = +Inf (not "no value"), one of a NaN has_nan.
TEST(NonFiniteBuckets, AnInfinityAndANaNComeBackAsThemselves) {
    test::ScratchDir dir{"nonfinite_buckets"};
    int64_t run = 0;
    {
        Writer w(dir.file("s.db"));
        RunRecord r;
        r.name = "spiky";
        run = w.open_run(r, false);
        for (int s = 0; s < 100; s++)
            w.metric(run, "custom", s, s == 40 ? NAN : s == 70 ? INFINITY : 1.0, 1e9 + s);
    }
    Reader reader(dir.file("s.db"));
    std::vector<Bucket> b = reader.downsample(run, "custom", 0, 99, 100);
    ASSERT_EQ(b.size(), 100u);
    EXPECT_TRUE(b[40].has_nan);
    EXPECT_TRUE(std::isnan(b[40].min));
    EXPECT_EQ(b[70].min, INFINITY);
    EXPECT_EQ(b[70].max, INFINITY);
    EXPECT_FALSE(b[70].has_nan);
    b = reader.downsample(run, "custom", 0, 99, 10);  // the Inf inside a bucket of ten
    EXPECT_EQ(b[7].max, INFINITY);
    EXPECT_EQ(b[7].min, 1.0);
}

// The report draws run i in the colour the compare view gives it.
TEST(RunPalette, TheReportAndThePageShareOneList) {
    std::ifstream in(std::string(HLAT_SOURCE_DIR) + "/web/static/palette.js");
    ASSERT_TRUE(in) << "web/static/palette.js";
    std::vector<std::string> page;
    for (std::string line; std::getline(in, line);) {
        const size_t q = line.find_first_not_of(' ');
        if (q != std::string::npos && line.compare(q, 2, "\"#") == 0) page.push_back(line.substr(q + 1, 7));
    }
    ASSERT_EQ(page.size(), report::kRunPalette.size());
    for (size_t i = 0; i < page.size(); i++) EXPECT_EQ(page[i], report::kRunPalette[i]) << i;
}

// The ingest API's run, its steps [0, n) with loss NaN from `nan_from` to `nan_to` (exclusive).
class Divergence : public ::testing::Test {
  protected:
    test::ScratchDir dir{"episodes"};
    std::string store() const { return dir.file("s.db"); }
    json send(web::Api& api, const std::string& run, int n, int nan_from, int nan_to) {
        const json start = {{"config", json::object()}};
        EXPECT_EQ(api.handle(post("/api/v1/runs/" + run + "/start", kToken, start.dump())).status, 200);
        std::string lines;
        for (int s = 0; s < n; s++)
            lines += fmt::format("{{\"step\": {}, \"loss\": {}, \"grad_norm\": 1.0}}\n", s,
                                 s >= nan_from && s < nan_to ? "NaN" : fmt::format("{}", 3.0 - s * 1e-3));
        auto r = api.handle(post("/api/v1/runs/" + run + "/ingest", kToken, lines));
        EXPECT_EQ(r.status, 200) << r.body;
        r = api.handle(post("/api/v1/runs/" + run + "/finish", kToken, R"({"status": "finished"})"));
        EXPECT_EQ(r.status, 200) << r.body;
        return json::parse(api.handle(get("/api/v1/runs/" + run + "/alerts")).body);
    }
};

TEST_F(Divergence, ARunThatStaysNaNEndsDivergedWithOneAlertEpisode) {
    { Writer w(store()); }
    web::Api api(store(), kToken);
    json alerts = send(api, "went-nan", 1500, 900, 1500);
    send(api, "came-back", 1500, 900, 901);
    Reader reader(store());
    EXPECT_EQ(reader.find_run("went-nan")->status, "diverged");
    EXPECT_EQ(reader.find_run("came-back")->status, "finished") << "one NaN step and back is no divergence";
    bool said = false;
    for (const Event& e : reader.events(reader.find_run("went-nan")->id))
        said |= e.detail.find("non-finite from step 900") != std::string::npos;
    EXPECT_TRUE(said) << "the end event names the step";
    ASSERT_TRUE(alerts.contains("episodes")) << alerts;
    int nonfinite = 0;
    for (const json& e : alerts["episodes"])
        if (e["kind"] == "nonfinite") {
            nonfinite++;
            EXPECT_EQ(e["first_step"], 900);
        }
    EXPECT_EQ(nonfinite, 1) << alerts["episodes"];
    const json runs = json::parse(api.handle(get("/api/v1/runs")).body);
    bool listed = false;
    for (const json& r : runs["runs"]) listed |= r["name"] == "went-nan" && r["status"] == "diverged";
    EXPECT_TRUE(listed) << runs;
}

TEST_F(Divergence, HlatAlertsPrintsEpisodesAndHlatRunsTheDivergedStatus) {
    { Writer w(store()); }
    {
        web::Api api(store(), kToken);
        send(api, "went-nan", 1500, 900, 1500);
    }
    test::CommandResult r = test::run_command(fmt::format("{} alerts --store {} --run went-nan", HLAT_BINARY, store()));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("run \"went-nan\" (diverged)"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("nonfinite"), std::string::npos) << r.output;
    r = test::run_command(fmt::format("{} alerts --store {} --run went-nan --json", HLAT_BINARY, store()));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("\"first_step\":900"), std::string::npos) << r.output;
    r = test::run_command(fmt::format("{} runs --store {}", HLAT_BINARY, store()));
    EXPECT_NE(r.output.find("diverged"), std::string::npos) << r.output;
    r = test::run_command(fmt::format("{} alerts --store {} --run nobody", HLAT_BINARY, store()));
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("no run \"nobody\""), std::string::npos) << r.output;
}


// A trainer's alert line without a time, in a log whose lines have times:
// it is dated by the log's clock (its step's time), not the import's, so the
// uptime bar of an imported run ends where the run did.
TEST_F(Divergence, AnAlertLineWithoutATimeKeepsTheLogsClock) {
    std::string text;
    for (int s = 0; s < 20; s++) text += fmt::format("{{\"step\": {}, \"loss\": 2.0, \"time\": {}}}\n", s, 1.7e9 + s);
    text += "{\"step\": 19, \"alert\": \"nan\", \"text\": \"loss is NaN\", \"level\": \"critical\"}\n";
    std::ofstream(dir.file("old.jsonl")) << text;
    test::CommandResult r = test::run_command(fmt::format("{} ingest --store {} --run old {}", HLAT_BINARY, store(),
                                                          dir.file("old.jsonl")));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    Reader reader(store());
    const std::vector<Alert> alerts = reader.alerts(reader.find_run("old")->id);
    ASSERT_EQ(alerts.size(), 1u) << r.output;
    EXPECT_EQ(alerts[0].wall_time, 1.7e9 + 19);
}

TEST(WebhookEpisodes, AStretchOfAlertsPagesOnceAndTheNextEpisodeSaysHowItEnded) {
    test::WebhookListener hook;
    ASSERT_GT(hook.port, 0);
    {
        session::Webhook w(fmt::format("http://127.0.0.1:{}/hook", hook.port), "went-nan");
        for (int s = 900; s < 1500; s++) w.post(alert("nonfinite", s, R"({"loss": null})"));
        w.post(alert("grad_spike", 1600, R"({"ratio": 9})"));
        w.post(alert("nonfinite", 2000, R"({"loss": null})"));
    }  // the destructor sends what is queued
    std::lock_guard<std::mutex> lock(hook.mutex);
    ASSERT_EQ(hook.bodies.size(), 3u);
    EXPECT_EQ(json::parse(hook.bodies[0])["step"], 900);
    EXPECT_FALSE(json::parse(hook.bodies[0]).contains("previous_episode"));
    EXPECT_EQ(json::parse(hook.bodies[1])["kind"], "grad_spike");
    const json last = json::parse(hook.bodies[2]);
    EXPECT_EQ(last["step"], 2000);
    EXPECT_EQ(last["previous_episode"]["count"], 600);
    EXPECT_EQ(last["previous_episode"]["last_step"], 1499);
}

}  // namespace
}  // namespace hlat
