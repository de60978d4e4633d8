// `hlat serve`: the JSON API (api.h), live updates as Server-Sent Events
// (event_stream.h) and the static page from one folder, over HTTP/1.1 with
// Boost.Beast. Binds 127.0.0.1 unless told otherwise; every state change
// needs the access token. The connection model and its limits: limits.h.
#pragma once

#include "web/api.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace hlat::web {

struct ServerOptions {
    std::string store;
    std::string bind = "127.0.0.1";
    int port = 8080;          // 0: any free port
    std::string static_dir;   // the page; nothing outside it is ever served
    std::string vendor_dir;   // npm's browser files (uPlot), served under /vendor/
    std::string token;        // empty: a new random one
    // Names a request's Host header may carry besides 127.0.0.1, localhost,
    // [::1] and the bound address (a reverse proxy's): any other is refused,
    // so a web page the user visits cannot read the runs by DNS rebinding.
    std::vector<std::string> allowed_hosts;
};

// The host part of a Host header ("127.0.0.1:8080" -> "127.0.0.1",
// "[::1]:80" -> "::1"), lower-cased; "" when the header is not a host with an
// optional port ("", "[::1]evil.com", "[127.0.0.1", "a:b:c").
std::string host_of(const std::string& header);

struct ServerCore;
class Acceptor;

class Server {
  public:
    // Starts serving; throws naming the problem (port taken, bad folder).
    explicit Server(ServerOptions options);
    ~Server();
    int port() const { return port_; }
    const std::string& token() const;
    std::string url() const;
    // Marks external runs that sent nothing for `after_seconds` stale.
    int mark_stale(double after_seconds);
    // Set (from a signal handler too: a lock-free store) to stop: every read
    // and ingest in progress ends at its next step in SQLite.
    std::atomic<bool>& stopping();

  private:
    std::unique_ptr<ServerCore> core_;
    std::unique_ptr<Acceptor> acceptor_;
    std::thread loop_thread_;  // runs the event loop: every socket's reads and writes
    int port_ = 0;
};

// A loopback port the kernel says is free right now.
int free_loopback_port();

// Maps a URL path under /static/ to a file inside root, or "" when it would
// leave root or names nothing: no "..", no encoded escapes, no symlink out.
std::string resolve_static(const std::string& root, const std::string& url_path);

}  // namespace hlat::web
