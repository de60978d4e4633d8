#include "session/https_post.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <fmt/format.h>

#include "detectors/config.h"

#include <memory>
#include <stdexcept>

namespace hlat::session {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;

PostTarget parse_post_url(const std::string& url) {
    PostTarget t;
    if (url.rfind("https://", 0) == 0) t.tls = true, t.port = 443;
    else if (url.rfind("http://", 0) != 0) throw std::runtime_error("the webhook is not an http:// or https:// URL");
    const std::string authority = detectors::webhook_host(url);
    // The request target: the path and query after the host ("/" when none); a fragment is not sent.
    const std::string rest = url.substr(url.find("://") + 3);
    const size_t at = rest.substr(0, rest.find('/')).rfind('@');  // as webhook_host reads it
    std::string target = rest.substr((at == std::string::npos ? 0 : at + 1) + authority.size());
    target = target.substr(0, target.find('#'));
    t.path = target.empty() || target[0] != '/' ? "/" + target : target;
    // [v6 address]:port, host:port, or a host alone.
    const bool v6 = !authority.empty() && authority[0] == '[';
    const size_t close = v6 ? authority.find(']') : 0;
    const size_t colon = v6 ? (close == std::string::npos ? close : authority.find(':', close)) : authority.rfind(':');
    t.host = v6 ? authority.substr(1, close == std::string::npos ? 0 : close - 1) : authority.substr(0, colon);
    if (colon != std::string::npos) {
        try {
            size_t used = 0;
            t.port = std::stoi(authority.substr(colon + 1), &used);
            if (used != authority.size() - colon - 1) t.port = 0;
        } catch (const std::exception&) {
            t.port = 0;
        }
    }
    if (t.host.empty() || t.port <= 0 || t.port > 65535)
        throw std::runtime_error(fmt::format("webhook {} has no valid host and port", detectors::redacted_webhook(url)));
    return t;
}

namespace {

// The exchange, asynchronous so that one deadline bounds all of it: io.run_for
// returns at the deadline whatever is pending, and the stream's destruction
// cancels it.
template <class Stream>
struct Exchange : std::enable_shared_from_this<Exchange<Stream>> {
    Stream& stream;
    http::request<http::string_body> request;
    http::response<http::string_body> response;
    beast::flat_buffer buffer;
    PostResult result;

    Exchange(Stream& s, http::request<http::string_body> r) : stream(s), request(std::move(r)) {}
    void fail(const char* what, beast::error_code ec) { result.error = fmt::format("{}: {}", what, ec.message()); }
    void write() {
        http::async_write(stream, request, [self = this->shared_from_this()](beast::error_code ec, size_t) {
            if (ec) return self->fail("sending", ec);
            http::async_read(self->stream, self->buffer, self->response, [self](beast::error_code ec2, size_t) {
                if (ec2) return self->fail("reading the answer", ec2);
                self->result.status = self->response.result_int();
            });
        });
    }
};

}  // namespace

PostResult post_json(const PostTarget& t, const std::string& body, std::chrono::milliseconds deadline) {
    net::io_context io;
    http::request<http::string_body> request{http::verb::post, t.path, 11};
    request.set(http::field::host, t.host);
    request.set(http::field::user_agent, "hlat");
    request.set(http::field::content_type, "application/json");
    request.set(http::field::connection, "close");
    request.body() = body;
    request.prepare_payload();
    tcp::resolver resolver(io);
    ssl::context context(ssl::context::tls_client);
    beast::tcp_stream plain(io);
    beast::ssl_stream<beast::tcp_stream> secure(io, context);
    PostResult out;
    auto start = [&](auto& stream, auto& layer, auto then) {
        auto exchange = std::make_shared<Exchange<std::decay_t<decltype(stream)>>>(stream, std::move(request));
        resolver.async_resolve(t.host, std::to_string(t.port), [&, exchange, then](beast::error_code ec, auto found) {
            if (ec) return exchange->fail("resolving the host", ec);
            layer.async_connect(found, [exchange, then](beast::error_code ec2, auto) {
                if (ec2) return exchange->fail("connecting", ec2);
                then(exchange);
            });
        });
        io.run_for(deadline);
        out = exchange->result;
        if (out.status == 0 && out.error.empty()) out.error = fmt::format("no answer within {} ms", deadline.count());
    };
    if (!t.tls) {
        start(plain, plain, [](auto exchange) { exchange->write(); });
        return out;
    }
    beast::error_code ec;
    if (t.ca_file.empty()) context.set_default_verify_paths(ec);
    else context.load_verify_file(t.ca_file, ec);
    if (ec) return {0, fmt::format("the CA certificates {}: {}", t.ca_file.empty() ? "of the system" : t.ca_file,
                                   ec.message())};
    secure.set_verify_mode(ssl::verify_peer);
    secure.set_verify_callback(ssl::host_name_verification(t.host));
    SSL_set_tlsext_host_name(secure.native_handle(), t.host.c_str());  // SNI: one address, many names
    start(secure, beast::get_lowest_layer(secure), [&secure](auto exchange) {
        secure.async_handshake(ssl::stream_base::client, [exchange](beast::error_code ec2) {
            if (ec2) return exchange->fail("the TLS handshake (is the server's certificate trusted?)", ec2);
            exchange->write();
        });
    });
    return out;
}

}  // namespace hlat::session
