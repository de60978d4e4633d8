#include "web/server.h"

#include "telemetry/reader.h"

#include <arpa/inet.h>
#include <civetweb.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <chrono>
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

constexpr size_t kMaxBody = 64 << 20;

std::string url_decode(const std::string& s, bool form) {
    std::string out(s.size() + 1, '\0');
    int n = mg_url_decode(s.data(), (int)s.size(), out.data(), (int)out.size(), form ? 1 : 0);
    out.resize(n < 0 ? 0 : n);
    return out;
}

std::map<std::string, std::string> parse_query(const char* q) {
    std::map<std::string, std::string> out;
    if (!q) return out;
    std::stringstream ss(q);
    for (std::string pair; std::getline(ss, pair, '&');) {
        size_t eq = pair.find('=');
        out[url_decode(pair.substr(0, eq), true)] = eq == std::string::npos ? "" : url_decode(pair.substr(eq + 1), true);
    }
    return out;
}

const char* reason(int status) {
    switch (status) {
        case 200: return "OK";
        case 202: return "Accepted";
        case 400: return "Bad Request";
        case 401: return "Unauthorized";
        case 404: return "Not Found";
        case 405: return "Method Not Allowed";
        case 409: return "Conflict";
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
    // Each open event stream holds a civetweb thread.
    const char* mg_options[] = {"listening_ports", ports.c_str(), "num_threads", "32", nullptr};
    mg_callbacks callbacks{};
    ctx_ = mg_start(&callbacks, nullptr, mg_options);
    if (!ctx_) throw std::runtime_error(fmt::format("cannot listen on {} (in use, or not an address of this machine)", ports));
    mg_set_request_handler(ctx_, "/", &Server::handle, this);
    port_ = options_.port;
}

Server::~Server() {
    stopping_ = true;  // ends the event streams, which mg_stop waits for
    if (ctx_) mg_stop(ctx_);
}

std::string Server::url() const { return fmt::format("http://{}:{}/", options_.bind, port_); }

int Server::handle(mg_connection* conn, void* self) {
    auto* server = static_cast<Server*>(self);
    const mg_request_info* info = mg_get_request_info(conn);
    Request r;
    r.method = info->request_method ? info->request_method : "";
    std::string raw = info->local_uri_raw ? info->local_uri_raw : "/";
    r.path = url_decode(raw, false);
    r.query = parse_query(info->query_string);
    r.remote = info->remote_addr;
    if (const char* t = mg_get_header(conn, "X-HLAT-Token")) r.token = t;
    if (const char* a = mg_get_header(conn, "Authorization")) {
        std::string auth = a;
        if (auth.rfind("Bearer ", 0) == 0) r.token = auth.substr(7);
    }
    if (r.method == "POST") {
        // civetweb's worker threads have small stacks: buffers live on the heap.
        std::vector<char> buf(1 << 16);
        int n;
        while ((n = mg_read(conn, buf.data(), buf.size())) > 0) {
            r.body.append(buf.data(), n);
            if (r.body.size() > kMaxBody) return send(conn, {413, "application/json", R"({"error": "body too large"})"});
        }
    }
    const std::string stream_suffix = "/stream";
    if (r.method == "GET" && raw.rfind("/api/v1/runs/", 0) == 0 && raw.size() > stream_suffix.size() &&
        raw.compare(raw.size() - stream_suffix.size(), stream_suffix.size(), stream_suffix) == 0) {
        std::string run = r.path.substr(13, r.path.size() - 13 - stream_suffix.size());
        std::async(std::launch::async, [&] { server->stream(conn, r, run); }).get();
        return 200;
    }
    // civetweb's worker threads run on small stacks (this Debian build
    // overflowed one inside SQLite): the work runs on a thread with a normal
    // stack, and the civetweb thread only moves bytes.
    Response response = std::async(std::launch::async, [&] { return server->respond(r, raw); }).get();
    return send(conn, response);
}

void Server::stream(mg_connection* conn, const Request& r, const std::string& name) {
    using namespace std::chrono;
    std::unique_ptr<telemetry::Reader> reader;
    std::optional<telemetry::RunRecord> run;
    try {
        reader = std::make_unique<telemetry::Reader>(options_.store);
        run = reader->find_run(name);
    } catch (const std::exception& e) {
        send(conn, {500, "application/json", nlohmann::json{{"error", e.what()}}.dump()});
        return;
    }
    if (!run) {
        send(conn, {404, "application/json", nlohmann::json{{"error", "no run named \"" + name + "\""}}.dump()});
        return;
    }
    std::vector<std::string> keys;
    auto q = r.query.find("keys");
    std::stringstream ks(q == r.query.end() ? "loss" : q->second);
    for (std::string k; std::getline(ks, k, ',');)
        if (!k.empty()) keys.push_back(k);
    if (keys.empty() || keys.size() > 64) {
        send(conn, {400, "application/json", R"({"error": "keys must name 1 to 64 metric keys"})"});
        return;
    }
    const int64_t end = std::numeric_limits<int64_t>::max() / 2;
    std::map<std::string, int64_t> last;
    for (const std::string& k : keys) {
        last[k] = reader->last_step(run->id, k).value_or(-1);
    }
    if (auto a = r.query.find("after"); a != r.query.end()) {
        int64_t after = std::atoll(a->second.c_str());
        for (auto& [k, step] : last) step = after;
    }
    size_t alerts_seen = reader->alerts(run->id).size();
    std::string status = run->status;
    static const char head[] =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n"
        "retry: 1000\n\n";
    if (mg_write(conn, head, sizeof head - 1) <= 0) return;
    auto event = [&](const char* kind, const nlohmann::json& data) {
        std::string text = fmt::format("event: {}\ndata: {}\n\n", kind, data.dump());
        return mg_write(conn, text.data(), text.size()) > 0;
    };
    auto last_write = steady_clock::now();
    while (!stopping_) {
        bool ok = true;
        try {
            for (const std::string& k : keys) {
                auto points = reader->series(run->id, k, last[k] + 1, end);
                if (points.empty()) continue;
                if (points.size() > 5000) points.erase(points.begin(), points.end() - 5000);
                nlohmann::json rows = nlohmann::json::array();
                for (const auto& p : points)
                    rows.push_back({p.step, std::isnan(p.value) ? nlohmann::json(nullptr) : nlohmann::json(p.value),
                                    p.wall_time});
                last[k] = points.back().step;
                ok = ok && event("points", {{"key", k}, {"points", rows}});
            }
            for (const auto& a : reader->alerts(run->id, (int64_t)alerts_seen)) {
                ok = ok && event("alert", {{"kind", a.kind}, {"severity", a.severity}, {"step", a.step},
                                           {"message", a.message}});
                alerts_seen++;
            }
            auto now = reader->find_run(name);
            if (now && now->status != status && ok) {
                status = now->status;
                ok = event("status", {{"status", status}});
            }
        } catch (const std::exception& e) {
            ok = event("error", {{"error", e.what()}}) && false;
        }
        if (ok && steady_clock::now() - last_write > seconds(10)) {
            static const char keepalive[] = ": keepalive\n\n";  // also how a closed client is noticed
            ok = mg_write(conn, keepalive, sizeof keepalive - 1) > 0;
            last_write = steady_clock::now();
        }
        if (!ok) return;
        std::this_thread::sleep_for(milliseconds(100));  // poll: a commit reaches the page within ~0.2 s
    }
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
