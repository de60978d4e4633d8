// Alerts as JSON POSTs to a webhook URL (http:// or https://; a certificate is
// checked against the system's CAs or `ca_file`), sent from a background
// thread so a slow or dead endpoint never stalls training: each post has a 10 s
// deadline and is tried 3 times (1 s, then 4 s apart) before it is given up
// with a warning that names the host, never the URL's path (a Slack or Discord
// webhook's secret). The payload is hlat's JSON, or what Slack ({"text": ...})
// or Discord ({"content": ...}) take. The destructor sends what is queued,
// once each, without waiting between tries and within 5 s in all, so the alert
// that halts a run still goes out and a dead endpoint holds the run's end 5 s
// at most.
#pragma once

#include "session/https_post.h"
#include "telemetry/alert_episodes.h"
#include "telemetry/records.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

namespace hlat::session {

class Webhook {
  public:
    // Throws std::runtime_error for a URL that is not http(s)://host[:port]/path
    // or a format other than "json", "slack", "discord".
    // page: the page's address as the team opens it ("https://hlat.example"):
    // each post then links the run's page ("link" in hlat's JSON).
    Webhook(const std::string& url, std::string run_name, const std::string& format = "json",
            const std::string& ca_file = "", const std::string& page = "");
    ~Webhook();
    void post(const telemetry::Alert& alert);

  private:
    void run();
    void deliver(const std::string& body);
    std::string payload(const telemetry::Alert& a, const telemetry::AlertEpisode& closed) const;
    PostTarget target_;
    std::string shown_;  // the URL as logs show it: scheme://host/…
    std::string run_name_, format_, link_;
    telemetry::EpisodeTracker episodes_;  // under mutex_
    mutable std::mutex mutex_;
    std::condition_variable cv_;
    std::deque<std::string> queue_;
    bool stop_ = false;
    std::chrono::steady_clock::time_point drain_until_;  // set with stop_
    std::thread thread_;
};

}  // namespace hlat::session
