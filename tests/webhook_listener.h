// A webhook endpoint for tests: civetweb on 127.0.0.1 at a free port,
// keeping the body of every POST to /hook.
#pragma once

#include "web/server.h"

#include <civetweb.h>
#include <fmt/format.h>

#include <mutex>
#include <string>
#include <vector>

namespace hlat::test {

// A webhook listener on 127.0.0.1 that keeps every body it is sent.
struct WebhookListener {
    static int handle(mg_connection* conn, void* self) {
        auto* l = static_cast<WebhookListener*>(self);
        std::string body;
        char buf[4096];
        int n;
        while ((n = mg_read(conn, buf, sizeof buf)) > 0) body.append(buf, n);
        {
            std::lock_guard<std::mutex> lock(l->mutex);
            l->bodies.push_back(body);
        }
        static const char reply[] = "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        mg_write(conn, reply, sizeof reply - 1);
        return 204;
    }
    WebhookListener() {
        mg_init_library(0);
        for (int attempt = 0; attempt < 5 && !ctx; attempt++) {
            port = web::free_loopback_port();
            std::string ports = fmt::format("127.0.0.1:{}", port);
            const char* options[] = {"listening_ports", ports.c_str(), "num_threads", "2", nullptr};
            ctx = mg_start(nullptr, nullptr, options);
        }
        if (ctx) mg_set_request_handler(ctx, "/hook", &WebhookListener::handle, this);
        else port = 0;
    }
    ~WebhookListener() {
        if (ctx) mg_stop(ctx);
    }
    mg_context* ctx = nullptr;
    int port = 0;
    std::mutex mutex;
    std::vector<std::string> bodies;
};

}  // namespace hlat::test
