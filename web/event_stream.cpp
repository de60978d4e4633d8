#include "web/event_stream.h"

#include "telemetry/reader.h"
#include "telemetry/untrusted_text.h"
#include "web/http_connection.h"
#include "web/json_reply.h"
#include "web/server_core.h"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <array>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <sstream>
#include <vector>

namespace hlat::web {

namespace net = boost::asio;
using Clock = std::chrono::steady_clock;

// What one stream has sent so far; read and advanced on the stream pool only,
// one poll at a time.
struct StreamState {
    std::unique_ptr<telemetry::Reader> reader;
    telemetry::RunRecord run;
    std::vector<std::string> keys;
    std::map<std::string, int64_t> last;  // key -> last step sent
    int64_t newest_alert = 0;  // id of the newest alert sent or there at the opening
    std::string status;
    Clock::time_point last_sent = Clock::now();

    struct Poll {
        std::string text;  // events to send, "" for none
        bool end = false;  // the stream ends after it
    };
    Poll poll();

  private:
    void add_event(std::string& out, const char* kind, const nlohmann::json& data) const {
        out += fmt::format("event: {}\ndata: {}\n\n", kind, telemetry::safe_dump(data));
    }
    void new_points(std::string& out);
    void new_alerts(std::string& out);
};

std::variant<Response, std::shared_ptr<StreamState>> open_stream(const std::string& store, const Request& r,
                                                                 const std::string& name) {
    auto s = std::make_shared<StreamState>();
    try {
        check_request_text(r);
        if (!telemetry::valid_utf8(name)) throw BadRequest("the run name is not valid UTF-8");
        s->reader = std::make_unique<telemetry::Reader>(store);
        auto run = s->reader->find_run(name);
        if (!run) return error(404, fmt::format("no run named {}", telemetry::excerpt(name, 100)));
        s->run = *run;
        s->status = run->status;
        auto q = r.query.find("keys");
        std::stringstream ks(q == r.query.end() ? "loss" : q->second);
        for (std::string k; std::getline(ks, k, ',');)
            if (!k.empty()) s->keys.push_back(k);
        if (s->keys.empty() || s->keys.size() > 64) throw BadRequest("keys must name 1 to 64 metric keys");
        for (const std::string& k : s->keys) telemetry::check_name(k, "metric key");
        const int64_t kNone = std::numeric_limits<int64_t>::min();
        const int64_t after = int_param(r, "after", kNone, -1, std::numeric_limits<int64_t>::max() / 2);
        for (const std::string& k : s->keys)
            s->last[k] = after != kNone ? after : s->reader->last_step(s->run.id, k).value_or(-1);
        s->newest_alert = s->reader->newest_alert_id(s->run.id);
    } catch (const BadRequest& e) {
        return error(400, e.what());
    } catch (const std::invalid_argument& e) {  // a key that is no key name
        return error(400, e.what());
    } catch (const std::exception& e) {
        return error(500, e.what());
    }
    return s;
}

StreamState::Poll StreamState::poll() {
    Poll p;
    try {
        new_points(p.text);
        new_alerts(p.text);
        auto now = reader->find_run(run.name);
        if (now && now->status != status) add_event(p.text, "status", {{"status", status = now->status}});
    } catch (const std::exception& e) {
        add_event(p.text, "error", {{"error", e.what()}});
        p.end = true;
    }
    // A comment every 10 s keeps proxies from closing a quiet stream.
    if (p.text.empty() && Clock::now() - last_sent > std::chrono::seconds(10)) p.text = ": keepalive\n\n";
    if (!p.text.empty()) last_sent = Clock::now();
    return p;
}

void StreamState::new_points(std::string& out) {
    const int64_t end = std::numeric_limits<int64_t>::max() / 2;
    for (const std::string& k : keys) {
        // The newest 5,000 only (a stream opened with after=-1 read every stored point to keep these).
        auto points = reader->series_newest(run.id, k, last[k] + 1, end, 5000);
        if (points.empty()) continue;
        nlohmann::json rows = nlohmann::json::array();
        for (const auto& p : points)
            rows.push_back({p.step, json_number(p.value), p.wall_time});  // Inf as "inf", as the series reply has it
        last[k] = points.back().step;
        add_event(out, "points", {{"key", k}, {"points", rows}});
    }
}

void StreamState::new_alerts(std::string& out) {
    for (const auto& a : reader->alerts_after(run.id, &newest_alert))
        add_event(out, "alert", {{"kind", a.kind}, {"severity", a.severity}, {"step", a.step}, {"message", a.message}});
}

namespace {

// The event loop's side of one stream: everything here runs on the loop.
class EventStream : public std::enable_shared_from_this<EventStream> {
  public:
    EventStream(net::ip::tcp::socket socket, ServerCore& core, std::shared_ptr<StreamState> state)
        : socket_(std::move(socket)), timer_(core.loop), core_(core), state_(std::move(state)) {}

    void start() {
        write(reply_head(200, "text/event-stream", "") + "retry: 1000\n\n");
        watch_client();
        tick();
    }

  private:
    // A client sends nothing on a stream: a read that ends means it left.
    void watch_client() {
        socket_.async_read_some(net::buffer(peek_), [self = shared_from_this()](boost::system::error_code ec, size_t) {
            if (ec) return self->close();
            self->watch_client();
        });
    }

    void tick() {
        timer_.expires_after(std::chrono::milliseconds(100));
        timer_.async_wait([self = shared_from_this()](boost::system::error_code) {
            if (self->closed_) return;
            if (self->core_.stopping || (self->writing_ && Clock::now() - self->write_started_ > limits::kIdleTimeout))
                return self->close();
            if (!self->writing_ && !self->polling_) self->poll();
            self->tick();
        });
    }

    void poll() {
        polling_ = true;
        net::post(core_.streams, [self = shared_from_this()] {
            StreamState::Poll p = self->state_->poll();
            net::post(self->core_.loop, [self, p = std::move(p)] {
                self->polling_ = false;
                if (self->closed_) return;
                if (!p.text.empty()) self->write(p.text);
                if (p.end) self->ending_ = true;
            });
        });
    }

    void write(std::string text) {
        writing_ = true;
        write_started_ = Clock::now();
        auto pending = std::make_shared<std::string>(std::move(text));
        net::async_write(socket_, net::buffer(*pending),
                         [self = shared_from_this(), pending](boost::system::error_code ec, size_t) {
                             self->writing_ = false;
                             if (ec || self->ending_) self->close();
                         });
    }

    void close() {
        if (closed_) return;
        closed_ = true;
        boost::system::error_code ignored;
        socket_.shutdown(net::ip::tcp::socket::shutdown_both, ignored);
        socket_.close(ignored);
        timer_.cancel();
        core_.open_streams--;
    }

    net::ip::tcp::socket socket_;
    net::steady_timer timer_;
    ServerCore& core_;
    std::shared_ptr<StreamState> state_;
    std::array<char, 256> peek_{};
    bool writing_ = false, polling_ = false, ending_ = false, closed_ = false;
    Clock::time_point write_started_;
};

}  // namespace

void run_event_stream(net::ip::tcp::socket socket, ServerCore& core, std::shared_ptr<StreamState> state) {
    std::make_shared<EventStream>(std::move(socket), core, std::move(state))->start();
}

}  // namespace hlat::web
