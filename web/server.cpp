#include "web/server.h"

#include "telemetry/reader.h"
#include "telemetry/untrusted_text.h"
#include "web/json_reply.h"
#include "web/query.h"

#include <arpa/inet.h>
#include <civetweb.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <thread>
#include <future>
#include <fstream>
#include <sstream>
#include <vector>

namespace hlat::web {

namespace fs = std::filesystem;

namespace {

constexpr size_t kMaxBody = 64 << 20;  // stated in `hlat serve --help`
constexpr int kWorkerThreads = 32;
constexpr int kMaxStreams = kWorkerThreads / 2;  // the other half always serves reads and writes

const char* reason(int status) {
    switch (status) {
        case 200: return "OK";
        case 202: return "Accepted";
        case 400: return "Bad Request";
        case 401: return "Unauthorized";
        case 404: return "Not Found";
        case 405: return "Method Not Allowed";
        case 409: return "Conflict";
        case 413: return "Content Too Large";
        case 503: return "Service Unavailable";
        default: return status >= 500 ? "Internal Server Error" : "OK";
    }
}

const char* content_type(const fs::path& p) {
    std::string ext = p.extension().string();
    if (ext == ".html") return "text/html; charset=utf-8";
    if (ext == ".js" || ext == ".mjs") return "text/javascript; charset=utf-8";
    if (ext == ".css") return "text/css; charset=utf-8";
    if (ext == ".json") return "application/json";
    if (ext == ".svg") return "image/svg+xml";
    if (ext == ".png") return "image/png";
    return "application/octet-stream";
}

// Every response goes out through mg_write: mg_printf formats into a large
// stack buffer, and civetweb's worker threads have small stacks.
int send(mg_connection* conn, const Response& r) {
    std::string head = fmt::format(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n"
        "X-Content-Type-Options: nosniff\r\nConnection: close\r\n\r\n",
        r.status, reason(r.status), r.content_type, r.body.size());
    mg_write(conn, head.data(), head.size());
    mg_write(conn, r.body.data(), r.body.size());
    return r.status;
}


}  // namespace

int free_loopback_port() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, (sockaddr*)&addr, sizeof addr);
    socklen_t len = sizeof addr;
    ::getsockname(fd, (sockaddr*)&addr, &len);
    ::close(fd);
    return ntohs(addr.sin_port);
}

std::string resolve_static(const std::string& root, const std::string& url_path) {
    const std::string prefix = "/static/";
    if (url_path.rfind(prefix, 0) != 0) return "";
    std::string rel = url_decode(url_path.substr(prefix.size()), false);
    // Decoding twice catches double-encoded escapes (%252e%252e).
    if (rel.find('%') != std::string::npos) rel = url_decode(rel, false);
    if (rel.empty() || rel.find('\0') != std::string::npos || rel.find('\\') != std::string::npos || rel[0] == '/')
        return "";
    for (const auto& part : fs::path(rel))
        if (part == ".." || part == ".") return "";
    std::error_code ec;
    fs::path base = fs::canonical(root, ec);
    if (ec) return "";
    fs::path file = fs::weakly_canonical(base / rel, ec);
    if (ec) return "";
    auto mismatch = std::mismatch(base.begin(), base.end(), file.begin(), file.end());
    if (mismatch.first != base.end() || !fs::is_regular_file(file)) return "";
    return file.string();
}

Server::Server(ServerOptions options) : options_(std::move(options)) {
    if (options_.token.empty()) options_.token = new_token();
    if (!fs::is_directory(options_.static_dir))
        throw std::runtime_error(fmt::format("static folder {} does not exist", options_.static_dir));
    api_ = std::make_unique<Api>(options_.store, options_.token);
    mg_init_library(0);
    if (options_.port == 0) options_.port = free_loopback_port();
    std::string ports = fmt::format("{}:{}", options_.bind, options_.port);
    // Each open event stream holds a civetweb thread (at most kMaxStreams of them).
    const std::string threads = std::to_string(kWorkerThreads);
    // No CORS header: the page is served from here, and no other origin may read it.
    const char* mg_options[] = {"listening_ports", ports.c_str(), "num_threads", threads.c_str(),
                                "access_control_allow_origin", "", nullptr};
    mg_callbacks callbacks{};
    ctx_ = mg_start(&callbacks, nullptr, mg_options);
    if (!ctx_) throw std::runtime_error(fmt::format("cannot listen on {} (in use, or not an address of this machine)", ports));
    mg_set_request_handler(ctx_, "/", &Server::handle, this);
    port_ = options_.port;
}

Server::~Server() {
    stopping_ = true;  // ends the event streams, which mg_stop waits for
    if (!ctx_) return;
    // civetweb's listener polls in 2 s slices and notices the stop only after
    // one: a connection to ourselves wakes it, so the port is free at once
    // and a restart right after SIGTERM can listen again.
    std::atomic<bool> stopped{false};
    std::thread waker([&] {
        while (!stopped) {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            int fd = ::socket(AF_INET, SOCK_STREAM, 0);
            sockaddr_in addr{};
            addr.sin_family = AF_INET;
            addr.sin_port = htons((uint16_t)port_);
            if (::inet_pton(AF_INET, options_.bind == "0.0.0.0" ? "127.0.0.1" : options_.bind.c_str(), &addr.sin_addr) == 1)
                ::connect(fd, (sockaddr*)&addr, sizeof addr);
            ::close(fd);
        }
    });
    mg_stop(ctx_);
    stopped = true;
    waker.join();
}

std::string Server::url() const { return fmt::format("http://{}:{}/", options_.bind, port_); }

namespace {

Request read_head(mg_connection* conn, std::string* raw) {
    const mg_request_info* info = mg_get_request_info(conn);
    Request r;
    r.method = info->request_method ? info->request_method : "";
    *raw = info->local_uri_raw ? info->local_uri_raw : "/";
    r.path = url_decode(*raw, false);
    r.query = parse_query(info->query_string);
    r.remote = info->remote_addr;
    if (const char* t = mg_get_header(conn, "X-HLAT-Token")) r.token = t;
    if (const char* a = mg_get_header(conn, "Authorization")) {
        std::string auth = a;
        if (auth.rfind("Bearer ", 0) == 0) r.token = auth.substr(7);
    }
    return r;
}

// Reads the body of a request that carries the token; false (and the reply
// sent) when it is longer than kMaxBody, by its Content-Length or as read.
bool read_body(mg_connection* conn, Request& r) {
    const long long declared = mg_get_request_info(conn)->content_length;
    const Response too_large{413, "application/json",
                             fmt::format(R"({{"error": "the body is over {} MB"}})", kMaxBody >> 20)};
    if (declared > (long long)kMaxBody) return send(conn, too_large), false;
    // civetweb's worker threads have small stacks: buffers live on the heap.
    std::vector<char> buf(1 << 16);
    for (int n; (n = mg_read(conn, buf.data(), buf.size())) > 0;) {
        r.body.append(buf.data(), n);
        if (r.body.size() > kMaxBody) return send(conn, too_large), false;
    }
    return true;
}

bool is_stream(const Request& r, const std::string& raw) {
    const std::string prefix = "/api/v1/runs/", suffix = "/stream";
    return r.method == "GET" && raw.rfind(prefix, 0) == 0 && raw.size() > prefix.size() + suffix.size() &&
           raw.compare(raw.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::string host_of(const std::string& header) {
    std::string host = header;
    if (!host.empty() && host.front() == '[') host = host.substr(1, host.find(']') - 1);
    else if (size_t colon = host.rfind(':'); colon != std::string::npos && host.find(':') == colon) host.resize(colon);
    for (char& c : host) c = (char)std::tolower((unsigned char)c);
    return host;
}

// Whether the request names this server in its Host header (a request without
// one, HTTP/1.0, is from no browser).
bool Server::host_allowed(mg_connection* conn) const {
    const char* header = mg_get_header(conn, "Host");
    if (!header) return true;
    const std::string host = host_of(header);
    if (host == "127.0.0.1" || host == "localhost" || host == "::1" || host == host_of(options_.bind)) return true;
    return std::find(options_.allowed_hosts.begin(), options_.allowed_hosts.end(), host) != options_.allowed_hosts.end();
}

int Server::handle(mg_connection* conn, void* self) {
    auto* server = static_cast<Server*>(self);
    if (!server->host_allowed(conn))
        return send(conn, error(403, fmt::format("this server answers for 127.0.0.1, localhost and {} only (a page "
                                                 "elsewhere reading it by DNS rebinding?); behind a proxy, start "
                                                 "hlat serve with --allow-host NAME",
                                                 server->options_.bind)));
    std::string raw;
    Request r = read_head(conn, &raw);
    // The token before the body: a request without it costs no memory.
    if (r.method == "POST") {
        if (!server->api_->authorized(r.token))
            return send(conn, error(401, "this changes state: send the token `hlat serve` printed, as X-HLAT-Token"));
        if (!read_body(conn, r)) return 413;
    }
    if (is_stream(r, raw)) {
        // Streams hold a worker thread each; past the cap, reads and writes would starve.
        if (server->streams_.fetch_add(1) >= kMaxStreams) {
            server->streams_--;
            return send(conn, error(503, fmt::format("{} event streams are open, the most this server keeps; close a "
                                                     "page or try again later", kMaxStreams)));
        }
        std::string run = r.path.substr(13, r.path.size() - 13 - 7);
        std::async(std::launch::async, [&] { server->stream(conn, r, run); }).get();
        server->streams_--;
        return 200;
    }
    // civetweb's worker threads run on small stacks (this Debian build
    // overflowed one inside SQLite): the work runs on a thread with a normal
    // stack, and the civetweb thread only moves bytes.
    Response response = std::async(std::launch::async, [&] { return server->respond(r, raw); }).get();
    return send(conn, response);
}

// What a stream needs before it starts; on a bad request the error reply instead.
struct Server::StreamStart {
    std::unique_ptr<telemetry::Reader> reader;
    telemetry::RunRecord run;
    std::vector<std::string> keys;
    std::map<std::string, int64_t> last;  // key -> last step sent
};

std::optional<Server::StreamStart> Server::start_stream(mg_connection* conn, const Request& r, const std::string& name) {
    StreamStart s;
    try {
        check_request_text(r);
        if (!telemetry::valid_utf8(name)) throw BadRequest("the run name is not valid UTF-8");
        s.reader = std::make_unique<telemetry::Reader>(options_.store);
        auto run = s.reader->find_run(name);
        if (!run) return send(conn, error(404, fmt::format("no run named {}", telemetry::excerpt(name, 100)))), std::nullopt;
        s.run = *run;
        auto q = r.query.find("keys");
        std::stringstream ks(q == r.query.end() ? "loss" : q->second);
        for (std::string k; std::getline(ks, k, ',');)
            if (!k.empty()) s.keys.push_back(k);
        if (s.keys.empty() || s.keys.size() > 64) throw BadRequest("keys must name 1 to 64 metric keys");
        const int64_t kNone = std::numeric_limits<int64_t>::min();
        const int64_t after = int_param(r, "after", kNone, -1, std::numeric_limits<int64_t>::max() / 2);
        for (const std::string& k : s.keys) s.last[k] = after != kNone ? after : s.reader->last_step(s.run.id, k).value_or(-1);
    } catch (const BadRequest& e) {
        return send(conn, error(400, e.what())), std::nullopt;
    } catch (const std::exception& e) {
        return send(conn, error(500, e.what())), std::nullopt;
    }
    return s;
}

void Server::stream(mg_connection* conn, const Request& r, const std::string& name) {
    using namespace std::chrono;
    std::optional<StreamStart> s = start_stream(conn, r, name);
    if (!s) return;
    size_t alerts_seen = s->reader->alerts(s->run.id).size();
    std::string status = s->run.status;
    static const char head[] =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n"
        "retry: 1000\n\n";
    if (mg_write(conn, head, sizeof head - 1) <= 0) return;
    auto event = [&](const char* kind, const nlohmann::json& data) {
        std::string text = fmt::format("event: {}\ndata: {}\n\n", kind, telemetry::safe_dump(data));
        return mg_write(conn, text.data(), text.size()) > 0;
    };
    auto last_write = steady_clock::now();
    for (bool ok = true; ok && !stopping_;) {
        try {
            ok = send_new_points(*s, event) && send_new_alerts(*s, alerts_seen, event);
            auto now = s->reader->find_run(name);
            if (ok && now && now->status != status) ok = event("status", {{"status", status = now->status}});
        } catch (const std::exception& e) {
            ok = event("error", {{"error", e.what()}}) && false;
        }
        if (ok && steady_clock::now() - last_write > seconds(10)) {
            static const char keepalive[] = ": keepalive\n\n";  // also how a closed client is noticed
            ok = mg_write(conn, keepalive, sizeof keepalive - 1) > 0;
            last_write = steady_clock::now();
        }
        if (ok) std::this_thread::sleep_for(milliseconds(100));  // poll: a commit reaches the page within ~0.2 s
    }
}

bool Server::send_new_points(StreamStart& s, const EventSender& event) {
    const int64_t end = std::numeric_limits<int64_t>::max() / 2;
    for (const std::string& k : s.keys) {
        auto points = s.reader->series(s.run.id, k, s.last[k] + 1, end);
        if (points.empty()) continue;
        if (points.size() > 5000) points.erase(points.begin(), points.end() - 5000);
        nlohmann::json rows = nlohmann::json::array();
        for (const auto& p : points)
            rows.push_back({p.step, std::isnan(p.value) ? nlohmann::json(nullptr) : nlohmann::json(p.value), p.wall_time});
        s.last[k] = points.back().step;
        if (!event("points", {{"key", k}, {"points", rows}})) return false;
    }
    return true;
}

bool Server::send_new_alerts(StreamStart& s, size_t& seen, const EventSender& event) {
    for (const auto& a : s.reader->alerts(s.run.id, (int64_t)seen)) {
        if (!event("alert", {{"kind", a.kind}, {"severity", a.severity}, {"step", a.step}, {"message", a.message}}))
            return false;
        seen++;
    }
    return true;
}

Response Server::respond(const Request& r, const std::string& raw) {
    if (raw.rfind("/api/", 0) == 0) return api_->handle(r);
    if (r.method != "GET") return {405, "application/json", R"({"error": "use GET"})"};
    std::string path = raw == "/" ? "/static/index.html" : raw == "/favicon.ico" ? "/static/favicon.svg" : raw;
    std::string file = path.rfind("/vendor/", 0) == 0
                           ? resolve_static(options_.vendor_dir, "/static/" + path.substr(8))
                           : resolve_static(options_.static_dir, path);
    if (file.empty()) return {404, "application/json", R"({"error": "not found"})"};
    std::ifstream in(file, std::ios::binary);
    std::string body((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return {200, content_type(file), body};
}

}  // namespace hlat::web
