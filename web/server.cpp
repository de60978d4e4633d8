#include "web/server.h"

#include "web/http_connection.h"
#include "web/json_reply.h"
#include "web/query.h"
#include "web/server_core.h"

#include <arpa/inet.h>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <future>

namespace hlat::web {

namespace fs = std::filesystem;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

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

// RFC 9110 7.2 / RFC 3986 3.2.2: a name or IPv4 address, or an IPv6 address
// in brackets, then an optional port. Anything around them ("[::1]evil.com",
// an unclosed "[127.0.0.1", a second colon) makes it no host at all: taken
// loosely, such a header passed for this server's own name.
std::string host_of(const std::string& header) {
    std::string host, port;
    if (!header.empty() && header.front() == '[') {
        const size_t close = header.find(']');
        if (close == std::string::npos) return "";
        host = header.substr(1, close - 1);
        if (close + 1 < header.size() && header[close + 1] != ':') return "";
        port = close + 1 < header.size() ? header.substr(close + 2) : "";
        if (host.find_first_not_of("0123456789abcdefABCDEF:.") != std::string::npos) return "";
    } else {
        const size_t colon = header.find(':');
        host = header.substr(0, colon);
        port = colon == std::string::npos ? "" : header.substr(colon + 1);
        if (host.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~") !=
            std::string::npos)
            return "";
    }
    if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) return "";
    for (char& c : host) c = (char)std::tolower((unsigned char)c);
    return host;
}

ServerCore::ServerCore(ServerOptions o) : options(std::move(o)) {
    if (options.token.empty()) options.token = new_token();
    api = std::make_unique<Api>(options.store, options.token);
}

bool ServerCore::host_allowed(const std::string& header) const {
    const std::string host = host_of(header);
    if (host.empty()) return false;
    // The bound address as --bind gave it: "::" or "0.0.0.0" are no Host a client sends.
    std::string bound = options.bind.size() > 2 && options.bind.front() == '['
                            ? options.bind.substr(1, options.bind.size() - 2) : options.bind;
    for (char& c : bound) c = (char)std::tolower((unsigned char)c);
    if (host == "127.0.0.1" || host == "localhost" || host == "::1" || host == bound) return true;
    return std::find(options.allowed_hosts.begin(), options.allowed_hosts.end(), host) != options.allowed_hosts.end();
}

bool ServerCore::reserve_body(size_t bytes) {
    size_t now = body_bytes.load();
    do {
        if (now + bytes > limits::kBodyBudget) return false;
    } while (!body_bytes.compare_exchange_weak(now, now + bytes));
    return true;
}

Response ServerCore::respond(const Request& r, const std::string& raw) {
    if (raw.rfind("/api/", 0) == 0) return api->handle(r);
    if (r.method != "GET") return {405, "application/json", R"({"error": "use GET"})"};
    std::string path = raw == "/" ? "/static/index.html" : raw == "/favicon.ico" ? "/static/favicon.svg" : raw;
    std::string file = path.rfind("/vendor/", 0) == 0
                           ? resolve_static(options.vendor_dir, "/static/" + path.substr(8))
                           : resolve_static(options.static_dir, path);
    if (file.empty()) return {404, "application/json", R"({"error": "not found"})"};
    std::ifstream in(file, std::ios::binary);
    std::string body((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return {200, content_type(file), body};
}

// Connections found in the ledger are kept alive in `found` until its lock is
// released: the last reference going would close them, which takes the lock.
bool ConnectionLedger::admit(const std::string& client) {
    std::vector<std::shared_ptr<Connection>> found;
    std::lock_guard lock(mutex_);
    auto mine = per_client_.find(client);
    if (mine != per_client_.end() && mine->second >= limits::kMaxConnectionsPerClient &&
        !evict_oldest_waiting(&client, found))
        return false;
    return total_ < limits::kMaxConnections || evict_oldest_waiting(nullptr, found);
}

// Closes the oldest connection (of `client`, or of anyone) still sending its
// header. Its count goes when it is gone, a moment later.
bool ConnectionLedger::evict_oldest_waiting(const std::string* client,
                                            std::vector<std::shared_ptr<Connection>>& found) {
    for (auto it = waiting_.begin(); it != waiting_.end();) {
        auto c = it->ref.lock();
        if (!c) {
            it = waiting_.erase(it);
            continue;
        }
        found.push_back(c);
        if (!client || c->client() == *client) {
            waiting_.erase(it);
            c->drop();
            return true;
        }
        ++it;
    }
    return false;
}

void ConnectionLedger::opened(const std::shared_ptr<Connection>& c, const std::string& client) {
    std::lock_guard lock(mutex_);
    per_client_[client]++;
    total_++;
    waiting_.push_back({c.get(), c});
}

void ConnectionLedger::header_done(const Connection* c) {
    std::lock_guard lock(mutex_);
    waiting_.remove_if([c](const Waiting& w) { return w.raw == c || w.ref.expired(); });
}

void ConnectionLedger::closed(const std::string& client) {
    std::lock_guard lock(mutex_);
    if (auto it = per_client_.find(client); it != per_client_.end() && --it->second <= 0) per_client_.erase(it);
    total_--;
}

void ConnectionLedger::close_waiting() {
    std::vector<std::shared_ptr<Connection>> found;
    std::lock_guard lock(mutex_);
    for (auto& w : waiting_)
        if (auto c = w.ref.lock()) found.push_back(c), c->drop();
    waiting_.clear();
}

// Accepts connections on the event loop, each past the ledger.
class Acceptor {
  public:
    Acceptor(ServerCore& core, const tcp::endpoint& at) : core_(core), acceptor_(core.loop) {
        acceptor_.open(at.protocol());
        acceptor_.set_option(net::socket_base::reuse_address(true));
        acceptor_.bind(at);
        acceptor_.listen(net::socket_base::max_listen_connections);
    }
    int port() const { return acceptor_.local_endpoint().port(); }
    void accept() {
        acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
            if (ec == net::error::operation_aborted || core_.stopping) return;
            if (!ec) admit(std::move(socket));
            accept();
        });
    }
    void close() {
        boost::system::error_code ignored;
        acceptor_.close(ignored);
    }

  private:
    void admit(tcp::socket socket) {
        boost::system::error_code ec;
        const auto remote = socket.remote_endpoint(ec);
        if (ec) return;
        const std::string client = remote.address().to_string();
        if (!core_.ledger.admit(client)) return refuse(std::move(socket));
        auto c = std::make_shared<Connection>(std::move(socket), core_, client);
        core_.ledger.opened(c, client);
        c->start();
    }
    // Every place is taken by a connection that is being served: say so, close.
    void refuse(tcp::socket socket) {
        static const std::string busy =
            reply_head(503, "application/json", fmt::format("Retry-After: 1\r\nContent-Length: {}\r\n", std::size(kBusy) - 1)) +
            kBusy;
        auto s = std::make_shared<tcp::socket>(std::move(socket));
        net::async_write(*s, net::buffer(busy), [s](boost::system::error_code, size_t) {
            boost::system::error_code ignored;
            s->shutdown(tcp::socket::shutdown_both, ignored);
            s->close(ignored);
        });
    }
    static constexpr char kBusy[] = R"({"error": "every connection this server keeps is busy; try again"})";
    ServerCore& core_;
    tcp::acceptor acceptor_;
};

Server::Server(ServerOptions options) {
    if (!fs::is_directory(options.static_dir))
        throw std::runtime_error(fmt::format("static folder {} does not exist", options.static_dir));
    core_ = std::make_unique<ServerCore>(std::move(options));
    const ServerOptions& o = core_->options;
    boost::system::error_code ec;
    const auto address = net::ip::make_address(o.bind == "localhost" ? "127.0.0.1" : o.bind, ec);
    if (ec) throw std::runtime_error(fmt::format("--bind {} is not an IP address", o.bind));
    try {
        acceptor_ = std::make_unique<Acceptor>(*core_, tcp::endpoint(address, (unsigned short)o.port));
    } catch (const boost::system::system_error& e) {
        throw std::runtime_error(fmt::format("cannot listen on {}:{} ({})", o.bind, o.port, e.code().message()));
    }
    port_ = acceptor_->port();
    acceptor_->accept();
    loop_thread_ = std::thread([this] { core_->loop.run(); });
}

// Stops accepting, ends streams and header waits, lets the handlers that run
// finish, then stops the loop: the port is free when this returns.
Server::~Server() {
    core_->stopping = true;
    net::post(core_->loop, [this] {
        acceptor_->close();
        core_->ledger.close_waiting();
    });
    core_->reads.join();
    core_->writes.join();
    core_->streams.join();
    // Streams see `stopping` within a tick; replies in flight get a moment.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    core_->loop.stop();
    loop_thread_.join();
}

const std::string& Server::token() const { return core_->options.token; }
int Server::mark_stale(double after_seconds) { return core_->api->mark_stale(after_seconds); }
std::atomic<bool>& Server::stopping() { return core_->stopping; }
std::string Server::url() const { return fmt::format("http://{}:{}/", core_->options.bind, port_); }

}  // namespace hlat::web
