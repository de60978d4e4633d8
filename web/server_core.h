// What every connection of `hlat serve` shares (internal to web/): the event
// loop that moves bytes, the three handler pools, the API, and the ledgers
// that hold the limits of limits.h (connections per client, body bytes in
// flight, open streams).
#pragma once

#include "web/api.h"
#include "web/limits.h"
#include "web/server.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>

#include <atomic>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace hlat::web {

class Connection;

// Counts open connections per client and keeps, oldest first, those still
// sending their header: the ones that give way when the limits are reached.
class ConnectionLedger {
  public:
    // Whether a new connection from `client` may open: true when there is
    // room, or when an idle one was closed to make it (on the event loop).
    bool admit(const std::string& client);
    void opened(const std::shared_ptr<Connection>& c, const std::string& client);
    void header_done(const Connection* c);
    void closed(const std::string& client);
    // Closes every connection still waiting for its header (at shutdown).
    void close_waiting();

  private:
    bool evict_oldest_waiting(const std::string* client, std::vector<std::shared_ptr<Connection>>& found);
    struct Waiting {
        const Connection* raw;  // to find it without taking a reference
        std::weak_ptr<Connection> ref;
    };
    std::mutex mutex_;
    std::map<std::string, int> per_client_;
    int total_ = 0;
    std::list<Waiting> waiting_;  // accept order
};

struct ServerCore {
    explicit ServerCore(ServerOptions o);

    ServerOptions options;
    std::unique_ptr<Api> api;
    // Before the loop and the pools: handlers they still hold when they are
    // destroyed close connections, which report here.
    ConnectionLedger ledger;
    std::atomic<int> queued_reads{0}, queued_writes{0}, open_streams{0};
    std::atomic<size_t> body_bytes{0};  // reserved by bodies being read or handled
    std::atomic<bool> stopping{false};
    boost::asio::io_context loop{1};
    boost::asio::thread_pool reads{limits::kReadThreads};
    boost::asio::thread_pool writes{limits::kWriteThreads};
    boost::asio::thread_pool streams{limits::kStreamThreads};

    // Whether a Host header names this server (a malformed one never does).
    bool host_allowed(const std::string& host_header) const;
    // Reserves room for a body of `bytes`; false when the budget is spent.
    bool reserve_body(size_t bytes);
    void release_body(size_t bytes) { body_bytes -= bytes; }
    // The reply to a request whose body has been read (runs on a pool).
    Response respond(const Request& r, const std::string& raw_path);
};

}  // namespace hlat::web
