// Steps that arrive out of order over HTTP, against a real `hlat serve`: a
// late step is judged in its place (the alerts of in-order arrival), a step
// sent again is not judged twice, and a resumed run of sparse steps catches
// up to the alerts of an uninterrupted one.
#include "served_store.h"
#include "telemetry/reader.h"
#include "test_http.h"
#include "test_util.h"
#include "web/server.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <set>
#include <tuple>

namespace hlat {
namespace {

using json = nlohmann::json;
using test::http_post;

const std::string kToken = "late-steps-token-0123456789";

// Grad norms near 1 (a little noise by seed), 500x at `spike`; a loss falling slowly.
std::string lines(int64_t first, int64_t last, int64_t spike, int seed, int64_t stride = 1) {
    std::string out;
    for (int64_t i = first; i <= last; i++) {
        const double noise = 0.02 * (double)(((i * 7919 + seed * 104729) % 97) - 48) / 48.0;
        const double grad = (i == spike ? 500.0 : 1.0) + noise;
        out += json{{"step", i * stride}, {"loss", 3.0 - 0.001 * (double)i}, {"grad_norm", grad}}.dump() + "\n";
    }
    return out;
}

std::set<std::tuple<std::string, int64_t, std::string>> alerts_of(const std::string& store, const std::string& run) {
    telemetry::Reader reader(store);
    std::set<std::tuple<std::string, int64_t, std::string>> out;
    for (const auto& a : reader.alerts(reader.find_run(run)->id)) out.insert({a.kind, a.step, a.severity});
    return out;
}

size_t alert_rows(const std::string& store, const std::string& run) {
    telemetry::Reader reader(store);
    return reader.alerts(reader.find_run(run)->id).size();
}

void send(int port, const std::string& run, const std::string& body) {
    auto r = http_post(port, "/api/v1/runs/" + run + "/ingest", kToken, body);
    ASSERT_EQ(r.first, 200) << r.second;
}

TEST(LateSteps, ALateSpikeRaisesTheAlertOfInOrderArrival) {
    for (int seed = 0; seed < 4; seed++) {
        test::ScratchDir dir("late_spike");
        const std::string store = dir.file("s.db");
        web::Server server(test::server_options(store, kToken));
        const int64_t spike = 100 + 37 * seed;
        send(server.port(), "inorder", lines(0, 299, spike, seed));
        send(server.port(), "inorder", lines(300, 599, spike, seed));
        send(server.port(), "late", lines(300, 599, spike, seed));  // a second writer, or a spool synced late
        send(server.port(), "late", lines(0, 299, spike, seed));
        const auto expected = alerts_of(store, "inorder");
        ASSERT_TRUE(std::any_of(expected.begin(), expected.end(),
                                [&](const auto& a) { return std::get<0>(a) == "grad_spike" && std::get<1>(a) == spike; }))
            << "seed " << seed << ": in order, the spike at " << spike << " is flagged";
        EXPECT_EQ(alerts_of(store, "late"), expected) << "seed " << seed;
        EXPECT_EQ(alert_rows(store, "late"), alert_rows(store, "inorder")) << "seed " << seed << ": none stored twice";
    }
}

TEST(LateSteps, StepsInterleavedByTwoWritersAreJudgedOnceEach) {
    test::ScratchDir dir("late_interleaved");
    const std::string store = dir.file("s.db");
    web::Server server(test::server_options(store, kToken));
    send(server.port(), "inorder", lines(0, 799, 451, 1));
    // Two writers of one run, each a step of every two, the second always a batch behind.
    for (int64_t b = 0; b < 8; b++) {
        std::string even, odd;
        for (int64_t i = b * 100; i < b * 100 + 100; i++) (i % 2 ? odd : even) += lines(i, i, 451, 1);
        send(server.port(), "two", even);
        if (b > 0) send(server.port(), "two", lines(b * 100 - 99, b * 100 - 99, 451, 1));  // one odd step, late
        send(server.port(), "two", odd);
    }
    EXPECT_EQ(alerts_of(store, "two"), alerts_of(store, "inorder"));
    EXPECT_EQ(alert_rows(store, "two"), alert_rows(store, "inorder"));
}

TEST(LateSteps, ABatchSentAgainRaisesNothingAgain) {
    test::ScratchDir dir("late_again");
    const std::string store = dir.file("s.db");
    web::Server server(test::server_options(store, kToken));
    send(server.port(), "r", lines(0, 299, 200, 2));
    const size_t once = alert_rows(store, "r");
    ASSERT_GT(once, 0u);
    send(server.port(), "r", lines(150, 299, 200, 2));  // a client's retry after a timeout
    send(server.port(), "r", lines(0, 299, 200, 2));
    EXPECT_EQ(alert_rows(store, "r"), once);
}

TEST(LateSteps, AStepLaterThanTheWindowIsStoredNotJudged) {
    test::ScratchDir dir("late_too_late");
    const std::string store = dir.file("s.db");
    web::Server server(test::server_options(store, kToken));
    send(server.port(), "r", lines(3000, 5999, -1, 3));
    send(server.port(), "r", lines(0, 2999, 100, 3));  // 3,000 judged steps behind: past the window
    telemetry::Reader reader(store);
    const int64_t id = reader.find_run("r")->id;
    EXPECT_EQ(reader.series(id, "grad_norm", 100, 100).size(), 1u) << "stored";
    for (const auto& a : reader.alerts(id)) EXPECT_NE(a.step, 100) << "not judged: " << a.message;
}

// Steps a million apart, the server restarted between two halves: the
// resumed run catches up from the store and raises what an uninterrupted run
// raises at the spike after the restart.
TEST(LateSteps, AResumedRunOfSparseStepsCatchesUpToTheUninterruptedAlerts) {
    test::ScratchDir dir("late_sparse");
    const std::string store = dir.file("s.db");
    {
        web::Server server(test::server_options(store, kToken));
        send(server.port(), "whole", lines(0, 1999, 1500, 4, 1000000));
        send(server.port(), "cut", lines(0, 999, 1500, 4, 1000000));
    }
    web::Server again(test::server_options(store, kToken));
    send(again.port(), "cut", lines(1000, 1999, 1500, 4, 1000000));
    const auto expected = alerts_of(store, "whole");
    ASSERT_TRUE(std::any_of(expected.begin(), expected.end(),
                            [](const auto& a) { return std::get<1>(a) == 1500LL * 1000000; }));
    EXPECT_EQ(alerts_of(store, "cut"), expected);
}

}  // namespace
}  // namespace hlat
