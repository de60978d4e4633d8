// `hlat serve` against hostile input: each request that once killed the
// server (for everyone) is a 400 now, nothing that is not UTF-8 is stored and
// a store that already holds such bytes still lists, idle event streams
// cannot take every worker, and a request without the token costs no memory.
#include "telemetry/reader.h"
#include "telemetry/sqlite.h"
#include "telemetry/untrusted_text.h"
#include "telemetry/writer.h"
#include "test_http.h"
#include "test_util.h"
#include "web/server.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <csignal>
#include <fstream>
#include <thread>

namespace hlat {
namespace {

using json = nlohmann::json;
using namespace telemetry;
using test::http;
using test::http_get;
using test::http_post;

const std::string kToken = "hostile-test-token-0123456789";

// A store with one run, "r", of 100 loss points.
std::string store_with_a_run(const test::ScratchDir& dir) {
    Writer w(dir.file("s.db"));
    RunRecord r;
    r.name = "r";
    r.source = "ingest";
    int64_t id = w.open_run(r, false);
    for (int s = 0; s < 100; s++) w.metric(id, "loss", s, 3.0 - 0.01 * s, 1000.0 + s);
    w.event(id, {"start", 0, 1000.0, "test"});
    return dir.file("s.db");
}

web::ServerOptions options(const std::string& store) {
    return {store, "127.0.0.1", 0, std::string(HLAT_SOURCE_DIR) + "/web/static", "", kToken, {}};
}

// Every reply is JSON a browser can read: valid UTF-8, parseable, with an error message.
void expect_json_error(const std::pair<int, std::string>& reply, int status, const std::string& needle,
                       const std::string& what) {
    EXPECT_EQ(reply.first, status) << what << ": " << reply.second;
    EXPECT_TRUE(valid_utf8(reply.second)) << what;
    json j = json::parse(reply.second, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << what << ": " << reply.second;
    EXPECT_NE(j.value("error", "").find(needle), std::string::npos) << what << ": " << reply.second;
}

TEST(HostileServer, RequestsThatCrashedTheServerAre400s) {
    test::ScratchDir dir("hostile_crashes");
    web::Server server(options(store_with_a_run(dir)));
    const int port = server.port();
    // 1. No token: a run name that is not UTF-8 on the event stream.
    expect_json_error(http_get(port, "/api/v1/runs/%ff/stream"), 400, "not valid UTF-8", "stream %ff");
    // 2. No token: a parameter that is not UTF-8, echoed in the error message.
    for (const char* p : {"from", "to", "points"})
        expect_json_error(http_get(port, fmt::format("/api/v1/runs/r/series?key=loss&{}=%ff", p)), 400, "not valid UTF-8", p);
    expect_json_error(http_get(port, "/api/v1/runs/r/stream?after=9223372036854775807"), 400, "after=", "after overflow");
    expect_json_error(http_get(port, "/api/v1/runs/r/stream?after=abc"), 400, "after=\"abc\"", "after=abc");
    // 3. With the token: a body holding a byte that is not UTF-8.
    expect_json_error(http_post(port, "/api/v1/runs/r/ingest", kToken, "{\"step\": \"\xff\"}\n"), 400, "request:1",
                      "ingest \\xff");
    // 4. With the token: bodies nested 100,000 deep.
    const std::string deep = std::string(100000, '[') + std::string(100000, ']');
    for (const char* what : {"ingest", "start", "finish", "annotate"})
        expect_json_error(http_post(port, fmt::format("/api/v1/runs/r/{}", what), kToken, deep), 400, "more than 64 deep",
                          what);
    expect_json_error(http_post(port, "/api/v1/runs/r/finish", kToken, R"({"status": "nope\u0000x"})"), 400,
                      "is not one of", "finish status");
    // 5. With the token: a step beyond int64 (it stored a stop event at step -2^63), negative, or fractional.
    for (const char* step : {"1e300", "-1", "2.5", "\"7\"", "1e16"}) {
        expect_json_error(http_post(port, "/api/v1/runs/r/finish", kToken, fmt::format(R"({{"step": {}}})", step)), 400,
                          "is not an integer from 0 to 9e15", std::string("finish step ") + step);
        expect_json_error(http_post(port, "/api/v1/runs/new/start", kToken, fmt::format(R"({{"step": {}}})", step)), 400,
                          "is not an integer from 0 to 9e15", std::string("start step ") + step);
    }
    EXPECT_EQ(http_post(port, "/api/v1/runs/r/finish", kToken, R"({"step": 12})").first, 200);
    Reader reader(dir.file("s.db"));
    EXPECT_EQ(reader.events(reader.find_run("r")->id).back().step, 12) << "a good step is kept as it is";
    // The server is still there for everyone.
    auto runs = http_get(port, "/api/v1/runs");
    EXPECT_EQ(runs.first, 200) << runs.second;
    EXPECT_EQ(json::parse(runs.second)["runs"][0]["name"], "r");
}

// A page elsewhere that rebinds its own name to 127.0.0.1 sends its name as
// Host: it read the runs list, configs and notes. Only this server's names
// are answered, and no reply lets another origin read it (no CORS header).
TEST(HostileServer, OnlyThisServersHostNamesAreAnswered) {
    test::ScratchDir dir("hostile_host");
    web::ServerOptions o = options(store_with_a_run(dir));
    o.allowed_hosts = {"hlat.example.org"};
    web::Server server(o);
    const int port = server.port();
    auto with_host = [&](const std::string& host, const std::string& method = "GET", const std::string& extra = "") {
        return http(port, fmt::format("{} /api/v1/runs HTTP/1.1\r\nHost: {}\r\n{}Connection: close\r\n\r\n", method,
                                      host, extra));
    };
    auto refused = with_host("attacker.example");
    expect_json_error(refused, 403, "--allow-host", "Host: attacker.example");
    EXPECT_EQ(refused.second.find("\"r\""), std::string::npos) << "nothing of the runs in the refusal";
    expect_json_error(with_host("attacker.example:" + std::to_string(port)), 403, "--allow-host", "with a port");
    for (std::string ok : {"127.0.0.1", "localhost", "LOCALHOST", "[::1]", "hlat.example.org"}) {
        auto reply = with_host(ok + ":" + std::to_string(port));
        EXPECT_EQ(reply.first, 200) << ok << ": " << reply.second;
    }
    // The CORS preflight of a page elsewhere gets no Access-Control-Allow-Origin.
    std::string preflight = test::http_raw(port, fmt::format(
        "OPTIONS /api/v1/runs HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nOrigin: http://attacker.example\r\n"
        "Access-Control-Request-Method: GET\r\nConnection: close\r\n\r\n", port));
    EXPECT_EQ(preflight.find("Access-Control-Allow-Origin"), std::string::npos) << preflight;
    std::string get = test::http_raw(port, fmt::format("GET /api/v1/runs HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nOrigin: "
                                                       "http://attacker.example\r\nConnection: close\r\n\r\n", port));
    EXPECT_EQ(get.find("Access-Control-Allow-Origin"), std::string::npos) << get.substr(0, 400);
}

TEST(HostileServer, InvalidUtf8IsNeverStoredAndOldStoresStillList) {
    test::ScratchDir dir("hostile_utf8");
    const std::string store = store_with_a_run(dir);
    {
        Writer w(store);
        RunRecord bad;
        bad.name = "run\xff";
        EXPECT_THROW(w.open_run(bad, false), std::invalid_argument) << "the writer refuses a name that is not UTF-8";
    }
    // A store written before names were checked: a run name and an event's detail with raw bytes.
    {
        Writer w(store);
        RunRecord r;
        r.name = "poisoned";
        int64_t id = w.open_run(r, false);
        w.metric(id, "loss", 0, 1.0, 1.0);
        w.flush();
    }
    {
        Database db(store, Database::Mode::ReadWrite, 5000);
        db.exec("UPDATE runs SET name = CAST(x'706f69736f6e6564ff' AS TEXT) WHERE name = 'poisoned'");
        db.exec("UPDATE events SET detail = CAST(x'6372617368ff' AS TEXT)");
    }
    web::Server server(options(store));
    auto runs = http_get(server.port(), "/api/v1/runs");
    EXPECT_EQ(runs.first, 200) << runs.second;
    EXPECT_TRUE(valid_utf8(runs.second));
    EXPECT_NE(runs.second.find("poisoned\xEF\xBF\xBD"), std::string::npos) << "listed, the bad byte as U+FFFD";
    auto events = http_get(server.port(), "/api/v1/runs/r/events");
    EXPECT_EQ(events.first, 200) << events.second;
    EXPECT_NE(events.second.find("crash\xEF\xBF\xBD"), std::string::npos) << events.second;
    expect_json_error(http_post(server.port(), "/api/v1/runs/x%ff/ingest", kToken, "{\"step\": 0, \"loss\": 1}\n"), 400,
                      "not valid UTF-8", "a new run named with a bad byte");
    auto cli = test::run_command(fmt::format("{} runs --json --store {}", HLAT_BINARY, store));
    EXPECT_EQ(cli.exit_code, 0) << cli.output;
    EXPECT_NE(cli.output.find("poisoned\xEF\xBF\xBD"), std::string::npos) << cli.output;
    cli = test::run_command(fmt::format("{} runs --store {}", HLAT_BINARY, store));
    EXPECT_EQ(cli.exit_code, 0) << cli.output;
    EXPECT_NE(cli.output.find("poisoned\\xff"), std::string::npos) << cli.output;
}

// 50 idle event streams (no token needed to open one): at most half the
// workers stream, the rest are told 503, and a plain GET is still answered.
TEST(HostileServer, IdleEventStreamsLeaveRoomForEveryoneElse) {
    test::ScratchDir dir("hostile_streams");
    web::Server server(options(store_with_a_run(dir)));
    std::vector<int> sockets;
    for (int i = 0; i < 50; i++) {
        int fd = test::connect_local(server.port(), 5);
        ASSERT_GE(fd, 0);
        std::string req = "GET /api/v1/runs/r/stream?keys=loss HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
        ::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
        sockets.push_back(fd);
    }
    int streaming = 0, refused = 0;
    for (int fd : sockets) {
        char buf[512];
        ssize_t n = ::recv(fd, buf, sizeof buf - 1, 0);
        std::string head(buf, n > 0 ? n : 0);
        streaming += head.find("200 OK") != std::string::npos;
        refused += head.find("503") != std::string::npos;
    }
    EXPECT_EQ(streaming, 16);
    EXPECT_EQ(refused, 34);
    auto runs = http_get(server.port(), "/api/v1/runs");
    EXPECT_EQ(runs.first, 200) << "a GET is answered with every stream slot taken";
    for (int fd : sockets) ::close(fd);
}

long peak_rss_mb(pid_t pid) {
    std::ifstream status(fmt::format("/proc/{}/status", pid));
    for (std::string line; std::getline(status, line);)
        if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6)) / 1024;
    return -1;
}

// 16 parallel 200 MB POSTs without the token: refused before their bodies are
// read, so the server's peak memory stays small; with the token, a declared
// length over the limit is refused before reading too.
TEST(HostileServer, BodiesWithoutTheTokenAreNeverRead) {
    test::ScratchDir dir("hostile_bodies");
    const std::string store = store_with_a_run(dir);
    const int port = web::free_loopback_port();
    const std::string cmd = fmt::format("{} serve --store {} --port {} --token {} > {} 2>&1 & echo $!", HLAT_BINARY,
                                        store, port, kToken, dir.file("serve.log"));
    const pid_t pid = std::stoi(test::run_command(cmd).output);
    bool up = false;
    for (int i = 0; i < 100 && !up; i++, std::this_thread::sleep_for(std::chrono::milliseconds(100)))
        up = http_get(port, "/api/v1/runs").first == 200;
    ASSERT_TRUE(up);
    const long size = 200L << 20;
    std::vector<std::thread> senders;
    std::atomic<int> refused{0};
    for (int i = 0; i < 16; i++)
        senders.emplace_back([&] {
            int fd = test::connect_local(port, 20);
            if (fd < 0) return;
            std::string head = fmt::format("POST /api/v1/runs/r/ingest HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\r\n", size);
            ::send(fd, head.data(), head.size(), MSG_NOSIGNAL);
            std::string chunk(1 << 20, '{');
            for (long sent = 0; sent < size; sent += (long)chunk.size())
                if (::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL) <= 0) break;
            char buf[64];
            if (::recv(fd, buf, sizeof buf, 0) > 12 && std::string(buf, 12).find("401") != std::string::npos) refused++;
            ::close(fd);
        });
    for (auto& t : senders) t.join();
    EXPECT_EQ(refused, 16);
    auto too_large = http(port, fmt::format("POST /api/v1/runs/r/ingest HTTP/1.1\r\nHost: 127.0.0.1\r\nX-HLAT-Token: {}\r\n"
                                            "Content-Length: {}\r\nConnection: close\r\n\r\n",
                                            kToken, size));
    EXPECT_EQ(too_large.first, 413) << too_large.second;
    const long peak = peak_rss_mb(pid);
    ::kill(pid, SIGTERM);
    EXPECT_GT(peak, 0);
    EXPECT_LT(peak, 300) << "peak resident memory of the server, MB";
}

}  // namespace
}  // namespace hlat
