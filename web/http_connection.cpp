#include "web/http_connection.h"

#include "telemetry/sqlite.h"
#include "telemetry/untrusted_text.h"
#include "web/event_stream.h"
#include "web/json_reply.h"
#include "web/query.h"
#include "web/routes.h"
#include "web/server_core.h"

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <malloc.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <utility>
#include <variant>
#include <vector>

namespace hlat::web {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;

namespace {

// Whether the request is an event stream's (web/routes.h), read from the raw
// path: a run's name that encodes "/stream" is no stream.
bool is_stream(const Request& r, const std::string& raw) {
    const RouteMatch m = match_route(r.method, raw);
    return m.route && !m.wrong_method && m.route->id == RouteId::Stream;
}

// The transfer codings of a request, lower-cased, in order, from every
// Transfer-Encoding line.
std::vector<std::string> transfer_codings(const http::request<http::string_body>& req) {
    std::vector<std::string> codings;
    for (auto [field, end] = req.equal_range(http::field::transfer_encoding); field != end; ++field) {
        const std::string value(field->value());
        for (size_t at = 0; at <= value.size();) {
            size_t comma = std::min(value.find(',', at), value.size());
            std::string coding = value.substr(at, comma - at);
            coding.erase(0, coding.find_first_not_of(" \t"));
            coding.erase(coding.find_last_not_of(" \t") + 1);
            for (char& c : coding) c = (char)std::tolower((unsigned char)c);
            codings.push_back(std::move(coding));
            at = comma + 1;
        }
    }
    return codings;
}

// Why a request's header cannot be taken as sent (RFC 9112), or nullopt:
// - Host missing from HTTP/1.1, repeated, or not a host (3.2): read loosely,
//   "[::1]evil.com" passed the Host check as ::1;
// - a transfer coding other than chunked alone: "chunked, identity" does not
//   end in chunked, so the body's length is unknown (6.3: 400), and no other
//   coding is understood here (6.1 suggests 501; 400 keeps every refusal of
//   bad input a 4xx);
// - more than one token (X-HLAT-Token, Authorization: Bearer): which one
//   counts must not depend on their order.
std::optional<std::string> malformed(const http::request<http::string_body>& req) {
    const auto hosts = req.count(http::field::host);
    if (hosts > 1) return fmt::format("the request has {} Host headers; send one", hosts);
    if (hosts == 0 && req.version() >= 11) return std::string("an HTTP/1.1 request needs a Host header");
    if (const auto host = req.find(http::field::host); host != req.end() && host_of(std::string(host->value())).empty())
        return fmt::format("Host {} is not a host name with an optional port",
                           telemetry::excerpt(std::string(host->value()), 100));
    if (req.count(http::field::transfer_encoding)) {
        const std::vector<std::string> codings = transfer_codings(req);
        if (req.version() < 11 || codings.size() != 1 || codings[0] != "chunked") {
            std::string named;
            for (const std::string& c : codings) named += (named.empty() ? "" : ", ") + c;
            return fmt::format("Transfer-Encoding {} is not supported: send the body chunked (\"chunked\" alone) or "
                               "with a Content-Length",
                               telemetry::excerpt(named, 100));
        }
    }
    size_t tokens = req.count("X-HLAT-Token");
    for (auto [a, end] = req.equal_range(http::field::authorization); a != end; ++a)
        tokens += std::string(a->value()).rfind("Bearer ", 0) == 0;
    if (tokens > 1)
        return fmt::format("the request carries {} tokens (X-HLAT-Token, Authorization: Bearer); send one", tokens);
    return std::nullopt;
}

std::string token_of(const http::request<http::string_body>& req) {
    if (auto t = req.find("X-HLAT-Token"); t != req.end()) return std::string(t->value());
    if (auto a = req.find(http::field::authorization); a != req.end()) {
        std::string auth(a->value());
        if (auth.rfind("Bearer ", 0) == 0) return auth.substr(7);
    }
    return "";
}

}  // namespace

std::string reply_head(int status, const std::string& content_type, const std::string& framing) {
    return fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\nCache-Control: no-store\r\n"
                       "X-Content-Type-Options: nosniff\r\n{}Connection: close\r\n\r\n",
                       status, std::string(http::obsolete_reason(http::int_to_status(status))), content_type, framing);
}

Connection::Connection(net::ip::tcp::socket socket, ServerCore& core, std::string client)
    : stream_(std::move(socket)), core_(core), client_(std::move(client)) {
    parser_.header_limit(limits::kMaxHeaderBytes);
    // The body's limit is set once the token is checked: a tokenless upload
    // is told 401, whatever length it declares.
    parser_.body_limit(std::numeric_limits<std::uint64_t>::max());
}

Connection::~Connection() {
    if (body_reserved_) core_.release_body(body_reserved_);
    core_.ledger.closed(client_);
}

void Connection::start() {
    stream_.expires_after(limits::kHeaderTimeout);
    http::async_read_header(stream_, buffer_, parser_,
                            [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
}

void Connection::drop() {
    if (header_done_) return;
    beast::error_code ignored;
    stream_.socket().shutdown(net::ip::tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
}

// A header that never came (timeout, closed, dropped) ends quietly; one that
// is not HTTP, or too long, gets a reply saying so.
bool Connection::reject_parse_error(beast::error_code ec) {
    if (!ec) return false;
    if (ec == beast::error::timeout || ec == http::error::end_of_stream || ec == net::error::operation_aborted ||
        ec == net::error::eof || ec == net::error::connection_reset || ec == net::error::bad_descriptor) {
        beast::error_code ignored;
        stream_.socket().close(ignored);
    } else if (ec == http::error::header_limit) {
        reply(error(431, fmt::format("the request's header is over {} KB", limits::kMaxHeaderBytes >> 10)));
    } else if (ec == http::error::body_limit) {
        reply(error(413, fmt::format("the body is over {} MB", limits::kMaxBody >> 20)));
    } else {
        reply(error(400, fmt::format("malformed HTTP request: {}", ec.message())));
    }
    return true;
}

void Connection::on_header(beast::error_code ec) {
    header_done_ = true;
    core_.ledger.header_done(this);
    if (reject_parse_error(ec)) return;
    const auto& req = parser_.get();
    if (auto why = malformed(req)) return reply(error(400, *why));
    // An HTTP/1.0 request without a Host passes: no browser sends one.
    if (const auto host = req.find(http::field::host); host != req.end() && !core_.host_allowed(std::string(host->value())))
        return reply(error(403, fmt::format("this server answers for 127.0.0.1, localhost and {} only (a page "
                                            "elsewhere reading it by DNS rebinding?); behind a proxy, start hlat "
                                            "serve with --allow-host NAME",
                                            core_.options.bind)));
    const std::string target(req.target());
    if (target.empty() || target[0] != '/') return reply(error(400, "the request target must be a path"));
    const size_t question = target.find('?');
    raw_path_ = target.substr(0, question);
    request_.method = std::string(req.method_string());
    request_.path = url_decode(raw_path_, false);
    request_.query = parse_query(question == std::string::npos ? nullptr : target.c_str() + question + 1);
    request_.token = token_of(req);
    request_.remote = client_;
    on_request();
}

// The token before the body: a request without it costs no memory; then the
// body's size against the limit and against what all bodies may take.
void Connection::on_request() {
    if (request_.method != "POST") {
        if (is_stream(request_, raw_path_)) return start_stream();
        return dispatch();
    }
    if (!core_.api->authorized(request_.token))
        return reply(error(401, "this changes state: send the token `hlat serve` printed, as X-HLAT-Token"));
    const auto declared = parser_.content_length();
    if (declared && *declared > limits::kMaxBody)
        return reply(error(413, fmt::format("the body is over {} MB", limits::kMaxBody >> 20)));
    const size_t need = declared ? (size_t)*declared : limits::kMaxBody;
    if (!core_.reserve_body(need))
        return reply(error(503, fmt::format("bodies being read take the {} MB this server allows; try again",
                                            limits::kBodyBudget >> 20)));
    body_reserved_ = need;
    parser_.body_limit(limits::kMaxBody);  // a chunked body is counted as it comes
    const auto expect = parser_.get().find(http::field::expect);
    if (expect != parser_.get().end() && beast::iequals(expect->value(), "100-continue")) {
        static const std::string go_on = "HTTP/1.1 100 Continue\r\n\r\n";
        stream_.expires_after(limits::kIdleTimeout);
        return net::async_write(stream_, net::buffer(go_on), [self = shared_from_this()](beast::error_code ec, size_t) {
            if (ec) return self->reject_parse_error(ec), void();
            self->read_body();
        });
    }
    read_body();
}

// A body may pause at most kIdleTimeout between pieces, however long it is.
void Connection::read_body() {
    if (parser_.is_done()) return on_body({});
    stream_.expires_after(limits::kIdleTimeout);
    http::async_read_some(stream_, buffer_, parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
        if (ec) return self->on_body(ec);
        self->read_body();
    });
}

void Connection::on_body(beast::error_code ec) {
    if (reject_parse_error(ec)) return;
    request_.body = std::move(parser_.get().body());
    dispatch();
}

// Requests with the token run on their own pool, so reads, however many or
// slow, never hold up an ingest or a halt.
void Connection::dispatch() {
    const bool write = core_.api->authorized(request_.token);
    auto& pool = write ? core_.writes : core_.reads;
    auto& queued = write ? core_.queued_writes : core_.queued_reads;
    const int cap = write ? limits::kMaxQueuedWrites : limits::kMaxQueuedReads;
    if (queued.fetch_add(1) >= cap) {
        queued--;
        return reply(error(503, fmt::format("{} requests are waiting already; try again", cap)));
    }
    net::post(pool, [self = shared_from_this(), &queued, write] {
        Response response;
        {
            // A read stops when its client leaves; anything stops when the server does (SIGTERM
            // within a second, whatever runs). An ingest is not cut short by its client leaving.
            telemetry::CancelScope cancel(write ? nullptr : &self->client_gone_, &self->core_.stopping);
            response = self->core_.respond(self->request_, self->raw_path_);
        }
        queued--;
        const bool large = response.body.size() > (1u << 20);
        net::post(self->core_.loop, [self, r = std::move(response)]() mutable { self->reply(std::move(r)); });
        // Building a large reply took this thread's arena several times its size; glibc keeps
        // freed arena memory unless asked, so the server's memory would climb with the
        // largest replies each thread ever built.
        if (large) ::malloc_trim(0);
    });
    handling_ = true;
    watch_while_handling();
}

// The request is all read; a read on the socket failing (a reset) while it
// is answered means the client left. The end of its stream does not: a client
// may close its sending side after the request and still wait for the answer
// (the http_layer fuzz harness does; so does `nc -N`), and a close cannot be
// told from that without writing. Bytes after the request are dropped: one
// request a connection.
void Connection::watch_while_handling() {
    auto sink = std::make_shared<std::array<char, 512>>();
    stream_.socket().async_read_some(net::buffer(*sink), [self = shared_from_this(), sink](boost::system::error_code ec,
                                                                                         size_t) {
        if (ec == net::error::operation_aborted || !self->handling_) return;  // the reply goes out
        if (ec == net::error::eof) return;  // half-closed, or closed: it may still read the answer
        if (ec) return self->client_gone_.store(true);
        self->watch_while_handling();
    });
}

void Connection::start_stream() {
    if (core_.open_streams.fetch_add(1) >= limits::kMaxStreams) {
        core_.open_streams--;
        return reply(error(503, fmt::format("{} event streams are open, the most this server keeps; close a page or "
                                            "try again later",
                                            limits::kMaxStreams)));
    }
    const std::string run = request_.path.substr(13, request_.path.size() - 13 - 7);
    net::post(core_.streams, [self = shared_from_this(), run] {
        auto opened = open_stream(self->core_.options.store, self->request_, run);
        net::post(self->core_.loop, [self, opened = std::move(opened)]() mutable {
            if (auto* refusal = std::get_if<Response>(&opened)) {
                self->core_.open_streams--;
                return self->reply(std::move(*refusal));
            }
            run_event_stream(self->stream_.release_socket(), self->core_, std::move(std::get<1>(opened)));
        });
    });
}

void Connection::reply(Response r) {
    if (body_reserved_) core_.release_body(std::exchange(body_reserved_, 0));
    if (std::exchange(handling_, false)) {  // ends the watch: one read at a time on the socket
        boost::system::error_code ignored;
        stream_.socket().cancel(ignored);
    }
    if (r.more) return reply_in_pieces(std::move(r));
    auto res = std::make_shared<http::response<http::string_body>>();
    res->version(11);
    res->result(r.status);
    res->set(http::field::content_type, r.content_type);
    res->set(http::field::cache_control, "no-store");
    res->set("X-Content-Type-Options", "nosniff");
    res->keep_alive(false);
    res->body() = std::move(r.body);
    res->prepare_payload();
    // A slow reader gets kIdleTimeout plus a second per MB of the reply.
    stream_.expires_after(limits::kIdleTimeout + std::chrono::seconds(res->body().size() >> 20));
    http::async_write(stream_, *res, [self = shared_from_this(), res](beast::error_code ec, size_t) {
        if (!ec) self->linger();
    });
}

namespace {

// One piece of a chunked body ("" for an empty piece: "0" would end it).
std::string chunk(const std::string& piece) {
    return piece.empty() ? "" : fmt::format("{:x}\r\n{}\r\n", piece.size(), piece);
}

}  // namespace

// A reply read a piece at a time: the next piece is read (on the read pool)
// only once the one before has gone out, so a reply of any length holds one
// piece of memory and no thread while the client reads.
void Connection::reply_in_pieces(Response r) {
    pieces_ = std::move(r.more);
    write_piece(reply_head(r.status, r.content_type, "Transfer-Encoding: chunked\r\n") + chunk(r.body), false);
}

void Connection::write_piece(std::string bytes, bool last) {
    auto data = std::make_shared<std::string>(std::move(bytes));
    stream_.expires_after(limits::kIdleTimeout + std::chrono::seconds(data->size() >> 20));
    net::async_write(stream_, net::buffer(*data), [self = shared_from_this(), data, last](beast::error_code ec, size_t) {
        if (ec) return;  // the client left, or stopped reading (the timeout closed it)
        if (last) return self->linger();
        net::post(self->core_.reads, [self] {
            std::optional<std::string> piece;
            bool failed = false;
            try {
                telemetry::CancelScope cancel(&self->core_.stopping);
                piece = self->pieces_();
            } catch (const std::exception& e) {
                failed = true;  // the reply is cut short: the client sees no final chunk
                spdlog::warn("a streamed reply failed: {}", e.what());
            }
            net::post(self->core_.loop, [self, piece = std::move(piece), failed] {
                beast::error_code ignored;
                if (failed) return self->stream_.socket().close(ignored), void();
                if (!piece) return self->write_piece("0\r\n\r\n", true);
                self->write_piece(chunk(*piece), false);
            });
        });
    });
}

// After the reply, the client may still be sending a body nobody read (a
// refused upload): it is read and dropped until the client stops (2 s
// without a byte) or for 10 s in all, so that closing does not reset the
// connection, which would discard the reply the client has not read yet.
void Connection::linger() {
    beast::error_code ignored;
    stream_.socket().shutdown(net::ip::tcp::socket::shutdown_send, ignored);
    drain(std::make_shared<std::array<char, 1 << 16>>(), std::chrono::steady_clock::now() + std::chrono::seconds(10));
}

void Connection::drain(std::shared_ptr<std::array<char, 1 << 16>> sink, std::chrono::steady_clock::time_point until) {
    stream_.expires_after(std::chrono::seconds(2));
    stream_.async_read_some(net::buffer(*sink), [self = shared_from_this(), sink, until](beast::error_code ec, size_t) {
        if (!ec && std::chrono::steady_clock::now() < until) return self->drain(sink, until);
        beast::error_code ignored;
        self->stream_.socket().close(ignored);
    });
}

}  // namespace hlat::web
