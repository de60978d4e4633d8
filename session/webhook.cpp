#include "session/webhook.h"

#include "detectors/config.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <cctype>
#include <chrono>
#include <stdexcept>

namespace hlat::session {

namespace {

constexpr std::chrono::milliseconds kDeadline{10000};
constexpr int kTries = 3;
constexpr std::chrono::seconds kFirstWait{1};  // then 4x that
constexpr std::chrono::seconds kDrain{5};      // what the run's end waits for the queue, at most

}  // namespace

// The run page's address: page + /static/run.html?run=NAME, the name
// percent-encoded (RFC 3986's unreserved characters kept).
static std::string run_link(std::string page, const std::string& run) {
    if (page.empty()) return "";
    while (!page.empty() && page.back() == '/') page.pop_back();
    std::string encoded;
    for (unsigned char c : run)
        encoded += std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ? std::string(1, (char)c)
                                                                                  : fmt::format("%{:02X}", c);
    return page + "/static/run.html?run=" + encoded;
}

Webhook::Webhook(const std::string& url, std::string run_name, const std::string& format, const std::string& ca_file,
                 const std::string& page)
    : target_(parse_post_url(url)),
      shown_(detectors::redacted_webhook(url)),
      run_name_(std::move(run_name)),
      format_(format),
      link_(run_link(page, run_name_)) {
    if (format_ != "json" && format_ != "slack" && format_ != "discord")
        throw std::runtime_error(fmt::format("webhook format \"{}\" is not json, slack or discord", format_));
    target_.ca_file = ca_file;
    thread_ = std::thread(&Webhook::run, this);
}

Webhook::~Webhook() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
        drain_until_ = std::chrono::steady_clock::now() + kDrain;
    }
    cv_.notify_all();
    thread_.join();
}

// One post per alert episode (telemetry/alert_episodes.h): a run that goes
// NaN for 600 steps pages someone once. The post that opens an episode of a
// kind says how the one before it of that kind ended.
void Webhook::post(const telemetry::Alert& a) {
    telemetry::AlertEpisode closed;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!episodes_.add(a, &closed)) return;
    }
    std::string body = payload(a, closed);
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(body));
    cv_.notify_all();
}

// hlat's JSON (every field), or the one line a chat shows: Slack's incoming
// webhooks take {"text"} (mrkdwn), Discord's {"content"} (at most 2,000
// characters).
std::string Webhook::payload(const telemetry::Alert& a, const telemetry::AlertEpisode& closed) const {
    if (format_ == "json") {
        nlohmann::json data = nlohmann::json::parse(a.data, nullptr, false);
        if (data.is_discarded()) data = nullptr;
        nlohmann::json body = {{"run", run_name_},      {"kind", a.kind},       {"severity", a.severity},
                               {"step", a.step},        {"message", a.message}, {"wall_time", a.wall_time},
                               {"data", data}};
        if (closed.count > 1) body["previous_episode"] = telemetry::episode_json(closed);
        if (!link_.empty()) body["link"] = link_;
        return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
    std::string line = fmt::format("hlat: run {} — {} {} at step {}: {}", run_name_, a.severity, a.kind, a.step,
                                   a.message);
    if (closed.count > 1) line += fmt::format(" (the previous {} episode: {} alerts)", a.kind, closed.count);
    if (!link_.empty()) line += format_ == "slack" ? fmt::format(" <{}|open the run>", link_) : " " + link_;
    if (format_ == "discord" && line.size() > 2000) line = line.substr(0, 1997) + "...";
    const nlohmann::json body = {{format_ == "slack" ? "text" : "content", line}};
    return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void Webhook::run() {
    for (;;) {
        std::string body;
        {
            std::unique_lock<std::mutex> lock(mutex_);
            cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
            if (queue_.empty()) return;
            body = std::move(queue_.front());
            queue_.pop_front();
        }
        deliver(body);
    }
}

// Up to kTries posts, kFirstWait then 4x that apart; once the run has ended,
// one post within what is left of kDrain, so a dead endpoint holds the run's
// end (a finish request, a server's shutdown) that long at most.
void Webhook::deliver(const std::string& body) {
    std::chrono::seconds wait = kFirstWait;
    PostResult r;
    for (int attempt = 1; attempt <= kTries; attempt++) {
        std::chrono::milliseconds deadline = kDeadline;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (stop_) {
                auto left = std::chrono::duration_cast<std::chrono::milliseconds>(drain_until_ -
                                                                                  std::chrono::steady_clock::now());
                if (left.count() <= 0) {
                    r = {0, "the run ended and the webhook had not answered within 5 s"};
                    break;
                }
                deadline = std::min(deadline, left);
            }
        }
        r = post_json(target_, body, deadline);
        if (r.status >= 200 && r.status < 300) return;
        std::unique_lock<std::mutex> lock(mutex_);
        if (stop_ || attempt == kTries) break;  // at the end of the run: once, no waiting
        cv_.wait_for(lock, wait, [&] { return stop_; });
        wait *= 4;
    }
    spdlog::warn("webhook {} did not take the alert: {}", shown_,
                 r.status ? fmt::format("HTTP {}", r.status) : r.error);
}

}  // namespace hlat::session
