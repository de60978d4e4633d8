// Raw HTTP to a server on 127.0.0.1, for the web tests: requests are sent
// exactly as written (no client normalizes a path or checks the bytes).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cstdlib>
#include <string>
#include <utility>

namespace hlat::test {

// A connected socket to 127.0.0.1:port from `from`, any address of the
// loopback range (127.0.0.2 is another client to the server), or -1 when
// refused; reads time out after `timeout_s` so that no test can hang on a
// server that never answers.
inline int connect_from(const std::string& from, int port, int timeout_s = 20) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in local{};
    local.sin_family = AF_INET;
    ::inet_pton(AF_INET, from.c_str(), &local.sin_addr);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd, (sockaddr*)&local, sizeof local) != 0 || ::connect(fd, (sockaddr*)&addr, sizeof addr) != 0) {
        ::close(fd);
        return -1;
    }
    timeval timeout{timeout_s, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    return fd;
}

inline int connect_local(int port, int timeout_s = 20) { return connect_from("127.0.0.1", port, timeout_s); }

// One request; the whole reply as received, headers included ("" when none).
inline std::string http_raw(int port, const std::string& request, int timeout_s = 20) {
    int fd = connect_local(port, timeout_s);
    if (fd < 0) return "";
    ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    std::string reply;
    char buf[4096];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) reply.append(buf, n);
    ::close(fd);
    return reply;
}

// One request; the status (0 when there is no answer) and the body.
inline std::pair<int, std::string> http(int port, const std::string& request, int timeout_s = 20) {
    const std::string reply = http_raw(port, request, timeout_s);
    int status = reply.size() > 12 ? std::atoi(reply.c_str() + 9) : 0;
    size_t body = reply.find("\r\n\r\n");
    return {status, body == std::string::npos ? "" : reply.substr(body + 4)};
}

// A chunked body, its pieces joined ("" when it does not end as it should).
inline std::string dechunk(const std::string& body) {
    std::string out;
    for (size_t at = 0;;) {
        const size_t eol = body.find("\r\n", at);
        if (eol == std::string::npos) return "";
        const size_t size = std::strtoul(body.substr(at, eol - at).c_str(), nullptr, 16);
        if (size == 0) return out;
        if (eol + 2 + size + 2 > body.size()) return "";
        out.append(body, eol + 2, size);
        at = eol + 2 + size + 2;
    }
}

inline std::pair<int, std::string> http_get(int port, const std::string& path) {
    return http(port, fmt::format("GET {} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", path));
}

inline std::pair<int, std::string> http_post(int port, const std::string& path, const std::string& token,
                                             const std::string& body) {
    return http(port, fmt::format("POST {} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-HLAT-Token: {}\r\nContent-Length: {}\r\n"
                                  "Connection: close\r\n\r\n{}",
                                  path, token, body.size(), body));
}

}  // namespace hlat::test
