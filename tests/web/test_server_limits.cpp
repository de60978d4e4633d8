// The limits of web/limits.h that docs/api.md states and no other test
// holds, each against a real server on 127.0.0.1: a header over 16 KB, a
// body that stops for longer than 30 s, 512 connections in all, 256 reads
// waiting, 64 keys in a stream, 256 in a catalogue request. (The others:
// connections per client, the header timeout, streams, bodies and their
// budget and the token's own pool in test_hostile_server.cpp; points per
// series, CSV keys and report runs in test_web.cpp.)
#include "served_store.h"
#include "test_http.h"
#include "test_util.h"
#include "web/limits.h"
#include "web/server.h"

#include <gtest/gtest.h>
#include <fmt/format.h>

#include <chrono>
#include <thread>
#include <vector>

namespace hlat {
namespace {

namespace limits = web::limits;
using test::http;
using test::http_get;

const std::string kToken = "limits-test-token-0123456789";

using test::store_with_a_run;
web::ServerOptions options(const std::string& store) { return test::server_options(store, kToken); }

// The start of the reply on `fd`, up to 512 bytes ("" when none came).
std::string reply_start(int fd) {
    char buf[512];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    return std::string(buf, n > 0 ? (size_t)n : 0);
}

int status_of(const std::string& reply) { return reply.size() > 12 ? std::atoi(reply.c_str() + 9) : 0; }

std::string get_request(const std::string& path) {
    return fmt::format("GET {} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", path);
}

TEST(ServerLimits, AHeaderOver16KBIsRefused) {
    test::ScratchDir dir("limits_header");
    web::Server server(options(store_with_a_run(dir, 10)));
    const std::string request = "GET /api/v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: ";
    auto over = http(server.port(), request + std::string(limits::kMaxHeaderBytes, 'a') + "\r\n\r\n");
    EXPECT_EQ(over.first, 431) << over.second;
    EXPECT_NE(over.second.find("over 16 KB"), std::string::npos) << over.second;
    auto under = http(server.port(), request + std::string(limits::kMaxHeaderBytes / 2, 'a') + "\r\n\r\n");
    EXPECT_EQ(under.first, 200) << "a header of 8 KB is read: " << under.second;
}

// A body that stops coming holds a socket and its share of the body budget,
// never a thread, and for 30 s at most: then the connection is closed.
TEST(ServerLimits, ABodyThatStopsIsCutOffAfter30Seconds) {
    test::ScratchDir dir("limits_body_pause");
    web::Server server(options(store_with_a_run(dir, 10)));
    const int fd = test::connect_local(server.port(), 60);
    ASSERT_GE(fd, 0);
    const std::string part = fmt::format("POST /api/v1/runs/r/ingest HTTP/1.1\r\nHost: 127.0.0.1\r\nX-HLAT-Token: {}\r\n"
                                         "Content-Length: 1000\r\n\r\n{{\"step\": 1",
                                         kToken);
    ::send(fd, part.data(), part.size(), MSG_NOSIGNAL);
    const auto start = std::chrono::steady_clock::now();
    char c;
    const ssize_t n = ::recv(fd, &c, 1, 0);  // waits for the server to close it, or 60 s
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(n, 0) << "the server closed the connection within 60 s";
    EXPECT_GE(waited, (double)limits::kIdleTimeout.count() - 5) << "not long before its 30 s were up";
    EXPECT_EQ(http_get(server.port(), "/api/v1/runs").first, 200);
    ::close(fd);
}

// Opens `per_client` connections from each of `clients` loopback addresses
// (127.0.0.2, 127.0.0.3, ...), sending `request` on each ("" sends nothing).
std::vector<int> open_connections(int port, int clients, int per_client, const std::string& request) {
    std::vector<int> fds;
    for (int c = 0; c < clients; c++)
        for (int i = 0; i < per_client; i++) {
            const int fd = test::connect_from(fmt::format("127.0.0.{}", c + 2), port, 20);
            if (fd < 0) return fds;
            if (!request.empty()) ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
            fds.push_back(fd);
        }
    return fds;
}

void close_all(const std::vector<int>& fds) {
    for (int fd : fds) ::close(fd);
}

// 512 connections in all, from 8 clients keeping 64 each: when every place
// is taken by a connection being served (a body under way), a new client is
// told 503 at once; when they are idle (no header yet), the oldest gives way.
TEST(ServerLimits, FiveHundredTwelveConnectionsInAll) {
    test::ScratchDir dir("limits_connections");
    web::Server server(options(store_with_a_run(dir, 10)));
    const int clients = limits::kMaxConnections / limits::kMaxConnectionsPerClient;
    // Each asks to go on with its body: the 100 Continue says its header was read.
    const std::string body_under_way = fmt::format("POST /api/v1/runs/r/ingest HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                                   "X-HLAT-Token: {}\r\nExpect: 100-continue\r\nContent-Length: 100\r\n\r\n",
                                                   kToken);
    std::vector<int> served = open_connections(server.port(), clients, limits::kMaxConnectionsPerClient, body_under_way);
    ASSERT_EQ(served.size(), (size_t)limits::kMaxConnections);
    for (int fd : served) ASSERT_EQ(status_of(reply_start(fd)), 100);
    int fd = test::connect_from("127.0.0.100", server.port(), 20);
    ASSERT_GE(fd, 0);
    const std::string refusal = reply_start(fd);
    EXPECT_EQ(status_of(refusal), 503) << refusal;
    EXPECT_NE(refusal.find("every connection this server keeps is busy"), std::string::npos) << refusal;
    ::close(fd);
    close_all(served);

    // Once the server has seen those go, 512 idle ones: the next gets room.
    const std::string request = get_request("/api/v1/runs");
    auto answered_from_a_new_client = [&] {
        const int fd = test::connect_from("127.0.0.100", server.port(), 20);
        ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
        const int status = status_of(reply_start(fd));
        ::close(fd);
        return status;
    };
    for (int i = 0; i < 100 && answered_from_a_new_client() != 200; i++)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::vector<int> idle = open_connections(server.port(), clients, limits::kMaxConnectionsPerClient, "");
    ASSERT_EQ(idle.size(), (size_t)limits::kMaxConnections);
    EXPECT_EQ(answered_from_a_new_client(), 200) << "an idle connection made room";
    char c;
    EXPECT_EQ(::recv(idle.front(), &c, 1, MSG_DONTWAIT), 0) << "the oldest idle connection was closed";
    close_all(idle);
}

// At most 256 reads wait for the read pool (4 threads): 300 slow reads sent
// at once (the spike episodes of 60,000 points, ~70 ms each) are each
// answered, 200 or a 503 that says to try again, and some are 503.
TEST(ServerLimits, AtMost256ReadsWait) {
    test::ScratchDir dir("limits_queue");
    web::Server server(options(store_with_a_run(dir, 60000)));
    const std::string request = get_request("/api/v1/runs/r/episodes?key=loss");
    std::vector<int> reads = open_connections(server.port(), 5, 60, request);
    ASSERT_EQ(reads.size(), 300u);
    int ok = 0, refused = 0;
    for (int fd : reads) {
        const std::string reply = reply_start(fd);
        ok += status_of(reply) == 200;
        refused += status_of(reply) == 503 && reply.find("requests are waiting already") != std::string::npos;
    }
    close_all(reads);
    EXPECT_EQ(ok + refused, 300) << "every read is answered";
    EXPECT_GT(refused, 0) << "past 256 waiting, reads are told to try again";
    EXPECT_GE(ok, limits::kMaxQueuedReads) << "256 wait and are answered";
}

TEST(ServerLimits, AStreamNames64KeysAndACatalogueRequest256) {
    test::ScratchDir dir("limits_keys");
    web::Server server(options(store_with_a_run(dir, 10)));
    auto keys = [](int n) {
        std::string list;
        for (int i = 0; i < n; i++) list += fmt::format("{}k{}", i ? "," : "", i);
        return list;
    };
    auto stream = http(server.port(), get_request("/api/v1/runs/r/stream?keys=" + keys(65)), 10);
    EXPECT_EQ(stream.first, 400) << stream.second;
    EXPECT_NE(stream.second.find("1 to 64 metric keys"), std::string::npos) << stream.second;
    const int fd = test::connect_local(server.port(), 10);
    const std::string request = get_request("/api/v1/runs/r/stream?keys=" + keys(64));
    ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    EXPECT_EQ(status_of(reply_start(fd)), 200) << "64 keys stream";
    ::close(fd);
    auto catalogue = http_get(server.port(), "/api/v1/catalogue?keys=" + keys(257));
    EXPECT_EQ(catalogue.first, 400) << catalogue.second;
    EXPECT_NE(catalogue.second.find("at most 256 keys"), std::string::npos) << catalogue.second;
    EXPECT_EQ(http_get(server.port(), "/api/v1/catalogue?keys=" + keys(256)).first, 200);
}

}  // namespace
}  // namespace hlat
