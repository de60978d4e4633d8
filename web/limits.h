// What `hlat serve` lets one request, one client and all of them together
// take. Stated once here; `hlat serve --help` and docs/api.md say the same,
// and tests/web/test_hostile_server.cpp holds each one.
#pragma once

#include <chrono>
#include <cstddef>

namespace hlat::web::limits {

// A request's header must arrive whole within this time. Waiting costs no
// thread (the network side is one event loop), only a socket.
constexpr std::chrono::seconds kHeaderTimeout{10};
// A body, or a reply being sent, may pause at most this long between bytes.
constexpr std::chrono::seconds kIdleTimeout{30};
constexpr std::size_t kMaxHeaderBytes = 16 << 10;

// Open connections from one address, and in all. When either is reached, the
// oldest connection that has not finished sending its header gives its place
// to the new one (so idle sockets cannot lock anyone out); when none is
// waiting for a header, the new connection is refused (503).
constexpr int kMaxConnectionsPerClient = 64;
constexpr int kMaxConnections = 512;

// Handlers run on three pools, so each kind of request always finds room:
// requests that carry the token (ingest, halt, finish) never queue behind
// reads, and event streams never hold a thread between polls.
constexpr int kReadThreads = 4;    // also the number of heavy reads at once
constexpr int kWriteThreads = 4;
constexpr int kStreamThreads = 2;
constexpr int kMaxQueuedReads = 256;   // beyond it: 503, try again
constexpr int kMaxQueuedWrites = 256;
constexpr int kMaxStreams = 16;        // open event streams (503 beyond)

// Bodies: one at most kMaxBody (413, from Content-Length before reading);
// all being read at once at most kBodyBudget (503 beyond), a chunked body
// counting as kMaxBody until it is read.
constexpr std::size_t kMaxBody = 64 << 20;
constexpr std::size_t kBodyBudget = 256 << 20;
// An ingest body is parsed this much at a time: its records (~17 bytes of
// memory a byte of short values) are at most ~35 MB per write thread, ~140 MB
// with every write thread parsing, beside the bodies' own budget.
constexpr std::size_t kParsePiece = 2 << 20;

}  // namespace hlat::web::limits
