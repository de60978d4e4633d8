// One client connection of `hlat serve`, one request on it (replies say
// Connection: close). Everything here runs on the server's event loop and
// never blocks it: the header is read within limits::kHeaderTimeout, the Host
// and the token are checked before a body is read, the body is read only
// when the budget has room for it, and the handler runs on a pool.
#pragma once

#include "web/api.h"

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace hlat::web {

struct ServerCore;

// The status line and headers of a reply written by hand rather than by
// Beast (streamed replies, event streams, a refusal before any request):
// the same headers every reply carries, then `framing` (a Content-Length,
// Transfer-Encoding: chunked, or "" for a body that ends with the connection).
std::string reply_head(int status, const std::string& content_type, const std::string& framing);

class Connection : public std::enable_shared_from_this<Connection> {
  public:
    Connection(boost::asio::ip::tcp::socket socket, ServerCore& core, std::string client);
    ~Connection();
    void start();
    // Ends a connection that has not sent its header yet (to make room).
    void drop();
    // Writes `r` and closes the connection, as slowly as the client reads.
    void reply(Response r);
    const std::string& client() const { return client_; }

  private:
    void on_header(boost::beast::error_code ec);
    void on_request();
    void read_body();
    void on_body(boost::beast::error_code ec);
    void dispatch();
    void watch_while_handling();
    void start_stream();
    void reply_in_pieces(Response r);
    void write_piece(std::string bytes, bool last);
    void linger();
    void drain(std::shared_ptr<std::array<char, 1 << 16>> sink, std::chrono::steady_clock::time_point until);
    bool reject_parse_error(boost::beast::error_code ec);

    boost::beast::tcp_stream stream_;
    ServerCore& core_;
    const std::string client_;
    boost::beast::flat_buffer buffer_;
    boost::beast::http::request_parser<boost::beast::http::string_body> parser_;
    Request request_;
    std::function<std::optional<std::string>()> pieces_;  // of a streamed reply
    std::string raw_path_;
    size_t body_reserved_ = 0;
    bool header_done_ = false;
    bool handling_ = false;            // a pool thread is answering the request (loop thread only)
    std::atomic<bool> client_gone_{false};  // it left meanwhile: that answer's reads are cancelled
};

}  // namespace hlat::web
