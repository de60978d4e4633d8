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
    // The last stored step is held open like a batch's last (a feeder may
    // have stopped mid-step); its alerts are in the store already.
    std::optional<StepRecord> last;
    for_each_stored_record(stored, run.id, [&](const StepRecord& r) {
        watched_ = true;
        if (last) suite_.observe(*last);
        last = r;
    });
    if (!last) return;
    open_ = OpenStep{*last, suite_.state(), {}};
    for (const telemetry::Alert& a : stored.alerts(run.id))
        if (a.step == last->step) open_->raised.insert(a.kind);
    suite_.observe(*last);
}

RunMonitor::~RunMonitor() = default;

std::vector<Fired> RunMonitor::ingest(std::vector<telemetry::MetricPoint> points, std::vector<telemetry::Event> events) {
    std::vector<Fired> fired = observe(records_from(points, events));
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

// The records through the detectors, the open step continued if the first
// record is more of it.
std::vector<Fired> RunMonitor::observe(std::vector<StepRecord> records) {
    std::vector<Fired> fired;
    if (records.empty()) return fired;
    watched_ = true;
    std::set<std::string> raised;
    if (open_ && records.front().step == open_->record.step) {
        suite_.restore(open_->before);
        merge_step(open_->record, records.front());
        records.front() = open_->record;
        raised = std::move(open_->raised);
    }
    for (size_t i = 0; i < records.size(); i++) {
        bool last = i + 1 == records.size();
        nlohmann::json before = last ? suite_.state() : nlohmann::json();
        if (i > 0) raised.clear();
        for (Fired& f : suite_.observe(records[i]))
            if (raised.insert(f.alert.kind).second) fired.push_back(std::move(f));
        if (last) open_ = OpenStep{records[i], std::move(before), std::move(raised)};
    }
    return fired;
}

}  // namespace hlat::detectors
