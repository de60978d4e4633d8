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

// "http(s)://host[:port]/path" -> target; throws std::runtime_error naming the
// URL's fault (the URL itself only in that message: its path may be a secret).
PostTarget parse_post_url(const std::string& url);

// The URL with its path and query left out ("https://hooks.slack.com/…"): a
// Slack or Discord webhook's path is its secret, never written to a log.
std::string redacted_url(const PostTarget& t);

struct PostResult {
    int status = 0;     // the HTTP status; 0 when no answer came
    std::string error;  // why not, when status is 0
};

PostResult post_json(const PostTarget& target, const std::string& body, std::chrono::milliseconds deadline);

}  // namespace hlat::session
