// Reads of a real `hlat serve` cost what they return: a downsampled series of
// steps near 9e15 is computed, not searched for; /alerts, /events, /keys,
// /episodes and a live stream read with limits, whatever the run's history;
// a read in progress stops once its client or the server says so.
#include "served_store.h"
#include "session/step_views.h"
#include "telemetry/reader.h"
#include "telemetry/sqlite.h"
#include "telemetry/writer.h"
#include "test_http.h"
#include "test_util.h"
#include "web/json_reply.h"
#include "web/series_api.h"
#include "web/server.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <fstream>
#include <thread>

namespace hlat {
namespace {

using json = nlohmann::json;
using namespace telemetry;
using test::http;
using test::http_get;

const std::string kToken = "bounded-reads-token-0123456789";

int64_t open_r(Writer& w) {
    RunRecord r;
    r.name = "r";
    r.source = "ingest";
    return w.open_run(r, false);
}

json get_json(int port, const std::string& path) {
    auto r = http_get(port, path);
    EXPECT_EQ(r.first, 200) << path << ": " << r.second;
    return json::parse(r.second, nullptr, false);
}

// Steps numbered in tokens: 0, 9e13, ..., 9e15 (the largest step ingest takes).
TEST(BoundedReads, ASeriesOfStepsNear9e15DownsamplesAtOnce) {
    test::ScratchDir dir("bounded_far_steps");
    {
        Writer w(dir.file("s.db"));
        const int64_t id = open_r(w);
        std::vector<MetricPoint> points;
        for (int64_t i = 0; i <= 100; i++) points.push_back({"loss", i * 90'000'000'000'000LL, 10.0 - 0.01 * i, 1e9 + i});
        w.metrics(id, std::move(points));
    }
    web::Server server(test::server_options(dir.file("s.db"), kToken));
    for (int points : {1, 2, 7, 1000})
        for (int64_t from : {0LL, 4'500'000'000'000'000LL, 8'999'999'999'999'999LL}) {
            json j = get_json(server.port(), fmt::format("/api/v1/runs/r/series?key=loss&points={}&from={}", points, from));
            ASSERT_TRUE(j.contains("buckets"));
            const json& b = j["buckets"];
            ASSERT_GE(b.size(), 1u);
            EXPECT_LE(b.size(), (size_t)points) << "points=" << points << " from=" << from;
            // Every point of the range is in a bucket: the extremes and the last value come back.
            const int64_t first_i = (from + 89'999'999'999'999LL) / 90'000'000'000'000LL;
            EXPECT_EQ(b.front()[0].get<int64_t>(), first_i * 90'000'000'000'000LL);
            EXPECT_EQ(b.back()[1].get<int64_t>(), 9'000'000'000'000'000LL);
            double lo = INFINITY, hi = -INFINITY;
            for (const json& row : b) lo = std::min(lo, row[2].get<double>()), hi = std::max(hi, row[3].get<double>());
            EXPECT_DOUBLE_EQ(lo, 9.0);
            EXPECT_DOUBLE_EQ(hi, 10.0 - 0.01 * (double)first_i);
        }
}

TEST(BoundedReads, AlertsListTheNewestAndGroupAllIntoEpisodes) {
    test::ScratchDir dir("bounded_alerts");
    {
        Writer w(dir.file("s.db"));
        const int64_t id = open_r(w);
        const std::string evidence = json{{"ratio", 3.0}, {"pad", std::string(10000, 'x')}}.dump();
        for (int s = 0; s < 2600; s++)  // two episodes of grad_spike (a gap at 1300), 10 KB of evidence each
            w.alert(id, {"grad_spike", "warning", s < 1300 ? s : s + 100, "a spike", evidence, 1000.0 + s});
    }
    web::Server server(test::server_options(dir.file("s.db"), kToken));
    json j = get_json(server.port(), "/api/v1/runs/r/alerts");
    EXPECT_EQ(j["total"], 2600);
    EXPECT_EQ(j["omitted"], 600);
    ASSERT_EQ(j["alerts"].size(), 2000u);
    EXPECT_EQ(j["alerts"].back()["step"], 2699) << "the newest last";
    EXPECT_EQ(j["alerts"].front()["step"], 600) << "the 601st alert";
    ASSERT_EQ(j["episodes"].size(), 2u);
    EXPECT_EQ(j["episodes"][0]["count"], 1300);
    EXPECT_EQ(j["episodes"][1]["first_step"], 1400);
}

// A run whose grad norm spikes every 20 steps has one episode per spike:
// the reply lists the newest 1,000 (a NaN stretch going on since early in the
// run among them) and says how many there are.
TEST(BoundedReads, AlertsListTheNewestEpisodesAndCountThemAll) {
    test::ScratchDir dir("bounded_alert_episodes");
    {
        Writer w(dir.file("s.db"));
        const int64_t id = open_r(w);
        for (int s = 0; s < 60000; s++) {
            if (s % 20 == 0) w.alert(id, {"grad_spike", "warning", s, "a spike", R"({"ratio": 30})", 1000.0 + s});
            if (s >= 500 && s % 10 == 0) w.alert(id, {"nonfinite", "critical", s, "NaN loss", R"({"loss": null})", 1000.0 + s});
        }
    }
    web::Server server(test::server_options(dir.file("s.db"), kToken));
    json j = get_json(server.port(), "/api/v1/runs/r/alerts");
    EXPECT_EQ(j["episodes_total"], 3001) << "3,000 spikes and one NaN stretch";
    EXPECT_EQ(j["episodes_omitted"], 2001);
    ASSERT_EQ(j["episodes"].size(), 1000u);
    EXPECT_EQ(j["episodes"][0]["kind"], "nonfinite") << "the oldest listed opened first";
    EXPECT_EQ(j["episodes"][0]["first_step"], 500);
    EXPECT_EQ(j["episodes"][0]["count"], 5950);
    EXPECT_EQ(j["episodes"][1]["first_step"], 60000 - 999 * 20) << "then the newest 999 spikes";
    EXPECT_EQ(j["episodes"].back()["first_step"], 59980);
}

TEST(BoundedReads, EventsComeInPagesWithDetailsCut) {
    test::ScratchDir dir("bounded_events");
    {
        Writer w(dir.file("s.db"));
        const int64_t id = open_r(w);
        w.event(id, {"start", 0, 1000.0, ""});
        for (int i = 0; i < 40; i++) w.event(id, {"checkpoint", i, 1001.0 + i, std::string(50000, 'd')});
    }
    web::Server server(test::server_options(dir.file("s.db"), kToken));
    json page = get_json(server.port(), "/api/v1/runs/r/events?offset=5&limit=10&detail_max=100");
    EXPECT_EQ(page["total"], 41);
    EXPECT_EQ(page["offset"], 5);
    EXPECT_EQ(page["truncated"], true);
    ASSERT_EQ(page["events"].size(), 10u);
    EXPECT_EQ(page["events"][0]["step"], 4) << "the 6th event: checkpoint 4";
    for (const json& e : page["events"]) EXPECT_EQ(e["detail"].get<std::string>().size(), 100u);
    json all = get_json(server.port(), "/api/v1/runs/r/events");
    EXPECT_EQ(all["events"].size(), 41u);
    EXPECT_EQ(all["truncated"], false);
    EXPECT_EQ(all["events"][1]["detail"].get<std::string>().size(), 4096u) << "details are cut by default";
    EXPECT_EQ(http_get(server.port(), "/api/v1/runs/r/events?limit=0").first, 400);
}

// The peak resident memory of this process since the last reset_peak(), MB.
double peak_mb() {
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);)
        if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
    return 0.0;
}
void reset_peak() { std::ofstream("/proc/self/clear_refs") << "5"; }

// A stored run's steps as the detectors see them (a server's catch-up when it
// opens a run again, `hlat detect`) read its events a window at a time: 2,000
// trainer alerts of 32 KB each (64 MB) cost the replay a few MB. It read them
// all at once: a soak's server rose by hundreds of MB at each restart, with a
// run whose trainer logs a 2 KB alert every step.
TEST(BoundedReads, AStoredRunsEventsAreReplayedAWindowAtATime) {
    test::ScratchDir dir("bounded_replay");
    int64_t id;
    {
        Writer w(dir.file("s.db"));
        id = open_r(w);
        for (int i = 0; i < 2000; i++) {
            w.metric(id, "loss", i, 3.0, 1000.0 + i);
            w.event(id, {"alert", i, 1000.0 + i, fmt::format("{:05d}", i) + std::string(32768, 'a')});
        }
    }
    Reader reader(dir.file("s.db"));
    detectors::DetectorSuite suite{detectors::DetectorsConfig{}};
    reset_peak();
    const double before = peak_mb();
    int64_t steps = 0, events = 0, in_order = 0;
    session::for_each_stored_step(reader, id, suite, [&](const detectors::StepView& v) {
        steps++;
        for (const Event& e : v.events) in_order += e.detail.rfind(fmt::format("{:05d}", v.step), 0) == 0;
        events += (int64_t)v.events.size();
    });
    EXPECT_EQ(steps, 2000);
    EXPECT_EQ(events, 2000);
    EXPECT_EQ(in_order, 2000) << "each event at its own step";
    EXPECT_LT(peak_mb() - before, 24.0) << "peak " << peak_mb() << " MB, " << before << " before the replay";
}

TEST(BoundedReads, KeysOfARunWithManyKeysAreLimited) {
    test::ScratchDir dir("bounded_keys");
    {
        Writer w(dir.file("s.db"));
        const int64_t id = open_r(w);
        std::vector<MetricPoint> points;
        for (int k = 0; k < 300; k++) points.push_back({fmt::format("m/{:04}", k), 0, 1.0, 1000.0});
        w.metrics(id, std::move(points));
    }
    web::Server server(test::server_options(dir.file("s.db"), kToken));
    json j = get_json(server.port(), "/api/v1/runs/r/keys?limit=50");
    EXPECT_EQ(j["keys"].size(), 50u);
    EXPECT_EQ(j["keys"][0], "m/0000");
    EXPECT_EQ(j["total"], 300);
    EXPECT_EQ(j["truncated"], true);
    json whole = get_json(server.port(), "/api/v1/runs/r/keys");
    EXPECT_EQ(whole["keys"].size(), 300u);
    EXPECT_EQ(whole["truncated"], false);
}

// A stream opened with after=-1 sends the newest 5,000 points of a long run,
// and an alert raised after the opening (none of those before it).
TEST(BoundedReads, AStreamFromTheStartSendsTheNewestPoints) {
    test::ScratchDir dir("bounded_stream");
    const std::string store = test::store_with_a_run(dir, 20000);
    {
        Writer w(store);
        w.alert(1, {"grad_spike", "warning", 5, "before the opening", "{}", 1005.0});
    }
    web::Server server(test::server_options(store, kToken));
    int fd = test::connect_local(server.port(), 5);
    const std::string req = "GET /api/v1/runs/r/stream?keys=loss&after=-1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    ::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
    std::string got;
    char buf[65536];
    for (ssize_t n; got.find("\n\n", got.find("event: points")) == std::string::npos &&
                    (n = ::recv(fd, buf, sizeof buf, 0)) > 0;)
        got.append(buf, n);
    {
        Writer w(store);
        w.alert(1, {"loss_jump", "warning", 19999, "after the opening", "{}", 2000.0});
    }
    for (ssize_t n; got.find("event: alert") == std::string::npos && (n = ::recv(fd, buf, sizeof buf, 0)) > 0;)
        got.append(buf, n);
    ::close(fd);
    const size_t at = got.find("data: ", got.find("event: points"));
    ASSERT_NE(at, std::string::npos) << got.substr(0, 300);
    json points = json::parse(got.substr(at + 6, got.find('\n', at) - at - 6), nullptr, false);
    ASSERT_TRUE(points.contains("points")) << got.substr(0, 300);
    EXPECT_EQ(points["points"].size(), 5000u);
    EXPECT_EQ(points["points"].front()[0], 15000);
    EXPECT_EQ(points["points"].back()[0], 19999);
    EXPECT_NE(got.find("after the opening"), std::string::npos);
    EXPECT_EQ(got.find("before the opening"), std::string::npos);
}

// A read that would never end (a query without end) stops with a StoreError
// naming the cancellation once its flag is set from another thread; a
// connection that writes is never cancelled.
TEST(BoundedReads, AReadInProgressIsCancelledByItsFlag) {
    test::ScratchDir dir("bounded_cancel");
    { telemetry::Writer create(dir.file("s.db")); }
    telemetry::Database db(dir.file("s.db"), telemetry::Database::Mode::ReadOnly, 1000);
    std::atomic<bool> gone{false}, stopping{false};
    std::thread leave([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        gone = true;
    });
    std::string error;
    try {
        telemetry::CancelScope cancel(&gone, &stopping);
        db.exec("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c");
    } catch (const telemetry::StoreError& e) {
        error = e.what();
    }
    leave.join();
    EXPECT_NE(error.find("cancelled"), std::string::npos) << error;
    // Outside the scope the flags no longer apply.
    EXPECT_NO_THROW(db.exec("SELECT count(*) FROM runs"));
}

// Episodes from a step on are read from a little before it, not from step 0,
// and are those of the whole series in that range.
TEST(BoundedReads, EpisodesFromAStepAreThoseOfTheWholeSeries) {
    test::ScratchDir dir("bounded_episodes");
    std::vector<telemetry::SeriesPoint> all;
    {
        telemetry::Writer w(dir.file("s.db"));
        const int64_t id = open_r(w);
        std::vector<telemetry::MetricPoint> points;
        for (int64_t s = 0; s < 60000; s++) {
            const double v = s % 997 == 0 ? 50.0 : s % 4999 == 0 ? NAN : 1.0 + 0.001 * (double)(s % 13);
            points.push_back({"grad_norm", s, v, 1000.0 + (double)s});
            all.push_back({s, v, 1000.0 + (double)s});
        }
        w.metrics(id, std::move(points));
    }
    web::Server server(test::server_options(dir.file("s.db"), kToken));
    for (int64_t from : {0, 1, 25000, 59990}) {
        json j = get_json(server.port(), fmt::format("/api/v1/runs/r/episodes?key=grad_norm&from={}", from));
        json expected = json::array();
        for (const web::SpikeEpisode& e : web::spike_episodes(all))
            if (e.last_step >= from) expected.push_back({e.first_step, e.last_step, e.peak_step, web::json_number(e.peak)});
        EXPECT_EQ(j["episodes"], expected) << "from " << from;
    }
}

}  // namespace
}  // namespace hlat
