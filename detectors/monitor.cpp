#include "detectors/monitor.h"

#include "detectors/replay.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

namespace hlat::detectors {

DetectorsConfig detectors_of(const telemetry::RunRecord& run) {
    nlohmann::json config = nlohmann::json::parse(run.config, nullptr, false);
    if (config.is_object() && config.contains("detectors")) return detectors_from_json(config["detectors"]);
    return {};
}

RunMonitor::RunMonitor(telemetry::Writer& writer, telemetry::Reader& stored, const telemetry::RunRecord& run)
    : writer_(writer), run_(run.id), suite_(detectors_of(run), source_of(run)) {
    DetectorsConfig config = detectors_of(run);
    if (!config.webhook.empty()) webhook_ = std::make_unique<Webhook>(config.webhook, run.name);
    for_each_stored_record(stored, run.id, [&](const StepRecord& r) {
        watched_ = true;
        suite_.observe(r);
    });
}

RunMonitor::~RunMonitor() = default;

std::vector<Fired> RunMonitor::ingest(std::vector<telemetry::MetricPoint> points, std::vector<telemetry::Event> events) {
    std::vector<Fired> fired;
    for (const StepRecord& r : records_from(points, events)) {
        watched_ = true;
        for (Fired& f : suite_.observe(r)) fired.push_back(std::move(f));
    }
    if (!points.empty()) writer_.metrics(run_, std::move(points));
    for (telemetry::Event& e : events) writer_.event(run_, std::move(e));
    for (Fired& f : fired) {
        f.alert.wall_time = telemetry::now_seconds();
        bool halt = f.policy == Policy::Halt;
        spdlog::log(f.alert.severity == "critical" ? spdlog::level::err : spdlog::level::warn,
                    "ALERT {} at step {}: {}{}", f.alert.kind, f.alert.step, f.alert.message,
                    halt ? " -> halt requested" : "");
        writer_.alert(run_, f.alert);
        if (webhook_) webhook_->post(f.alert);
        if (halt && halt_reason_.empty()) {
            halt_reason_ = fmt::format("detector {} at step {}: {}", f.alert.kind, f.alert.step, f.alert.message);
            writer_.request_halt(run_, halt_reason_);
        }
    }
    return fired;
}

}  // namespace hlat::detectors
