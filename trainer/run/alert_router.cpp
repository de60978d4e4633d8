#include "trainer/run/alert_router.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace hlat {

AlertRouter::AlertRouter(RunRecorder& recorder, const std::string& webhook_url, const std::string& run_name,
                         bool root)
    : recorder_(recorder), root_(root) {
    if (!webhook_url.empty() && root) webhook_ = std::make_unique<detectors::Webhook>(webhook_url, run_name);
}

void AlertRouter::raise(telemetry::Alert alert, detectors::Policy policy) {
    if (!root_) return;
    alert.wall_time = telemetry::now_seconds();
    bool halt = policy == detectors::Policy::Halt;
    auto level = alert.severity == "critical" ? spdlog::level::err : spdlog::level::warn;
    spdlog::log(level, "ALERT {} at step {}: {}{}", alert.kind, alert.step, alert.message, halt ? " -> halting" : "");
    recorder_.alert(alert);
    if (webhook_) webhook_->post(alert);
    if (halt && halt_reason_.empty())
        halt_reason_ = fmt::format("{} at step {}: {}", alert.kind, alert.step, alert.message);
}

}  // namespace hlat
