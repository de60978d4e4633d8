#include "session/webhook.h"

#include <civetweb.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <chrono>
#include <stdexcept>

namespace hlat::session {

Webhook::Webhook(const std::string& url, std::string run_name) : run_name_(std::move(run_name)) {
    const std::string scheme = "http://";
    if (url.rfind(scheme, 0) != 0) throw std::runtime_error(fmt::format("webhook {} is not an http:// URL", url));
    std::string rest = url.substr(scheme.size());
    size_t slash = rest.find('/');
    std::string authority = rest.substr(0, slash);
    path_ = slash == std::string::npos ? "/" : rest.substr(slash);
    size_t colon = authority.rfind(':');
    host_ = authority.substr(0, colon);
    if (colon != std::string::npos) {
        try {
            port_ = std::stoi(authority.substr(colon + 1));
        } catch (const std::exception&) {
            throw std::runtime_error(fmt::format("webhook {} has no valid port", url));
        }
    }
    if (host_.empty() || port_ <= 0 || port_ > 65535) throw std::runtime_error(fmt::format("webhook {} is malformed", url));
    mg_init_library(0);
    thread_ = std::thread(&Webhook::run, this);
}

Webhook::~Webhook() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
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
    nlohmann::json data = nlohmann::json::parse(a.data, nullptr, false);
    if (data.is_discarded()) data = nullptr;
    nlohmann::json body = {{"run", run_name_},      {"kind", a.kind},       {"severity", a.severity},
                           {"step", a.step},        {"message", a.message}, {"wall_time", a.wall_time},
                           {"data", data}};
    if (closed.count > 1) body["previous_episode"] = telemetry::episode_json(closed);
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(body.dump());
    cv_.notify_all();
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
        char error[256] = {0};
        std::string request = fmt::format(
            "POST {} HTTP/1.0\r\nHost: {}:{}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{}", path_,
            host_, port_, body.size(), body);
        mg_connection* conn = mg_download(host_.c_str(), port_, 0, error, sizeof error, "%s", request.c_str());
        int status = 0;
        if (conn) {
            const mg_response_info* info = mg_get_response_info(conn);
            status = info ? info->status_code : 0;
            mg_close_connection(conn);
        }
        if (status < 200 || status >= 300) {
            spdlog::warn("webhook {}:{}{} did not take the alert: {}", host_, port_, path_,
                         conn ? fmt::format("HTTP {}", status) : std::string(error));
        }
    }
}

}  // namespace hlat::session
