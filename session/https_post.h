// One HTTP or HTTPS POST with a deadline, for the webhook: Boost.Beast over
// Boost.Asio, TLS by OpenSSL with the server's certificate checked against the
// system's CAs (or a CA file) and its name against the URL's host. Every step
// (resolve, connect, handshake, write, read) shares one deadline, so a
// black-holed endpoint costs the webhook's thread that long and no more.
#pragma once

#include <chrono>
#include <string>

namespace hlat::session {

struct PostTarget {
    bool tls = false;
    std::string host, path;
    int port = 80;
    std::string ca_file;  // "": the system's CAs
};

// "http(s)://[user:password@]host[:port][/path][?query]" (host may be "[v6]")
// -> target; throws std::runtime_error naming the fault, the URL redacted
// (detectors::redacted_webhook: its path and query may be its secret).
PostTarget parse_post_url(const std::string& url);

struct PostResult {
    int status = 0;     // the HTTP status; 0 when no answer came
    std::string error;  // why not, when status is 0
};

PostResult post_json(const PostTarget& target, const std::string& body, std::chrono::milliseconds deadline);

}  // namespace hlat::session
