// An external run's lifecycle, the same whichever door it comes through
// (`hlat ingest` of a log, imported or followed; the HTTP endpoints behind
// the Python client): the record it opens with, how a halt reaches its
// trainer, and the halt as its trainer is told it. Its points and its end go
// through its RunSession like any run's.
#pragma once

#include "session/run_session.h"
#include "telemetry/reader.h"
#include "telemetry/records.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace hlat::session {

struct ExternalStart {
    std::string name;
    std::string source;  // "ingest" (a log) or "client" (the HTTP endpoints)
    // How a halt reaches the trainer: "client" (the client raises
    // HaltRequested), "exit" (the follower exits 3), "signal" (the follower
    // signals halt_pid), "none".
    std::string halt = "none";
    int halt_pid = 0, halt_signal = 15;
    nlohmann::json config = nlohmann::json::object();
    nlohmann::json meta = nlohmann::json::object();  // the source's own; "halt" is added
    std::string precision;
    std::string host;          // the trainer's machine
    double started_at = 0.0;   // 0: now
};

// The run record an external run opens with.
telemetry::RunRecord external_run_record(const ExternalStart& start);

// What a halt does to the run's trainer, for the page's button; nullopt
// when nothing here can stop it.
std::optional<std::string> halt_route(const telemetry::RunRecord& run);

// A halt as the trainer is told it: who asked, why, and a rewind_skip's plan
// (restart_at_or_before, skip_steps, skip_batch_ids, alert_step, max_rewinds).
struct HaltAnswer {
    std::string reason;
    bool by_detector = false;
    nlohmann::json rewind;  // null unless rewind_skip's
    nlohmann::json to_json() const;  // {"by": "detector"|"person", "reason", "rewind"?}
};

// The halt pending for the run in the store (a detector's or a person's,
// not yet answered by a restart), for a client that polls its state.
std::optional<HaltAnswer> pending_halt(telemetry::Reader& reader, int64_t run);

// The session's halt, taken once when there is one: a halt-policy alert of
// its detectors, or a halt asked for from the page or the API (the request
// then marked handled). Writes the run's halt event at `step`.
std::optional<HaltAnswer> take_halt(RunSession& session, int64_t step);

}  // namespace hlat::session
