// Fuzz target: `hlat serve`'s HTTP layer end to end, over a real socket to an
// in-process server on 127.0.0.1 (the event loop, the Host and token checks
// before the body, bodies, event streams, static files). The input is the raw
// bytes a client sends on one connection, which it then half-closes. The
// server must answer with an HTTP status line or close quietly, and:
// - never a 5xx other than 503 (busy; bad input is the client's error);
// - nothing that changes state without the token: a POST answered 2xx must
//   carry it;
// - no file outside the static folder, whatever the path says.
// A hang past libFuzzer's -timeout is a crash too.
#include "telemetry/writer.h"
#include "web/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

using namespace hlat;
namespace fs = std::filesystem;

namespace {

const std::string kToken = "fuzz-token-0123456789";
// Bytes no reply of the API can carry (a control byte and one that is not
// UTF-8: excerpts escape them, names refuse them), so finding them in a reply
// means the file itself was read, never that a request was echoed.
const std::string kSecret = "SECRET\x01\xff-OUTSIDE-THE-STATIC-FOLDER";

// A store with one run, a static folder with a page, and a secret beside it.
web::Server& server() {
    static web::Server* instance = [] {
        const fs::path dir = fs::temp_directory_path() / ("hlat_fuzz_http_" + std::to_string(getpid()));
        fs::remove_all(dir);
        fs::create_directories(dir / "static");
        std::ofstream(dir / "static" / "index.html") << "<!doctype html><title>hlat</title>";
        std::ofstream(dir / "secret.txt") << kSecret;
        const std::string store = (dir / "hlat.db").string();
        {
            telemetry::Writer w(store);
            telemetry::RunRecord r;
            r.name = "r";
            r.source = "ingest";
            int64_t id = w.open_run(r, false);
            for (int s = 0; s < 50; s++) w.metric(id, "loss", s, 3.0 - 0.01 * s, 1000.0 + s);
        }
        web::ServerOptions o;
        o.store = store;
        o.port = 0;
        o.static_dir = (dir / "static").string();
        o.vendor_dir = (dir / "static").string();
        o.token = kToken;
        std::atexit([] { fs::remove_all(fs::temp_directory_path() / ("hlat_fuzz_http_" + std::to_string(getpid()))); });
        return new web::Server(o);
    }();
    return *instance;
}

// Hundreds of connections a second: each is closed with a reset (linger 0)
// so none waits in TIME_WAIT, where tens of thousands of them would use up
// the ephemeral ports and make a later connect fail (EADDRNOTAVAIL), which is
// the machine's limit, not the server's; such a failure is retried a while.
// libFuzzer's timer (SIGALRM for -timeout) interrupts blocking calls without
// SA_RESTART: a connect it interrupts goes on in the background and cannot be
// called again on that socket, so it is retried on a new one; a send or recv
// it interrupts is simply called again.
int connect_to(int port) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int attempt = 0; attempt < 200; attempt++) {
        int fd = ::socket(AF_INET, SOCK_STREAM, 0);
        linger reset{1, 0};
        ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
        if (::connect(fd, (sockaddr*)&addr, sizeof addr) == 0) {
            int one = 1;
            ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            return fd;
        }
        const int error = errno;
        ::close(fd);
        if (error == EINTR) continue;
        if (error != EADDRNOTAVAIL && error != EAGAIN) {
            std::fprintf(stderr, "connect to 127.0.0.1:%d failed: %s\n", port, std::strerror(error));
            break;
        }
        ::usleep(50000);
    }
    std::abort();  // the server stopped listening
}

// What the server sends back: all of it, or the head of an event stream
// (which would go on as long as the connection stays open).
std::string exchange(int port, const uint8_t* data, size_t size) {
    int fd = connect_to(port);
    for (size_t sent = 0; sent < size;) {
        ssize_t n = ::send(fd, data + sent, size - sent, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;  // the server answered early and closed (a refused upload)
        sent += (size_t)n;
    }
    ::shutdown(fd, SHUT_WR);
    std::string reply;
    char buf[1 << 14];
    for (;;) {
        ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        reply.append(buf, (size_t)n);
        if (reply.find("text/event-stream") != std::string::npos) break;
    }
    ::close(fd);
    return reply;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string reply = exchange(server().port(), data, size);
    while (reply.rfind("HTTP/1.1 1", 0) == 0 && reply.find("\r\n\r\n") != std::string::npos)
        reply.erase(0, reply.find("\r\n\r\n") + 4);  // an interim 100 Continue: the status that counts follows
    if (reply.empty()) return 0;  // closed quietly: not a whole request
    if (reply.rfind("HTTP/1.1 ", 0) != 0 || reply.size() < 12) std::abort();
    const int status = std::atoi(reply.c_str() + 9);
    if (status < 100 || (status >= 500 && status != 503)) std::abort();
    const std::string request((const char*)data, size);
    const bool post = request.rfind("POST", 0) == 0;
    if (post && status < 300 && request.find(kToken) == std::string::npos) std::abort();
    if (reply.find(kSecret) != std::string::npos) std::abort();
    return 0;
}
