// `hlat serve`: the JSON API's answers and refusals, path safety over real
// HTTP, and a halt from the web reaching a running trainer.
#include "telemetry/reader.h"
#include "telemetry/writer.h"
#include "test_http.h"
#include "api_requests.h"
#include "test_util.h"
#include "web/api.h"
#include "web/series_api.h"
#include "web/server.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <netinet/in.h>
#include <sys/socket.h>

#include <sstream>
#include <unistd.h>

#include <fstream>
#include <thread>

namespace hlat {
namespace {

using json = nlohmann::json;
using namespace telemetry;

using test::get;
using test::post;

class WebApi : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        dir_ = new test::ScratchDir("web_api");
        Writer w(dir_->file("s.db"));
        RunRecord r;
        r.name = "long";
        r.source = "hlat";
        r.precision = "fp32";
        r.started_at = 1000.0;
        int64_t id = w.open_run(r, false);
        w.event(id, {"start", 0, 1000.0, ""});
        for (int chunk = 0; chunk < 100; chunk++) {
            std::vector<MetricPoint> pts;
            for (int i = 0; i < 10000; i++) {
                int64_t step = chunk * 10000L + i;
                pts.push_back({"loss", step, step == 654321 ? 99.0 : 2.0 + 0.001 * (step % 13), 1000.0 + step * 1e-3});
            }
            w.metrics(id, std::move(pts));
        }
        w.alert(id, {"grad_spike", "warning", 654321, "a spike", R"({"ratio": 49})", 1654.0});
    }
    static void TearDownTestSuite() { delete dir_; }
    static test::ScratchDir* dir_;
    web::Api api{dir_->file("s.db"), "secret-token"};
};
test::ScratchDir* WebApi::dir_ = nullptr;

TEST_F(WebApi, RunsAndTheirParts) {
    auto r = api.handle(get("/api/v1/runs"));
    ASSERT_EQ(r.status, 200) << r.body;
    json j = json::parse(r.body);
    ASSERT_EQ(j["runs"].size(), 1u);
    EXPECT_EQ(j["runs"][0]["name"], "long");
    EXPECT_EQ(j["runs"][0]["steps"], 1000000);
    EXPECT_EQ(j["runs"][0]["alerts"], 1);
    EXPECT_EQ(json::parse(api.handle(get("/api/v1/runs/long/keys")).body)["keys"], json({"loss"}));
    json alerts = json::parse(api.handle(get("/api/v1/runs/long/alerts")).body)["alerts"];
    ASSERT_EQ(alerts.size(), 1u);
    EXPECT_EQ(alerts[0]["data"]["ratio"], 49);
    EXPECT_EQ(api.handle(get("/api/v1/runs/long/events")).status, 200);
}

TEST_F(WebApi, ThePostMortemReportIsServedAsHtml) {
    auto r = api.handle(get("/api/v1/report", {{"runs", "long"}}));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.content_type.rfind("text/html", 0), 0u);
    EXPECT_NE(r.body.find("<svg"), std::string::npos) << "the curves are inline SVG";
    EXPECT_NE(r.body.find("long"), std::string::npos);
    EXPECT_EQ(r.body.find("<link"), std::string::npos) << "the report must not fetch anything";
    EXPECT_EQ(r.body.find("src="), std::string::npos) << "the report must not fetch anything";
    EXPECT_EQ(api.handle(get("/api/v1/report")).status, 400);
    EXPECT_EQ(api.handle(get("/api/v1/report", {{"runs", "long,nope"}})).status, 404);
}

TEST_F(WebApi, DownsamplingKeepsAOneStepSpikeInAMillionPoints) {
    auto r = api.handle(get("/api/v1/runs/long/series", {{"key", "loss"}, {"points", "2000"}}));
    ASSERT_EQ(r.status, 200) << r.body;
    json buckets = json::parse(r.body)["buckets"];
    EXPECT_LE(buckets.size(), 2000u);
    EXPECT_GE(buckets.size(), 1000u);
    double max = 0;
    for (auto& b : buckets) max = std::max(max, b[3].get<double>());
    EXPECT_EQ(max, 99.0) << "the single-step spike survives";
    // Zooming in re-queries at full resolution.
    r = api.handle(get("/api/v1/runs/long/series", {{"key", "loss"}, {"from", "654300"}, {"to", "654340"}}));
    json points = json::parse(r.body)["points"];
    ASSERT_EQ(points.size(), 41u);
    EXPECT_EQ(points[21][1], 99.0);
}

TEST_F(WebApi, BadParametersAre400WithAMessage) {
    auto check = [&](std::map<std::string, std::string> q, const std::string& needle) {
        auto r = api.handle(get("/api/v1/runs/long/series", q));
        EXPECT_EQ(r.status, 400) << r.body;
        EXPECT_NE(json::parse(r.body)["error"].get<std::string>().find(needle), std::string::npos) << r.body;
    };
    check({{"key", "loss"}, {"points", "0"}}, "points=\"0\" must be an integer in [1, 100000]");
    check({{"key", "loss"}, {"from", "ten"}}, "from=\"ten\"");
    check({{"key", "loss"}, {"from", "-5"}}, "from=\"-5\"");
    check({{"key", "loss"}, {"from", "9"}, {"to", "3"}}, "from=9 is after to=3");
    check({}, "parameter key is required");
    check({{"key", "loss"}, {"points", "1; DROP TABLE runs"}}, "points=");
    EXPECT_EQ(api.handle(get("/api/v1/runs/nope/keys")).status, 404);
    EXPECT_EQ(api.handle(get("/api/v1/nothing")).status, 404);
    EXPECT_EQ(api.handle(post("/api/v1/runs/long/keys", "secret-token")).status, 405);
}

TEST_F(WebApi, StateChangesNeedTheToken) {
    EXPECT_EQ(api.handle(post("/api/v1/runs/long/halt", "")).status, 401);
    EXPECT_EQ(api.handle(post("/api/v1/runs/long/halt", "wrong")).status, 401);
    EXPECT_EQ(api.handle(post("/api/v1/runs/new/ingest", "", "{\"step\": 0, \"loss\": 1}\n")).status, 401);
    auto r = api.handle(post("/api/v1/runs/long/halt", "secret-token"));
    EXPECT_EQ(r.status, 202) << r.body;
    Reader reader(dir_->file("s.db"));
    EXPECT_EQ(reader.pending_halt(reader.find_run("long")->id), "web 127.0.0.1");
}

TEST_F(WebApi, IngestIsAllOrNothing) {
    auto r = api.handle(post("/api/v1/runs/pushed/ingest", "secret-token",
                             "{\"step\": 0, \"loss\": 3.0}\n{\"step\": 1, \"loss\": [1, \"x\"]}\n{\"step\": 2, \"loss\": 1.0}\n"));
    EXPECT_EQ(r.status, 400);
    EXPECT_NE(r.body.find("request:2: field \\\"loss\\\" has \\\"x\\\" at element \\\"1\\\", not a number"),
              std::string::npos)
        << r.body;
    EXPECT_FALSE(Reader(dir_->file("s.db")).find_run("pushed").has_value()) << "nothing of the request was written";
    r = api.handle(post("/api/v1/runs/pushed/ingest", "secret-token", "{\"step\": 0, \"loss\": 3.0}\n{\"step\": 1, \"loss\": 2.0}\n"));
    ASSERT_EQ(r.status, 200) << r.body;
    Reader reader(dir_->file("s.db"));
    EXPECT_EQ(reader.series(reader.find_run("pushed")->id, "loss", 0, 10).size(), 2u);
}

// Reads need no token, so none may take without bound: a full-resolution
// series is at most 100,000 points with where the rest begins, a CSV of a
// million points comes in pieces (whole, in step order), and a report names
// at most 16 runs, each once. The API before answered 1,000,000 points.
TEST_F(WebApi, ReadsWithoutTheTokenAreBounded) {
    auto r = api.handle(get("/api/v1/runs/long/series", {{"key", "loss"}}));
    ASSERT_EQ(r.status, 200) << r.body.substr(0, 300);
    json page = json::parse(r.body);
    ASSERT_EQ(page["points"].size(), 100000u);
    EXPECT_EQ(page["next_from"], 100000);
    r = api.handle(get("/api/v1/runs/long/series", {{"key", "loss"}, {"from", "999990"}}));
    page = json::parse(r.body);
    EXPECT_EQ(page["points"].size(), 10u);
    EXPECT_TRUE(page["next_from"].is_null()) << "the last page says there is no more";

    r = api.handle(get("/api/v1/runs/long/csv", {{"keys", "loss"}}));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_TRUE(r.more) << "a CSV is streamed";
    EXPECT_EQ(r.body, "step,time,loss\n") << "only the header is held before streaming";
    std::stringstream csv(web::whole_body(r));
    std::string line;
    std::getline(csv, line);
    int64_t rows = 0, last = -1;
    bool ordered = true;
    while (std::getline(csv, line)) {
        const int64_t step = std::stoll(line.substr(0, line.find(',')));
        ordered = ordered && step == last + 1;
        last = step, rows++;
    }
    EXPECT_EQ(rows, 1000000);
    EXPECT_TRUE(ordered) << "every step once, in order";
    std::string many;
    for (int i = 0; i < 65; i++) many += fmt::format("k{},", i);
    EXPECT_EQ(api.handle(get("/api/v1/runs/long/csv", {{"keys", many}})).status, 400) << "at most 64 keys";

    std::string same, distinct;
    for (int i = 0; i < 200; i++) same += "long,";
    r = api.handle(get("/api/v1/report", {{"runs", same}}));
    EXPECT_EQ(r.status, 200) << "a run named 200 times is reported once";
    // A name with a comma (Lightning's habit) is named in a JSON array.
    ASSERT_EQ(api.handle(post("/api/v1/runs/lr=1e-3,bs=32/start", "secret-token", "{}")).status, 200);
    r = api.handle(get("/api/v1/report", {{"runs", R"(["lr=1e-3,bs=32", "long"])"}}));
    EXPECT_EQ(r.status, 200) << r.body.substr(0, 300);
    EXPECT_NE(r.body.find("lr=1e-3,bs=32"), std::string::npos);
    EXPECT_EQ(api.handle(get("/api/v1/report", {{"runs", R"(["a", 3])"}})).status, 400);
    for (int i = 0; i < 17; i++) distinct += fmt::format("run{},", i);
    r = api.handle(get("/api/v1/report", {{"runs", distinct}}));
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_NE(r.body.find("at most 16"), std::string::npos) << r.body;

    // A run's alerts: the latest 2,000, with how many were left out.
    ASSERT_EQ(api.handle(post("/api/v1/runs/noisy/start", "secret-token", "{}")).status, 200);
    {
        Writer w(dir_->file("s.db"));
        const int64_t noisy = Reader(dir_->file("s.db")).find_run("noisy")->id;
        for (int s = 0; s < 2500; s++) w.alert(noisy, {"loss_jump", "warning", s, "a jump", "{}", 1000.0 + s});
    }
    json alerts = json::parse(api.handle(get("/api/v1/runs/noisy/alerts")).body);
    ASSERT_EQ(alerts["alerts"].size(), 2000u);
    EXPECT_EQ(alerts["alerts"][0]["step"], 500) << "the latest ones";
    EXPECT_EQ(alerts["total"], 2500);
    EXPECT_EQ(alerts["omitted"], 500);
}

// What the page reads besides the series: spike episodes at full resolution,
// CSV of the stored points, and a person's tags and note on a run.
TEST_F(WebApi, EpisodesCsvAndAnnotations) {
    auto r = api.handle(get("/api/v1/runs/long/episodes", {{"key", "loss"}, {"from", "600000"}, {"to", "700000"}}));
    ASSERT_EQ(r.status, 200) << r.body;
    json episodes = json::parse(r.body)["episodes"];
    ASSERT_EQ(episodes.size(), 1u) << "the one planted spike, nothing of the ripple: " << r.body.substr(0, 300);
    EXPECT_EQ(episodes[0], json({654321, 654321, 654321, 99.0}));

    r = api.handle(get("/api/v1/runs/long/csv", {{"keys", "loss"}, {"from", "654320"}, {"to", "654322"}}));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.content_type, "text/csv; charset=utf-8");
    const std::string text = web::whole_body(r);
    ASSERT_EQ(text.rfind("step,time,loss\n", 0), 0u) << text;
    std::stringstream csv(text.substr(text.find('\n') + 1));
    auto stored = Reader(dir_->file("s.db")).series(1, "loss", 654320, 654322);
    ASSERT_EQ(stored.size(), 3u);
    for (const SeriesPoint& p : stored) {  // every value reads back to the same double
        std::string step, time, value;
        std::getline(csv, step, ',');
        std::getline(csv, time, ',');
        std::getline(csv, value);
        EXPECT_EQ(std::stoll(step), p.step);
        EXPECT_EQ(std::stod(time), p.wall_time);
        EXPECT_EQ(std::stod(value), p.value);
    }
    EXPECT_EQ(api.handle(get("/api/v1/runs/long/csv", {})).status, 400) << "keys are required";

    EXPECT_EQ(api.handle(post("/api/v1/runs/long/annotate", "", R"({"tags": ["x"]})")).status, 401);
    EXPECT_EQ(api.handle(post("/api/v1/runs/long/annotate", "secret-token", R"({"tags": "x"})")).status, 400);
    EXPECT_EQ(api.handle(post("/api/v1/runs/long/annotate", "secret-token", R"({"tags": [""]})")).status, 400);
    EXPECT_EQ(api.handle(post("/api/v1/runs/long/annotate", "secret-token", R"({"note": 3})")).status, 400);
    r = api.handle(post("/api/v1/runs/long/annotate", "secret-token", R"({"tags": ["bf16", "baseline"], "note": "lr 3e-4"})"));
    ASSERT_EQ(r.status, 200) << r.body;
    ASSERT_EQ(api.handle(post("/api/v1/runs/long/annotate", "secret-token", R"({"note": "lr 3e-4, seed 1"})")).status, 200);
    json run = json::parse(api.handle(get("/api/v1/runs")).body)["runs"][0];
    EXPECT_EQ(run["tags"], json({"bf16", "baseline"})) << "a note alone keeps the tags";
    EXPECT_EQ(run["note"], "lr 3e-4, seed 1");
    api.handle(post("/api/v1/runs/long/annotate", "secret-token", R"({"tags": [], "note": ""})"));
}

TEST(SpikeEpisodes, ConsecutivePointsAboveTheThresholdAreOneEpisode) {
    std::vector<SeriesPoint> pts;
    for (int i = 0; i < 100; i++) pts.push_back({i, 1.0, 0.0});
    pts[50].value = 1.5, pts[51].value = 3.0, pts[52].value = 1.3;  // one episode peaking at 51
    pts[80].value = NAN;                                              // a NaN step is a spike
    pts[90].value = 1.05;                                             // within the margin: quiet
    auto e = web::spike_episodes(pts);
    ASSERT_EQ(e.size(), 2u);
    EXPECT_EQ(e[0].first_step, 50);
    EXPECT_EQ(e[0].last_step, 52);
    EXPECT_EQ(e[0].peak_step, 51);
    EXPECT_EQ(e[0].peak, 3.0);
    EXPECT_EQ(e[1].first_step, 80);
    EXPECT_TRUE(web::spike_episodes(std::vector<SeriesPoint>(30, {0, 2.0, 0.0})).empty());
}

// A batch sent again to the same, live server (the client's request timed
// out while the server, busy, handled it) stores its rows again but raises its
// alerts once, as a server restarted in between already did: bench/soak found
// grad_spike stored twice this way after a slow restart.
TEST_F(WebApi, ABatchSentAgainRaisesItsAlertsOnce) {
    ASSERT_EQ(api.handle(post("/api/v1/runs/twice/start", "secret-token", "{}")).status, 200);
    auto steps = [](int from, int to, int spike) {
        std::string lines;
        for (int s = from; s < to; s++)
            lines += fmt::format("{{\"step\": {}, \"loss\": 2.0, \"grad_norm\": {}}}\n", s, s == spike ? 100.0 : 1.0);
        return lines;
    };
    auto send = [&](const std::string& lines) {
        auto r = api.handle(post("/api/v1/runs/twice/ingest", "secret-token", lines));
        EXPECT_EQ(r.status, 200) << r.body;
        return json::parse(r.body)["alerts"].size();
    };
    send(steps(0, 40, -1));
    EXPECT_EQ(send(steps(40, 50, 45)), 1u) << "the spike at step 45";
    EXPECT_EQ(send(steps(40, 50, 45)), 0u) << "the same batch again";
    send(steps(50, 60, -1));
    EXPECT_EQ(send(steps(40, 50, 45)), 0u) << "again, after later steps";
    EXPECT_EQ(send(steps(55, 70, 68)), 1u) << "a batch that overlaps the last one: its new spike only";
    Reader reader(dir_->file("s.db"));
    auto run = reader.find_run("twice");
    std::vector<int64_t> alerted;
    for (const auto& a : reader.alerts(run->id)) alerted.push_back(a.step);
    EXPECT_EQ(alerted, (std::vector<int64_t>{45, 68}));
    EXPECT_EQ(reader.series(run->id, "grad_norm", 0, 100).size(), 70u) << "every row once";
}

// A trainer's own alert (the client's run.alert, as wandb.alert): stored with
// its level, in the reply, on the page's alerts API, and once when the batch
// comes again.
TEST_F(WebApi, ATrainersOwnAlertIsRoutedOnce) {
    ASSERT_EQ(api.handle(post("/api/v1/runs/own/start", "secret-token", "{}")).status, 200);
    const std::string batch =
        "{\"step\": 7, \"loss\": 2.0}\n"
        "{\"step\": 7, \"alert\": \"data\", \"text\": \"shard 12 unreadable, skipped\", \"level\": \"error\"}\n";
    auto r = api.handle(post("/api/v1/runs/own/ingest", "secret-token", batch));
    ASSERT_EQ(r.status, 200) << r.body;
    json alerts = json::parse(r.body)["alerts"];
    ASSERT_EQ(alerts.size(), 1u);
    EXPECT_EQ(alerts[0]["kind"], "alert");
    EXPECT_EQ(alerts[0]["severity"], "critical");
    EXPECT_EQ(alerts[0]["message"], "data: shard 12 unreadable, skipped");
    EXPECT_EQ(json::parse(api.handle(post("/api/v1/runs/own/ingest", "secret-token", batch)).body)["alerts"].size(), 0u)
        << "the same batch again";
    json listed = json::parse(api.handle(get("/api/v1/runs/own/alerts")).body);
    ASSERT_EQ(listed["alerts"].size(), 1u) << listed;
    EXPECT_EQ(listed["alerts"][0]["step"], 7);
    EXPECT_EQ(api.handle(post("/api/v1/runs/own/ingest", "secret-token",
                              "{\"step\": 8, \"alert\": \"x\", \"level\": \"loud\"}\n")).status, 400)
        << "a level hlat does not know";
}

// A run synced from the client's spool keeps its own dates, and the git
// revision the client found at init fills the run's column.
TEST_F(WebApi, AStartAndEndKeepTheTimesTheClientGives) {
    json start = {{"meta", {{"git_revision", "0123abcd"}}}, {"time", 1.7e9}};
    ASSERT_EQ(api.handle(post("/api/v1/runs/synced/start", "secret-token", start.dump())).status, 200);
    ASSERT_EQ(api.handle(post("/api/v1/runs/synced/ingest", "secret-token", "{\"step\": 0, \"loss\": 2.0}\n")).status, 200);
    json end = {{"status", "finished"}, {"step", 0}, {"time", 1.7e9 + 60}};
    ASSERT_EQ(api.handle(post("/api/v1/runs/synced/finish", "secret-token", end.dump())).status, 200);
    Reader reader(dir_->file("s.db"));
    auto run = reader.find_run("synced");
    EXPECT_EQ(run->git_revision, "0123abcd");
    EXPECT_EQ(run->started_at, 1.7e9);
    auto events = reader.events(run->id);
    ASSERT_GE(events.size(), 2u);
    EXPECT_EQ(events.front().wall_time, 1.7e9) << events.front().kind;
    EXPECT_EQ(events.back().wall_time, 1.7e9 + 60) << events.back().kind;
    EXPECT_EQ(api.handle(post("/api/v1/runs/late/start", "secret-token", R"({"time": 4e12})")).status, 400)
        << "a time in the future (milliseconds?) is refused";
}

// An external trainer's life through the API: start with a halt policy, a
// batch whose spike the detectors halt on (the reply says so), a person's
// halt reaching a clean run, finish, and a run that goes silent turning stale.
TEST_F(WebApi, ExternalRunsAreWatchedAndToldToHalt) {
    json start = {{"config", {{"lr", 3e-4}, {"detectors", {{"grad_spike", {{"policy", "halt"}}}}}}},
                  {"precision", "bf16"}, {"meta", {{"world_size", 8}}}};
    auto r = api.handle(post("/api/v1/runs/client/start", "secret-token", start.dump()));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(api.handle(post("/api/v1/runs/client/start", "secret-token", start.dump())).status, 409)
        << "a second start without resume";
    std::string lines;
    for (int s = 0; s < 30; s++) lines += fmt::format("{{\"step\": {}, \"loss\": 2.0, \"grad_norm\": 1.0}}\n", s);
    r = api.handle(post("/api/v1/runs/client/ingest", "secret-token", lines));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(json::parse(r.body)["state"], "running");
    r = api.handle(post("/api/v1/runs/client/ingest", "secret-token", "{\"step\": 30, \"loss\": 2.5, \"grad_norm\": NaN}\n"
                                                                      "{\"step\": 31, \"loss\": 2.0, \"grad_norm\": 40.0}\n"));
    json reply = json::parse(r.body);
    ASSERT_EQ(reply["state"], "halt") << r.body;
    EXPECT_EQ(reply["halt"]["by"], "detector");
    EXPECT_NE(reply["halt"]["reason"].get<std::string>().find("nonfinite at step 30"), std::string::npos) << r.body;
    EXPECT_EQ(reply["alerts"].size(), 2u) << "nonfinite and grad_spike";
    EXPECT_EQ(json::parse(api.handle(get("/api/v1/runs/client/state")).body)["state"], "halt");
    r = api.handle(post("/api/v1/runs/client/finish", "secret-token", R"({"status": "halted", "step": 32})"));
    ASSERT_EQ(r.status, 200) << r.body;
    Reader reader(dir_->file("s.db"));
    auto run = reader.find_run("client");
    EXPECT_EQ(run->status, "halted");
    EXPECT_EQ(run->precision, "bf16");
    EXPECT_EQ(reader.alerts(run->id).size(), 2u);
    EXPECT_FALSE(reader.pending_halt(run->id).has_value()) << "finish handles the halt";
    // Fed again after it ended (a client resumed without start, a run gone
    // stale): running again, judged by its own detectors, its config kept.
    ASSERT_EQ(api.handle(post("/api/v1/runs/comeback/start", "secret-token", start.dump())).status, 200);
    ASSERT_EQ(api.handle(post("/api/v1/runs/comeback/ingest", "secret-token", lines)).status, 200);
    ASSERT_EQ(api.handle(post("/api/v1/runs/comeback/finish", "secret-token", R"({"step": 29})")).status, 200);
    r = api.handle(post("/api/v1/runs/comeback/ingest", "secret-token", "{\"step\": 30, \"loss\": 2.0, \"grad_norm\": 90.0}\n"));
    EXPECT_EQ(json::parse(r.body)["state"], "halt") << "grad_spike's halt policy still holds: " << r.body;
    Reader reopened(dir_->file("s.db"));
    const std::string config = reopened.find_run("comeback")->config;
    EXPECT_NE(config.find("\"lr\":0.0003"), std::string::npos) << config;

    ASSERT_EQ(api.handle(post("/api/v1/runs/clean/start", "secret-token", "{}")).status, 200);
    ASSERT_EQ(api.handle(post("/api/v1/runs/clean/ingest", "secret-token", "{\"step\": 0, \"loss\": 2.0}\n")).status, 200);
    auto halt_route = [&](const std::string& name) {  // what the page's halt button says before it is pressed
        json runs = json::parse(api.handle(get("/api/v1/runs")).body)["runs"];
        for (const json& run : runs)
            if (run["name"] == name) return run["halt_route"];
        return json("no such run");
    };
    EXPECT_NE(halt_route("clean").get<std::string>().find("HaltRequested"), std::string::npos);
    EXPECT_NE(halt_route("long").get<std::string>().find("saves a checkpoint"), std::string::npos);
    EXPECT_TRUE(halt_route("client").is_null()) << "a run that has ended offers no halt";
    r = api.handle(post("/api/v1/runs/clean/halt", "secret-token"));
    ASSERT_EQ(r.status, 202) << r.body;
    EXPECT_NE(r.body.find("HaltRequested"), std::string::npos) << "the page says what the client does: " << r.body;
    reply = json::parse(api.handle(post("/api/v1/runs/clean/ingest", "secret-token", "{\"step\": 1, \"loss\": 2.0}\n")).body);
    EXPECT_EQ(reply["state"], "halt");
    EXPECT_EQ(reply["halt"]["by"], "person");

    EXPECT_EQ(api.handle(post("/api/v1/runs/pushed2/ingest", "secret-token", "{\"step\": 0, \"loss\": 1.0}\n")).status, 200);
    EXPECT_EQ(halt_route("pushed2"), "") << "nothing here can stop it: the page turns its halt button off";
    r = api.handle(post("/api/v1/runs/pushed2/halt", "secret-token"));
    EXPECT_EQ(r.status, 409) << "nothing receives a halt of a run fed by plain HTTP ingest: " << r.body;
    EXPECT_GE(api.mark_stale(0.0), 1);
    EXPECT_EQ(Reader(dir_->file("s.db")).find_run("pushed2")->status, "stale");
    EXPECT_EQ(Reader(dir_->file("s.db")).find_run("long")->status, "running") << "hlat's own trainer has a supervisor";
    api.handle(post("/api/v1/runs/pushed2/ingest", "secret-token", "{\"step\": 1, \"loss\": 1.0}\n"));
    Reader again(dir_->file("s.db"));
    EXPECT_EQ(again.find_run("pushed2")->status, "running") << "a stale run that sends again is running";
    EXPECT_EQ(again.uptime(again.find_run("pushed2")->id).restarts, 1);
}

using test::http;
using test::http_get;

TEST(WebServer, ServesThePageAndNothingOutsideIt) {
    test::ScratchDir dir("web_server");
    { Writer w(dir.file("s.db")); }
    web::Server server({dir.file("s.db"), "127.0.0.1", 0, std::string(HLAT_SOURCE_DIR) + "/web/static", "", "", {}});
    ASSERT_GT(server.port(), 0);
    EXPECT_EQ(server.token().size(), 32u);
    auto [status, body] = http_get(server.port(), "/");
    EXPECT_EQ(status, 200);
    EXPECT_NE(body.find("<table id=\"runs\">"), std::string::npos);
    EXPECT_EQ(http_get(server.port(), "/static/runs.js").first, 200);
    EXPECT_EQ(http_get(server.port(), "/api/v1/runs").first, 200);
    for (const char* evil : {"/static/../CMakeLists.txt", "/static/../../web/api.cpp", "/static/%2e%2e/api.cpp",
                             "/static/..%2fapi.cpp", "/static/%2e%2e%2fapi.cpp", "/static/%252e%252e/api.cpp",
                             "/static/.%2e/api.cpp", "/static//etc/passwd", "/static/%2fetc%2fpasswd",
                             "/../../../etc/passwd", "/static/..\\api.cpp", "/static/nonexistent.js"})
        EXPECT_EQ(http_get(server.port(), evil).first, 404) << evil;
    auto [code, reply] = http(server.port(), "POST /api/v1/runs/x/halt HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n"
                                             "Connection: close\r\n\r\n");
    EXPECT_EQ(code, 401) << reply;
}

TEST(WebServer, NewPointsArePushedLiveWithinASecond) {
    test::ScratchDir dir("web_sse");
    Writer w(dir.file("s.db"));
    RunRecord rec;
    rec.name = "live";
    int64_t id = w.open_run(rec, false);
    w.metric(id, "loss", 0, 3.0, 0.0);
    w.flush();
    web::Server server({dir.file("s.db"), "127.0.0.1", 0, std::string(HLAT_SOURCE_DIR) + "/web/static", "", "", {}});
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(server.port());
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, (sockaddr*)&addr, sizeof addr), 0);
    std::string req = "GET /api/v1/runs/live/stream?keys=loss,grad_norm HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    ::send(fd, req.data(), req.size(), 0);
    timeval timeout{0, 100000};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    auto read_until = [&](const std::string& needle, double seconds) {
        std::string got;
        auto t0 = std::chrono::steady_clock::now();
        char buf[4096];
        while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds) {
            ssize_t n = ::recv(fd, buf, sizeof buf, 0);
            if (n > 0) got.append(buf, n);
            if (got.find(needle) != std::string::npos) return got;
        }
        return got;
    };
    std::string head = read_until("retry:", 2.0);
    EXPECT_NE(head.find("text/event-stream"), std::string::npos) << head;
    auto t0 = std::chrono::steady_clock::now();
    w.metric(id, "loss", 1, 2.5, 1.0);  // committed by the writer within ~100 ms
    std::string got = read_until("[1,2.5,1.0]", 3.0);
    double latency = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_NE(got.find("event: points"), std::string::npos) << got;
    EXPECT_NE(got.find("[1,2.5,1.0]"), std::string::npos) << got;
    EXPECT_EQ(got.find("[0,3.0"), std::string::npos) << "only points after the stream opened";
    EXPECT_LT(latency, 1.5) << "a point reaches the page within about a second of being written";
    w.alert(id, {"loss_jump", "warning", 1, "jumped", "{}", 1.0});
    w.set_status(id, "halted", 2.0);
    got = read_until("\"halted\"", 3.0);
    // Written in one tick, the alert and the status may come in either order.
    if (got.find("event: alert") == std::string::npos) got += read_until("event: alert", 3.0);
    EXPECT_NE(got.find("event: alert"), std::string::npos) << got;
    EXPECT_NE(got.find("event: status"), std::string::npos) << got;
    ::close(fd);
}

TEST(WebServer, HaltFromTheWebStopsARunningTrainer) {
    test::ScratchDir dir("web_halt");
    test::write_tiny_training(dir, 1000000, {{"tensor_norms_every", 0}});
    std::string db = dir.file("s.db");
    { Writer w(db); }
    web::Server server({db, "127.0.0.1", 0, std::string(HLAT_SOURCE_DIR) + "/web/static", "", "", {}});
    std::string cmd = fmt::format("{} train --config {} --data {} --out-dir {} --store {} --name live > {} 2>&1; echo $? > {}",
                                  HLAT_BINARY, dir.file("c.json"), dir.file("t.u16"), dir.file("run"), db,
                                  dir.file("log"), dir.file("rc"));
    std::thread trainer([&] { std::system(cmd.c_str()); });
    bool running = false;
    for (int i = 0; i < 200 && !running; i++) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        auto r = Reader(db).find_run("live");
        running = r && r->status == "running";
    }
    ASSERT_TRUE(running);
    auto denied = http(server.port(), "POST /api/v1/runs/live/halt HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n"
                                      "Connection: close\r\n\r\n");
    EXPECT_EQ(denied.first, 401);
    auto asked = http(server.port(), fmt::format("POST /api/v1/runs/live/halt HTTP/1.1\r\nHost: 127.0.0.1\r\nX-HLAT-Token: {}\r\n"
                                                 "Content-Length: 0\r\nConnection: close\r\n\r\n",
                                                 server.token()));
    EXPECT_EQ(asked.first, 202) << asked.second;
    trainer.join();
    std::ifstream rc(dir.file("rc"));
    int code = -1;
    rc >> code;
    EXPECT_EQ(code, 3) << "halted like a detector halt";
    Reader reader(db);
    auto run = reader.find_run("live");
    EXPECT_EQ(run->status, "halted");
    auto alerts = reader.alerts(run->id);
    ASSERT_FALSE(alerts.empty());
    EXPECT_EQ(alerts.back().kind, "halt_request");
    EXPECT_NE(alerts.back().message.find("web 127.0.0.1"), std::string::npos) << "who asked is recorded";
}

}  // namespace
}  // namespace hlat
