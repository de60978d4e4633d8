// `hlat serve`: civetweb serving the JSON API (api.h), live updates as
// Server-Sent Events, and the static page from one folder.
//   GET /api/v1/runs/{run}/stream?keys=loss,grad_norm[&after=STEP]
//       event "points" {"key", "points": [[step, value, time], ...]} for every new point of each key,
//       event "alert" for each new alert, event "status" when the run's status changes. Binds 127.0.0.1 unless told otherwise; every state change needs
// the access token.
#pragma once

#include "web/api.h"

#include <nlohmann/json.hpp>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

struct mg_context;
struct mg_connection;

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
// "[::1]:80" -> "::1"), lower-cased.
std::string host_of(const std::string& header);

class Server {
  public:
    // Starts serving; throws naming the problem (port taken, bad folder).
    explicit Server(ServerOptions options);
    ~Server();
    int port() const { return port_; }
    const std::string& token() const { return options_.token; }
    std::string url() const;
    // Marks external runs that sent nothing for `after_seconds` stale.
    int mark_stale(double after_seconds) { return api_->mark_stale(after_seconds); }

  private:
    bool host_allowed(mg_connection* conn) const;
    static int handle(mg_connection* conn, void* self);
    Response respond(const Request& r, const std::string& raw_path);
    // Server-Sent Events of one run until the client leaves or the server stops.
    struct StreamStart;
    using EventSender = std::function<bool(const char* kind, const nlohmann::json& data)>;
    void stream(mg_connection* conn, const Request& r, const std::string& run);
    std::optional<StreamStart> start_stream(mg_connection* conn, const Request& r, const std::string& run);
    static bool send_new_points(StreamStart& s, const EventSender& event);
    static bool send_new_alerts(StreamStart& s, size_t& seen, const EventSender& event);
    ServerOptions options_;
    std::unique_ptr<Api> api_;
    mg_context* ctx_ = nullptr;
    std::atomic<bool> stopping_{false};
    std::atomic<int> streams_{0};  // open event streams
    int port_ = 0;
};

// A loopback port the kernel says is free right now (civetweb takes no port 0).
int free_loopback_port();

// Maps a URL path under /static/ to a file inside root, or "" when it would
// leave root or names nothing: no "..", no encoded escapes, no symlink out.
std::string resolve_static(const std::string& root, const std::string& url_path);

}  // namespace hlat::web
