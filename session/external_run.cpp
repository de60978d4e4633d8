#include "session/external_run.h"

#include "telemetry/clock.h"
#include "telemetry/log_text.h"

#include <fmt/format.h>

namespace hlat::session {

using nlohmann::json;

namespace {

// The plan's fields a trainer acts on, as every door gives them.
json rewind_fields(const json& plan) {
    if (!plan.is_object()) return nullptr;
    json out = json::object();
    for (const char* key : {"restart_at_or_before", "skip_batch_ids", "skip_steps", "alert_step", "max_rewinds"})
        if (plan.contains(key)) out[key] = plan[key];
    return out;
}

// The plan of a rewind_skip halt: from the run's newest "rewind" event since
// its latest start or restart (an older one was answered by that restart).
json stored_rewind_plan(telemetry::Reader& reader, int64_t run) {
    json plan;
    for (const telemetry::Event& e : reader.events(run)) {
        if (e.kind == "start" || e.kind == "restart") plan = nullptr;
        else if (e.kind == "rewind") plan = json::parse(e.detail, nullptr, false);
    }
    return rewind_fields(plan);
}

}  // namespace

telemetry::RunRecord external_run_record(const ExternalStart& start) {
    telemetry::RunRecord r;
    r.name = start.name;
    r.source = start.source;
    r.config = start.config.dump();
    r.precision = telemetry::precision_name(start.precision);
    r.started_at = start.started_at > 0 ? start.started_at : telemetry::now_seconds();
    json meta = start.meta.is_object() ? start.meta : json::object();
    meta["halt"] = start.halt;
    if (start.halt == "signal") meta["halt_pid"] = start.halt_pid, meta["halt_signal"] = start.halt_signal;
    if (meta.contains("git_revision") && meta["git_revision"].is_string())  // what the client found at init
        r.git_revision = meta["git_revision"].get<std::string>().substr(0, 64);
    r.meta = meta.dump(-1, ' ', false, json::error_handler_t::replace);
    r.host = start.host;
    return r;
}

std::optional<std::string> halt_route(const telemetry::RunRecord& run) {
    if (run.source == "hlat") return "the trainer halts after its current step and saves a checkpoint";
    json meta = json::parse(run.meta, nullptr, false);
    std::string how = meta.is_object() ? meta.value("halt", "") : "";
    if (how == "client")
        return "the client raises hlat.HaltRequested at the next log() or should_stop() of every rank";
    if (how == "exit") return "hlat ingest --follow stops and exits with code 3 for its wrapper to stop the trainer";
    if (how == "signal")
        return fmt::format("hlat ingest --follow sends signal {} to process {}", meta.value("halt_signal", 15),
                           meta.value("halt_pid", 0));
    return std::nullopt;
}

json HaltAnswer::to_json() const {
    json out = {{"by", by_detector ? "detector" : "person"}, {"reason", reason}};
    if (!rewind.is_null()) out["rewind"] = rewind;
    return out;
}

std::optional<HaltAnswer> pending_halt(telemetry::Reader& reader, int64_t run) {
    std::optional<std::string> who = reader.pending_halt(run);
    if (!who) return std::nullopt;
    HaltAnswer answer{*who, who->rfind("detector", 0) == 0, nullptr};
    if (answer.by_detector) answer.rewind = stored_rewind_plan(reader, run);
    return answer;
}

std::optional<HaltAnswer> take_halt(RunSession& session, int64_t step) {
    HaltAnswer answer{session.halt_reason(), true, nullptr};
    if (std::optional<std::string> who = session.poll_halt_request(); answer.reason.empty() && who)
        answer = {"requested by " + *who, false, nullptr};
    if (answer.reason.empty()) return std::nullopt;
    if (answer.by_detector) answer.rewind = rewind_fields(session.rewind_plan());
    session.halt(step, answer.reason);
    session.flush();
    return answer;
}

}  // namespace hlat::session
