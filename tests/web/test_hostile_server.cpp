// `hlat serve` against hostile input: each request that once killed the
// server (for everyone) is a 400 now, nothing that is not UTF-8 is stored and
// a store that already holds such bytes still lists, idle connections and
// event streams cannot take the server from anyone, a request without the
// token costs no memory, and bodies share one budget.
#include "telemetry/reader.h"
#include "telemetry/sqlite.h"
#include "telemetry/untrusted_text.h"
#include "telemetry/writer.h"
#include "served_store.h"
#include "test_http.h"
#include "test_util.h"
#include "web/server.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
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

using test::store_with_a_run;
web::ServerOptions options(const std::string& store) { return test::server_options(store, kToken); }

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

// Whether the server has closed this socket (without waiting for it).
bool closed_by_server(int fd) {
    char c;
    return ::recv(fd, &c, 1, MSG_DONTWAIT) == 0;
}

std::string ingest_request(const std::string& body) {
    return fmt::format("POST /api/v1/runs/r/ingest HTTP/1.1\r\nHost: 127.0.0.1\r\nX-HLAT-Token: {}\r\n"
                       "Content-Length: {}\r\nConnection: close\r\n\r\n{}",
                       kToken, body.size(), body);
}

// Error messages quote at most 200 bytes of what they name: the run name of
// a path, a report's runs, a series', CSV's or stream's key (8 KB of them came
// back whole before).
TEST(HostileServer, ErrorsQuoteAShortExcerptOfTheInput) {
    test::ScratchDir dir("hostile_echo");
    web::Server server(options(store_with_a_run(dir)));
    const std::string huge(8000, 'x');
    const std::vector<std::string> paths = {
        "/api/v1/runs/" + huge + "/series?key=loss", "/api/v1/report?runs=" + huge,
        "/api/v1/runs/r/series?key=" + huge,        "/api/v1/runs/r/csv?keys=loss," + huge,
        "/api/v1/runs/r/stream?keys=" + huge,       "/api/v1/runs/r/episodes?key=" + huge};
    for (const std::string& path : paths) {
        // 5 s at most: the server before opened a stream for any key and kept it.
        auto reply = http(server.port(), fmt::format("GET {} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", path), 5);
        EXPECT_TRUE(reply.first == 400 || reply.first == 404) << path.substr(0, 60) << ": " << reply.first;
        EXPECT_LT(reply.second.size(), 400u) << path.substr(0, 60) << ": " << reply.second.substr(0, 100);
    }
}

// Tags are counted in characters, not bytes, and hold no control character
// (NUL and BEL were stored before; 64 accented letters were refused).
TEST(HostileServer, TagsAreCharactersWithoutControls) {
    test::ScratchDir dir("hostile_tags");
    web::Server server(options(store_with_a_run(dir)));
    std::string accented;
    for (int i = 0; i < 64; i++) accented += "\u00e9";
    auto ok = http_post(server.port(), "/api/v1/runs/r/annotate", kToken,
                        R"({"tags": [")" + accented + R"("], "note": "two\nlines\tand a tab"})");
    EXPECT_EQ(ok.first, 200) << ok.second;
    for (const std::string& bad : std::vector<std::string>{R"({"tags": ["a\u0000b"]})", R"({"tags": ["bell\u0007"]})",
                                   R"({"note": "nul\u0000inside"})", R"({"tags": [")" + accented + "e\"]}"})
        expect_json_error(http_post(server.port(), "/api/v1/runs/r/annotate", kToken, bad), 400, "character", bad);
}

// 100 connections that send nothing (no token needed): one client keeps at
// most 64 open, the oldest idle ones giving way, and reads, ingests and halts
// are answered at once. The server before answered nothing for 29.7 s with
// 32 of them open.
TEST(HostileServer, IdleConnectionsCannotFreezeTheServer) {
    test::ScratchDir dir("hostile_idle");
    web::Server server(options(store_with_a_run(dir)));
    std::vector<int> idle;
    for (int i = 0; i < 100; i++) {
        idle.push_back(test::connect_local(server.port(), 5));
        ASSERT_GE(idle.back(), 0);
    }
    // Each within 5 s, or the reply counts as none (status 0).
    EXPECT_EQ(http(server.port(), "GET /api/v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 5).first, 200);
    auto ingest = http(server.port(), ingest_request(R"({"step": 100, "loss": 2.0})" "\n"), 5);
    EXPECT_EQ(ingest.first, 200) << ingest.second;
    int closed = 0;
    for (int fd : idle) closed += closed_by_server(fd);
    EXPECT_GE(closed, 100 - 64) << "the oldest idle connections were closed to make room";
    EXPECT_FALSE(closed_by_server(idle.back())) << "the newest idle one still waits for its header";
    for (int fd : idle) ::close(fd);
}

// A header sent a line at a time, forever (slowloris), is cut off after 10 s.
TEST(HostileServer, AHeaderThatNeverEndsIsCutOff) {
    test::ScratchDir dir("hostile_slow");
    web::Server server(options(store_with_a_run(dir)));
    int fd = test::connect_local(server.port(), 5);
    ASSERT_GE(fd, 0);
    const std::string start = "GET /api/v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n", line = "X-Slow: 1\r\n";
    ::send(fd, start.data(), start.size(), MSG_NOSIGNAL);
    bool cut = false;
    for (int i = 0; i < 40 && !cut; i++) {  // 20 s at most
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        cut = ::send(fd, line.data(), line.size(), MSG_NOSIGNAL) < 0 || closed_by_server(fd);
    }
    EXPECT_TRUE(cut) << "a header still arriving after 20 s was not cut off";
    ::close(fd);
}

// Bodies whose length is ambiguous are refused, not guessed: two different
// Content-Lengths (the server before took one), a chunk size that is not hex
// (acknowledged before as an empty body). Nothing of them is stored.
TEST(HostileServer, AmbiguousBodiesAreRefused) {
    test::ScratchDir dir("hostile_framing");
    const std::string store = store_with_a_run(dir);
    web::Server server(options(store));
    const std::string line = R"({"step": 500, "loss": 1.0})" "\n";
    const std::string head = fmt::format("POST /api/v1/runs/r/ingest HTTP/1.1\r\nHost: 127.0.0.1\r\nX-HLAT-Token: {}\r\n", kToken);
    auto two_lengths = http(server.port(), head + fmt::format("Content-Length: {}\r\nContent-Length: 5\r\n\r\n{}", line.size(), line));
    expect_json_error(two_lengths, 400, "malformed HTTP request", "two Content-Lengths");
    auto bad_chunk = http(server.port(), head + "Transfer-Encoding: chunked\r\n\r\nzz\r\n" + line + "\r\n0\r\n\r\n");
    expect_json_error(bad_chunk, 400, "malformed HTTP request", "a chunk size that is not hex");
    auto good_chunks = http(server.port(), head + fmt::format("Transfer-Encoding: chunked\r\n\r\n{:x}\r\n{}\r\n0\r\n\r\n",
                                                              line.size(), line));
    EXPECT_EQ(good_chunks.first, 200) << "a well-formed chunked body is read: " << good_chunks.second;
    Reader reader(store);
    auto points = reader.series(reader.find_run("r")->id, "loss", 500, 500);
    EXPECT_EQ(points.size(), 1u) << "only the well-formed request stored step 500";
}

// Bodies being read share 256 MB: a chunked body (its length unknown) counts
// as the 64 MB it may grow to, so four are read at once and a fifth is told
// 503 before a byte of it is read; once one ends, the next gets through.
TEST(HostileServer, BodiesInFlightShareOneBudget) {
    test::ScratchDir dir("hostile_budget");
    web::Server server(options(store_with_a_run(dir)));
    const std::string head = fmt::format("POST /api/v1/runs/r/ingest HTTP/1.1\r\nHost: 127.0.0.1\r\nX-HLAT-Token: {}\r\n"
                                         "Transfer-Encoding: chunked\r\n\r\n", kToken);
    const std::string line = R"({"step": 600, "loss": 1.0})" "\n";
    const std::string first_chunk = fmt::format("{:x}\r\n{}\r\n", line.size(), line);
    std::vector<int> uploads;
    for (int i = 0; i < 4; i++) {
        uploads.push_back(test::connect_local(server.port(), 10));
        const std::string part = head + first_chunk;
        ::send(uploads.back(), part.data(), part.size(), MSG_NOSIGNAL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the four are being read
    auto fifth = http(server.port(), head + first_chunk + "0\r\n\r\n", 10);
    expect_json_error(fifth, 503, "try again", "a fifth chunked body");
    const std::string end = "0\r\n\r\n";
    ::send(uploads[0], end.data(), end.size(), MSG_NOSIGNAL);
    char buf[64] = {};
    EXPECT_GT(::recv(uploads[0], buf, sizeof buf - 1, 0), 12);
    EXPECT_NE(std::string(buf).find(" 200 "), std::string::npos) << buf;
    auto next = http(server.port(), head + first_chunk + "0\r\n\r\n", 10);
    EXPECT_EQ(next.first, 200) << "room again once one body was read: " << next.second;
    for (int fd : uploads) ::close(fd);
}

// Reads, however many and heavy, leave room for the requests that carry the
// token: with the read pool busy and its queue full of full-resolution series
// reads (100,000 points each), an ingest is answered while most of those
// reads still wait, for it runs on a pool of its own.
TEST(HostileServer, RequestsWithTheTokenDoNotWaitBehindReads) {
    test::ScratchDir dir("hostile_token_room");
    const std::string store = store_with_a_run(dir, 200000);
    web::Server server(options(store));
    auto warm = http_post(server.port(), "/api/v1/runs/r/ingest", kToken, R"({"step": 200000, "loss": 2.0})" "\n");
    ASSERT_EQ(warm.first, 200) << warm.second;
    const int kReads = 48;  // under the 64 connections one client may keep
    std::atomic<int> answered{0};
    std::vector<std::thread> readers;
    for (int i = 0; i < kReads; i++)
        readers.emplace_back([&] {
            if (http_get(server.port(), "/api/v1/runs/r/series?key=loss&to=199999").first == 200) answered++;
        });
    for (int i = 0; i < 60000 && answered == 0; i++)  // the reads are being served (a minute at most)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_GT(answered, 0) << "no read was answered";
    auto ingest = http_post(server.port(), "/api/v1/runs/r/ingest", kToken, R"({"step": 200001, "loss": 1.9})" "\n");
    const int reads_before_ingest = answered;
    for (auto& t : readers) t.join();
    EXPECT_EQ(ingest.first, 200) << ingest.second;
    EXPECT_EQ(answered, kReads) << "every read is answered in the end";
    EXPECT_LT(reads_before_ingest, kReads / 2) << "the ingest waited behind the reads";
}

long peak_rss_mb(pid_t pid) {
    std::ifstream status(fmt::format("/proc/{}/status", pid));
    for (std::string line; std::getline(status, line);)
        if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6)) / 1024;
    return -1;
}

// `hlat serve` in its own process (for its resident memory) on `store`: pid
// and port, port 0 when it did not come up.
std::pair<pid_t, int> start_serve(const test::ScratchDir& dir, const std::string& store) {
    const int port = web::free_loopback_port();
    const std::string cmd = fmt::format("{} serve --store {} --port {} --token {} > {} 2>&1 & echo $!", HLAT_BINARY,
                                        store, port, kToken, dir.file("serve.log"));
    const pid_t pid = std::stoi(test::run_command(cmd).output);
    for (int i = 0; i < 100; i++, std::this_thread::sleep_for(std::chrono::milliseconds(100)))
        if (http_get(port, "/api/v1/runs").first == 200) return {pid, port};
    return {pid, 0};
}

// 16 parallel uploads of 200 MB, each of `head` and then body bytes
// (chunked or not); the replies' status lines.
std::vector<std::string> upload_in_parallel(int port, const std::string& head, bool chunked) {
    const long size = 200L << 20;
    std::vector<std::string> statuses(16);
    std::vector<std::thread> senders;
    for (int i = 0; i < 16; i++)
        senders.emplace_back([&, i] {
            int fd = test::connect_local(port, 30);
            if (fd < 0) return;
            ::send(fd, head.data(), head.size(), MSG_NOSIGNAL);
            std::string piece(1 << 20, '{');
            if (chunked) piece = fmt::format("{:x}\r\n{}\r\n", piece.size(), piece);
            for (long sent = 0; sent < size; sent += 1 << 20)
                if (::send(fd, piece.data(), piece.size(), MSG_NOSIGNAL) <= 0) break;
            char buf[64] = {};
            if (::recv(fd, buf, sizeof buf - 1, 0) > 12) statuses[i] = std::string(buf, 12);
            ::close(fd);
        });
    for (auto& t : senders) t.join();
    return statuses;
}

// Stops a server started by start_serve: its peak resident memory, MB.
long stop_serve(pid_t pid) {
    const long peak = peak_rss_mb(pid);
    ::kill(pid, SIGTERM);
    return peak;
}

// 16 parallel 200 MB POSTs without the token: refused before their bodies are
// read, so the server's peak memory stays small; with the token, a declared
// length over the limit is refused before reading too.
TEST(HostileServer, BodiesWithoutTheTokenAreNeverRead) {
    test::ScratchDir dir("hostile_bodies");
    const auto [pid, port] = start_serve(dir, store_with_a_run(dir));
    ASSERT_GT(port, 0);
    const long size = 200L << 20;
    const auto statuses = upload_in_parallel(
        port, fmt::format("POST /api/v1/runs/r/ingest HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\r\n", size),
        false);
    const long refused = std::count_if(statuses.begin(), statuses.end(),
                                       [](const std::string& s) { return s.find("401") != std::string::npos; });
    EXPECT_EQ(refused, 16);
    auto too_large = http(port, fmt::format("POST /api/v1/runs/r/ingest HTTP/1.1\r\nHost: 127.0.0.1\r\nX-HLAT-Token: {}\r\n"
                                            "Content-Length: {}\r\nConnection: close\r\n\r\n",
                                            kToken, size));
    EXPECT_EQ(too_large.first, 413) << too_large.second;
    const long peak = stop_serve(pid);
    EXPECT_GT(peak, 0);
    EXPECT_LT(peak, 300) << "peak resident memory of the server, MB";
}

// 16 parallel chunked uploads of 200 MB with the token: each is refused at
// 64 MB (413) or, past the 256 MB all bodies share, at once (503), so the
// server's peak memory stays near the budget (the server before: 1.67 GB).
TEST(HostileServer, UploadsWithTheTokenStayWithinTheBodyBudget) {
    test::ScratchDir dir("hostile_budget_rss");
    const auto [pid, port] = start_serve(dir, store_with_a_run(dir));
    ASSERT_GT(port, 0);
    const auto statuses = upload_in_parallel(
        port, fmt::format("POST /api/v1/runs/r/ingest HTTP/1.1\r\nHost: 127.0.0.1\r\nX-HLAT-Token: {}\r\n"
                          "Transfer-Encoding: chunked\r\n\r\n", kToken),
        true);
    for (const std::string& status : statuses)
        EXPECT_TRUE(status.find("413") != std::string::npos || status.find("503") != std::string::npos) << status;
    const long peak = stop_serve(pid);
    EXPECT_GT(peak, 0);
    EXPECT_LT(peak, 600) << "peak resident memory of the server, MB";
}

// 8 parallel CSV reads of a million-point run, without the token: each comes
// whole, in pieces, and the server's memory stays small (the server before
// built each reply whole: 2.8 GB).
TEST(HostileServer, CsvOfAMillionPointsIsStreamedInBoundedMemory) {
    test::ScratchDir dir("hostile_csv");
    {
        Writer w(dir.file("big.db"));
        RunRecord r;
        r.name = "big";
        r.source = "ingest";
        const int64_t id = w.open_run(r, false);
        for (int64_t chunk = 0; chunk < 100; chunk++) {
            std::vector<MetricPoint> points;
            for (int64_t s = chunk * 10000; s < (chunk + 1) * 10000; s++) {
                points.push_back({"loss", s, 3.0 - 1e-6 * (double)s, 1000.0 + (double)s});
                points.push_back({"grad_norm", s, 1.0 + 1e-7 * (double)s, 1000.0 + (double)s});
            }
            w.metrics(id, std::move(points));
        }
    }
    const auto [pid, port] = start_serve(dir, dir.file("big.db"));
    ASSERT_GT(port, 0);
    std::vector<std::string> bodies(8);
    std::vector<std::thread> readers;
    for (int i = 0; i < 8; i++)
        readers.emplace_back([&, i] {
            const std::string reply = test::http_raw(port, "GET /api/v1/runs/big/csv?keys=loss,grad_norm HTTP/1.1\r\n"
                                                           "Host: 127.0.0.1\r\n\r\n", 120);
            const size_t body = reply.find("\r\n\r\n");
            if (body != std::string::npos) bodies[i] = test::dechunk(reply.substr(body + 4));
        });
    for (auto& t : readers) t.join();
    const long peak = stop_serve(pid);
    for (const std::string& csv : bodies) {
        EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 1000001) << csv.substr(0, 200);
        EXPECT_EQ(csv.rfind("step,time,loss,grad_norm\n", 0), 0u);
        EXPECT_NE(csv.find("\n999999,"), std::string::npos) << "the last step is there";
    }
    EXPECT_GT(peak, 0);
    EXPECT_LT(peak, 300) << "peak resident memory of the server, MB";
}

// A 16 MB ingest body of short values (its records take ~17 bytes a byte
// when parsed whole: ~300 MB) is parsed a piece at a time: the server's peak
// memory stays near the body's own size.
TEST(HostileServer, AnIngestBodyIsParsedInMemoryProportionalToIt) {
    test::ScratchDir dir("hostile_parse_memory");
    { Writer create(dir.file("m.db")); }
    const auto [pid, port] = start_serve(dir, dir.file("m.db"));
    ASSERT_GT(port, 0);
    std::string body;
    for (int64_t step = 0; body.size() < (16u << 20); step++) {
        body += fmt::format("{{\"step\":{}", step);
        for (int k = 0; k < 40; k++) body += fmt::format(",\"k{}\":{}", k, k % 10);
        body += "}\n";
    }
    auto reply = test::http(port,
                            fmt::format("POST /api/v1/runs/big/ingest HTTP/1.1\r\nHost: 127.0.0.1\r\nX-HLAT-Token: {}\r\n"
                                        "Content-Length: {}\r\n\r\n{}",
                                        kToken, body.size(), body),
                            300);
    const long peak = stop_serve(pid);
    EXPECT_EQ(reply.first, 200) << reply.second.substr(0, 200);
    EXPECT_LT(peak, 160) << "peak resident MB for a 16 MB body";
}

std::string loss_lines(int from, int to, double time = 0.0) {
    std::string out;
    for (int s = from; s < to; s++)
        out += time > 0 ? fmt::format("{{\"step\": {}, \"loss\": 2.0, \"time\": {:.17g}}}\n", s, time)
                        : fmt::format("{{\"step\": {}, \"loss\": 2.0}}\n", s);
    return out;
}

// Issue 52, class 7, over HTTP: a client's run deleted while its session is
// open (hlat runs --delete) is told so at its next batch (410), again and
// again, rather than the run made again under its name; a run created since
// by another process keeps its own rows, and a new start opens a new run.
TEST(HostileServer, AClientOfADeletedRunIsToldItIsGone) {
    test::ScratchDir dir("hostile_deleted_run");
    const std::string store = store_with_a_run(dir);
    web::Server server(options(store));
    const int port = server.port();
    ASSERT_EQ(test::http_post(port, "/api/v1/runs/gone/start", kToken, R"({"start_id": "s1"})").first, 200);
    auto first = test::http_post(port, "/api/v1/runs/gone/ingest", kToken, loss_lines(0, 50));
    ASSERT_EQ(first.first, 200) << first.second;
    auto deleted = test::run_command(fmt::format("{} runs --store {} --delete gone", HLAT_BINARY, store));
    ASSERT_EQ(deleted.exit_code, 0) << deleted.output;
    {
        Writer other(store);  // another process's new run
        RunRecord next;
        next.name = "next";
        next.source = "client";
        other.open_run(next, false);
    }
    for (int i = 0; i < 2; i++)
        expect_json_error(test::http_post(port, "/api/v1/runs/gone/ingest", kToken, loss_lines(50, 60)), 410,
                          "was deleted from the store", "a batch of the deleted run");
    Reader reader(store);
    EXPECT_FALSE(reader.find_run("gone").has_value()) << "the deleted run came back";
    EXPECT_TRUE(reader.series(reader.find_run("next")->id, "loss", 0, 100).empty()) << "its rows went to another run";
    EXPECT_EQ(test::http_post(port, "/api/v1/runs/next/ingest", kToken, loss_lines(0, 10)).first, 200);
    EXPECT_EQ(reader.series(reader.find_run("next")->id, "loss", 0, 100).size(), 10u);
    ASSERT_EQ(test::http_post(port, "/api/v1/runs/gone/start", kToken, R"({"start_id": "s2"})").first, 200);
    EXPECT_EQ(test::http_post(port, "/api/v1/runs/gone/ingest", kToken, loss_lines(0, 5)).first, 200)
        << "started again, it is a new run";
}

// Issue 52, class 6: a run is judged stale by the server's clock. Records
// dated 12 hours ahead (a client's clock ahead; times up to now + 1 day are
// taken) kept a silent run "running" until then, and 1.7e21 (nanoseconds:
// year 55,000) for ever; such a time is dated when read now, and the run
// goes stale once silent for the window, while one that keeps sending stays
// running whatever its dates.
TEST(HostileServer, RunsDatedAheadGoStaleByTheServersClock) {
    test::ScratchDir dir("hostile_stale_ahead");
    { Writer create(dir.file("s.db")); }
    web::Server server(options(dir.file("s.db")));
    const int port = server.port();
    const double ahead = now_seconds() + 12 * 3600.0;
    for (const char* run : {"ahead", "wrong-unit", "alive"})
        ASSERT_EQ(test::http_post(port, fmt::format("/api/v1/runs/{}/start", run), kToken, "{}").first, 200);
    EXPECT_EQ(test::http_post(port, "/api/v1/runs/ahead/ingest", kToken, loss_lines(0, 5, ahead)).first, 200);
    EXPECT_EQ(test::http_post(port, "/api/v1/runs/alive/ingest", kToken, loss_lines(0, 5, ahead)).first, 200);
    auto clamped = test::http_post(port, "/api/v1/runs/wrong-unit/ingest", kToken, loss_lines(0, 5, 1.7e21));
    ASSERT_EQ(clamped.first, 200) << clamped.second;
    const json reply = json::parse(clamped.second);
    EXPECT_EQ(reply.value("times_clamped", 0), 5) << clamped.second;
    EXPECT_NE(reply.value("warning", "").find("request:1: \"time\" 1.7e+21"), std::string::npos) << clamped.second;
    EXPECT_EQ(server.mark_stale(1.0), 0) << "all heard from just now";
    std::this_thread::sleep_for(std::chrono::milliseconds(1300));
    EXPECT_EQ(test::http_post(port, "/api/v1/runs/alive/ingest", kToken, loss_lines(5, 6, ahead)).first, 200);
    EXPECT_EQ(server.mark_stale(1.0), 2) << "the two silent runs, whatever their dates";
    Reader reader(dir.file("s.db"));
    EXPECT_EQ(reader.find_run("ahead")->status, "stale");
    EXPECT_EQ(reader.find_run("wrong-unit")->status, "stale");
    EXPECT_EQ(reader.find_run("alive")->status, "running") << "it sent a step within the window";
    const auto events = reader.events(reader.find_run("ahead")->id);
    ASSERT_FALSE(events.empty());
    EXPECT_EQ(events.back().kind, "stale");
    EXPECT_LE(events.back().wall_time, now_seconds()) << "its end is dated by the server's clock";
    std::this_thread::sleep_for(std::chrono::milliseconds(1300));
    EXPECT_EQ(server.mark_stale(1.0), 1) << "silent now, the last one too";
}

// Issue 52, class 11: a Host header is a host and an optional port, sent
// once, or the request is refused (400, RFC 9112 3.2): "[::1]evil.com" and
// "[127.0.0.1" passed the check as ::1 and 127.0.0.1, an empty one as none.
TEST(HostileServer, HostHeadersThatAreNotHostsAreRefused) {
    test::ScratchDir dir("hostile_host_syntax");
    web::Server server(options(store_with_a_run(dir)));
    auto get = [&](const std::string& headers, const char* version = "1.1") {
        return http(server.port(), fmt::format("GET /api/v1/runs HTTP/{}\r\n{}Connection: close\r\n\r\n", version, headers));
    };
    for (const std::string host : {"[::1]evil.com", "[127.0.0.1", "", "[::1]:80x", "127.0.0.1:80:80", "127.0.0.1:abc",
                                   "localhost evil", "evil.example@127.0.0.1"}) {
        auto reply = get("Host: " + host + "\r\n");
        expect_json_error(reply, 400, "Host", "Host: " + host);
        EXPECT_EQ(reply.second.find("\"r\""), std::string::npos) << "nothing of the runs in the refusal";
    }
    expect_json_error(get("Host: 127.0.0.1\r\nHost: attacker.example\r\n"), 400, "2 Host headers", "two Hosts");
    expect_json_error(get(""), 400, "needs a Host header", "HTTP/1.1 without Host");
    for (const std::string host : {"127.0.0.1", "[::1]", "[::1]:8080", "LOCALHOST:80", "127.0.0.1:"})
        EXPECT_EQ(get("Host: " + host + "\r\n").first, 200) << host;
    EXPECT_EQ(get("", "1.0").first, 200) << "HTTP/1.0 may leave Host out";
}

// Issue 52, class 11: a body whose transfer coding is anything but "chunked"
// alone is refused (400): "chunked, identity" does not end in chunked, so its
// length is unknown (RFC 9112 6.3), and no other coding is decoded here. The
// server read "chunked, identity" as a request without a body. Nothing of
// the refused requests is stored.
TEST(HostileServer, TransferCodingsOtherThanChunkedAloneAreRefused) {
    test::ScratchDir dir("hostile_codings");
    const std::string store = store_with_a_run(dir);
    web::Server server(options(store));
    const std::string line = R"({"step": 700, "loss": 1.0})" "\n";
    const std::string head =
        fmt::format("POST /api/v1/runs/r/ingest HTTP/1.1\r\nHost: 127.0.0.1\r\nX-HLAT-Token: {}\r\n", kToken);
    const std::string chunks = fmt::format("{:x}\r\n{}\r\n0\r\n\r\n", line.size(), line);
    for (const std::string coding : {"chunked, identity", "identity", "gzip, chunked", "chunked, chunked", "x"}) {
        auto reply = http(server.port(), head + "Transfer-Encoding: " + coding + "\r\n\r\n" + chunks);
        EXPECT_EQ(reply.first, 400) << coding << ": " << reply.second;
    }
    auto split = http(server.port(), head + "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks);
    expect_json_error(split, 400, "Transfer-Encoding \"gzip, chunked\" is not supported", "two Transfer-Encoding lines");
    Reader reader(store);
    EXPECT_TRUE(reader.series(reader.find_run("r")->id, "loss", 700, 700).empty()) << "a refused body was stored";
    auto good = http(server.port(), head + "Transfer-Encoding: Chunked\r\n\r\n" + chunks);
    EXPECT_EQ(good.first, 200) << "a coding's name is case-insensitive: " << good.second;
    EXPECT_EQ(reader.series(reader.find_run("r")->id, "loss", 700, 700).size(), 1u);
}

// Issue 52, class 11: a request with two tokens is refused (400), whichever
// comes first: the first one counted, so a wrong token after a right one
// changed state.
TEST(HostileServer, RequestsWithTwoTokensAreRefused) {
    test::ScratchDir dir("hostile_two_tokens");
    const std::string store = store_with_a_run(dir);
    web::Server server(options(store));
    const std::string body = R"({"step": 800, "loss": 1.0})" "\n";
    auto post = [&](const std::string& tokens) {
        return http(server.port(), fmt::format("POST /api/v1/runs/r/ingest HTTP/1.1\r\nHost: 127.0.0.1\r\n{}"
                                               "Content-Length: {}\r\nConnection: close\r\n\r\n{}",
                                               tokens, body.size(), body));
    };
    const std::string right = kToken, wrong = "wrong-token-0123456789";
    for (const std::string& tokens :
         {"X-HLAT-Token: " + right + "\r\nX-HLAT-Token: " + wrong + "\r\n",
          "X-HLAT-Token: " + wrong + "\r\nX-HLAT-Token: " + right + "\r\n",
          "X-HLAT-Token: " + right + "\r\nAuthorization: Bearer " + wrong + "\r\n",
          "Authorization: Bearer " + right + "\r\nAuthorization: Bearer " + right + "\r\n"})
        expect_json_error(post(tokens), 400, "tokens", tokens);
    Reader reader(store);
    EXPECT_TRUE(reader.series(reader.find_run("r")->id, "loss", 800, 800).empty()) << "a request with two tokens wrote";
    EXPECT_EQ(post("X-HLAT-Token: " + right + "\r\n").first, 200);
    EXPECT_EQ(post("Authorization: Bearer " + right + "\r\n").first, 200);
}

// Issue 52, class 11: -0.0 reads back as -0 from the CSV export, which
// promises values as stored (it read 0: the store kept the integer 0), and
// as -0.0 from the series.
TEST(HostileServer, NegativeZeroReadsBackAsWritten) {
    test::ScratchDir dir("hostile_negative_zero");
    web::Server server(options(store_with_a_run(dir)));
    auto ingested = test::http_post(server.port(), "/api/v1/runs/r/ingest", kToken, R"({"step": 900, "loss": -0.0})" "\n");
    ASSERT_EQ(ingested.first, 200) << ingested.second;
    auto csv = http_get(server.port(), "/api/v1/runs/r/csv?keys=loss");
    ASSERT_EQ(csv.first, 200) << csv.second;
    const std::string rows = test::dechunk(csv.second);
    const size_t row = rows.find("\n900,");
    ASSERT_NE(row, std::string::npos) << rows.substr(rows.size() > 300 ? rows.size() - 300 : 0);
    const std::string last = rows.substr(row + 1, rows.find('\n', row + 1) - row - 1);
    EXPECT_EQ(last.substr(last.rfind(',') + 1), "-0") << last;
    auto series = http_get(server.port(), "/api/v1/runs/r/series?key=loss&from=900&to=900");
    EXPECT_NE(series.second.find("-0.0"), std::string::npos) << series.second;
}

}  // namespace
}  // namespace hlat
