// Alerts as JSON POSTs to a webhook URL (http://host:port/path), sent from a
// background thread so a slow or dead endpoint never stalls training. The
// destructor waits up to a few seconds for what is queued, so the alert that
// halts a run still goes out.
#pragma once

#include "telemetry/alert_episodes.h"
#include "telemetry/records.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

namespace hlat::session {

class Webhook {
  public:
    // Throws std::runtime_error for a URL that is not http://host:port/path.
    Webhook(const std::string& url, std::string run_name);
    ~Webhook();
    void post(const telemetry::Alert& alert);

  private:
    void run();
    std::string host_, path_, run_name_;
    telemetry::EpisodeTracker episodes_;  // under mutex_
    int port_ = 80;
    mutable std::mutex mutex_;
    std::condition_variable cv_;
    std::deque<std::string> queue_;
    bool stop_ = false;
    std::thread thread_;
};

}  // namespace hlat::session
