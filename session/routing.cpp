// The session's routing: each alert to every place it goes, once (the log,
// the store, which the page's live stream reads, the webhook, the caller's
// sink, and a halt), with its flight-recorder window and attribution; the
// rewind plan a rewind_skip halt leaves; and alerts judged after the fact
// from the store (`hlat detect --save`) routed as online ones are.
#include "session/moved_first.h"
#include "session/run_session.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

namespace hlat::session {

using telemetry::now_seconds;

// One alert to every place it goes, once. The first halting one files a halt
// request in the store (what the HTTP reply, the page and a follower read),
// unless it answers one (`halt_reason` given).
void RunSession::route(Fired& f, const std::string& halt_reason) {
    telemetry::Alert& a = f.alert;
    a.wall_time = source_time(a.step);
    attach_window(a);
    if (annotate_) annotate_(a);
    const bool rewind = f.policy == detectors::Policy::RewindSkip && options_.halts;
    const bool halt = (f.policy == detectors::Policy::Halt || rewind) && options_.halts;
    const bool note = a.severity == "info";  // a one-step outlier, a trainer's info alert: stored and drawn, not pushed
    const bool quiet = note && !halt;         // a note that rewinds is said as loudly as an alert
    spdlog::log(a.severity == "critical" ? spdlog::level::err : quiet ? spdlog::level::info : spdlog::level::warn,
                "{} {} at step {}: {}{}", quiet ? "note" : "ALERT", a.kind, a.step, a.message, halt ? " -> halt" : "");
    if (writer_) writer_->alert(run_.id, a);
    if (webhook_ && !note && options_.notify) webhook_->post(a);
    if (options_.on_alert) options_.on_alert(a);
    if (!halt || !halt_reason_.empty()) return;
    if (!halt_reason.empty()) {
        halt_reason_ = halt_reason;
        return;
    }
    halt_reason_ = fmt::format("detector {} at step {}: {}", a.kind, a.step, a.message);
    if (rewind) plan_rewind(a);
    if (writer_) writer_->request_halt(run_.id, halt_reason_);
}

// The first step whose batch a rewind skips: skip_steps - 1 before the
// alert's, or where its episode began if the alert says (a loss that jumped
// and stayed up: loss_jump's since_step).
static int64_t first_skipped_step(const telemetry::Alert& a, int skip_steps) {
    int64_t first = a.step - skip_steps + 1;
    nlohmann::json data = nlohmann::json::parse(a.data, nullptr, false);
    if (data.is_object() && data.contains("since_step") && data["since_step"].is_number_integer())
        first = std::min(first, data["since_step"].get<int64_t>());
    return std::max<int64_t>(0, first);
}

// rewind_skip: the steps whose batches are skipped, their batches as the
// source recorded them, and the newest step a restart may start from (at or
// before the first skipped step: a batch trained before the checkpoint
// cannot be untrained by skipping it). Stored as a "rewind" event before the
// halt request, so whoever answers the halt finds the plan.
void RunSession::plan_rewind(const telemetry::Alert& a) {
    nlohmann::json steps = nlohmann::json::array(), batches = nlohmann::json::array(), ids = nlohmann::json::array();
    const int64_t first = first_skipped_step(a, rewind_config_.skip_steps);
    for (int64_t s = first; s <= a.step; s++) steps.push_back(s);
    std::set<long> indices;
    std::set<std::string> id_set;
    for (const telemetry::BatchRecord& b : recent_batches_) {
        if (b.step > a.step || b.step < first) continue;
        nlohmann::json data = nlohmann::json::parse(b.data, nullptr, false);
        if (!data.is_object()) continue;
        if (data.contains("sequences"))
            for (const auto& seq : data["sequences"])
                if (seq.is_array() && seq.size() > 3 && seq[3].is_number_integer()) indices.insert(seq[3].get<long>());
        if (data.contains("ids"))
            for (const auto& id : data["ids"])
                if (id.is_string()) id_set.insert(id.get<std::string>());
    }
    for (long i : indices) batches.push_back(i);
    for (const std::string& id : id_set) ids.push_back(id);
    rewind_plan_ = {{"alert_step", a.step},
                    {"kind", a.kind},
                    {"restart_at_or_before", std::max<int64_t>(0, first - rewind_config_.min_steps_back)},
                    {"skip_steps", steps},
                    {"skip_batches", batches},
                    {"skip_batch_ids", ids},
                    {"max_rewinds", rewind_config_.max_rewinds}};
    store_event({"rewind", a.step, now_seconds(), rewind_plan_.dump()});
}

// The flight recorder's steps go to the store (those its sampling left out),
// and the alert's data says which steps they are.
void RunSession::attach_window(telemetry::Alert& a) {
    nlohmann::json moved = moved_first(flight_recorder_, a.step, [&](const std::string& key) {
        auto it = labels_.find(key);
        return it == labels_.end() ? nullptr : it->second;
    });
    std::optional<FlightRecorder::Window> w = flight_recorder_.take_window();
    if (!w) return;
    if (writer_ && !w->unstored.empty()) writer_->vectors(run_.id, std::move(w->unstored));
    nlohmann::json data = nlohmann::json::parse(a.data, nullptr, false);
    if (!data.is_object()) data = nlohmann::json::object();
    data["flight_recorder"] = {{"first_step", w->first_step}, {"last_step", w->last_step}};
    if (!moved.is_null()) data["attribution"]["moved_first"] = moved;
    a.data = data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void RunSession::batch(telemetry::BatchRecord batch, std::vector<telemetry::DocumentRecord> documents) {
    if (batch.wall_time == 0.0) batch.wall_time = now_seconds();
    recent_batches_.push_back(batch);
    while (recent_batches_.size() > 64) recent_batches_.pop_front();
    if (writer_) writer_->batch(run_.id, std::move(batch), std::move(documents));
}

telemetry::Alert RunSession::raise(telemetry::Alert alert, detectors::Policy policy, const std::string& reason) {
    Fired f{std::move(alert), policy};
    route(f, reason);
    return f.alert;
}

// The flight recorder as it stood when the alert at `step` was raised: the
// statistics the store holds in its window (a run trained online stored its
// alerts' windows whole), none of them to be stored again.
void RunSession::recall_window(telemetry::Reader& reader, int64_t step) {
    flight_recorder_ = FlightRecorder(flight_recorder_steps_, 1);
    const int64_t first = std::max<int64_t>(0, step - flight_recorder_steps_ + 1);
    std::vector<telemetry::VectorPoint> held;
    for (const auto& [key, labels] : labels_)
        for (telemetry::VectorPoint& p : reader.vector_series(run_.id, key, first, step)) held.push_back(std::move(p));
    std::stable_sort(held.begin(), held.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
    flight_recorder_.record(std::move(held));
}

// Dated by the step's own time, as an online alert is by its batch's clock.
void RunSession::recall_time(telemetry::Reader& reader, int64_t step) {
    source_times_.clear();
    for (const std::string& key : suite_.keys()) {
        std::vector<telemetry::SeriesPoint> at = reader.series(run_.id, key, step, step, 1);
        if (at.empty() || !(at.front().wall_time > 0)) continue;
        source_times_[step] = at.front().wall_time;
        return;
    }
}

std::vector<telemetry::Alert> RunSession::route_judged(telemetry::Reader& reader, std::vector<Fired> fired) {
    for (const std::string& key : reader.vector_keys(run_.id))
        labels_[key] = std::make_shared<const std::vector<std::string>>(reader.vector_labels(run_.id, key));
    std::stable_sort(fired.begin(), fired.end(), [](const Fired& a, const Fired& b) { return a.alert.step < b.alert.step; });
    std::vector<telemetry::Alert> routed;
    for (Fired& f : fired) {
        recall_window(reader, f.alert.step);
        recall_time(reader, f.alert.step);
        route(f);
        routed.push_back(f.alert);
    }
    source_times_.clear();
    return routed;
}

}  // namespace hlat::session
