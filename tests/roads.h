// The one road, checked from the outside: a run that `hlat train` stored
// online raises the same alerts (kind, step, message) when `hlat detect`
// replays it, when `hlat detect --save` stores them again in a copy of the
// store that lost them (with the same data fields: the flight recorder's
// window and the tensor that moved first), when its records are imported as
// JSONL by `hlat ingest`, and when the same records are posted to the HTTP
// ingest endpoint in batches that cut steps apart. Used by the fault tests,
// one per injected fault.
#pragma once

#include "api_requests.h"
#include "session/step_views.h"
#include "session/run_session.h"
#include "telemetry/reader.h"
#include "test_util.h"
#include "web/api.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace hlat::test {

using AlertKey = std::tuple<int64_t, std::string, std::string>;  // step, kind, message

// Sorted by step and kind: a probe before the first step reaches the session
// before that step's other points, so alerts of one step may come in another order.
inline std::vector<AlertKey> alert_keys(const std::vector<telemetry::Alert>& alerts) {
    std::vector<AlertKey> out;
    for (const telemetry::Alert& a : alerts) out.emplace_back(a.step, a.kind, a.message);
    std::sort(out.begin(), out.end());
    return out;
}

// A value as Python's json.dumps writes it (bare NaN and Infinity), which hlat ingest reads.
inline std::string json_number(double v) {
    if (std::isnan(v)) return "NaN";
    if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
    return fmt::format("{}", v);
}

// The stored run's points (every key) and its non-lifecycle events as JSONL:
// a line per step, its events on lines before it (a detector that reads an
// event's detail sees it with or before the step's values, however the lines
// are cut into batches).
inline std::string run_as_jsonl(telemetry::Reader& reader, int64_t run) {
    std::map<int64_t, std::string> lines;
    for (const std::string& key : reader.keys(run))
        for (const auto& p : reader.series(run, key, 0, std::numeric_limits<int64_t>::max()))
            lines[p.step] += fmt::format(", {}: {}", nlohmann::json(key).dump(), json_number(p.value));
    static const std::set<std::string> lifecycle = {"start", "restart", "heartbeat", "checkpoint", "stop",
                                                    "crash", "halt", "stale"};
    std::map<int64_t, std::string> events;
    for (const telemetry::Event& e : reader.events(run))
        if (!lifecycle.count(e.kind))
            events[e.step] += nlohmann::json{{"step", e.step}, {"event", e.kind}, {"detail", e.detail}}.dump() + "\n";
    std::string out;
    for (const auto& [step, fields] : lines) out += events[step] + fmt::format("{{\"step\": {}{}}}\n", step, fields);
    return out;
}

// The alert's data as a set of field paths ("flight_recorder",
// "attribution.moved_first", ...), without what only the trainer knows (the
// batch's sequences: attribution.batch, read from its data loader).
inline std::set<std::string> data_fields(const std::string& data) {
    std::set<std::string> out;
    nlohmann::json j = nlohmann::json::parse(data);
    for (const auto& [key, value] : j.items()) {
        if (key == "attribution" && value.is_object()) {
            for (const auto& [inner, ignored] : value.items())
                if (inner != "batch") out.insert("attribution." + inner);
        } else {
            out.insert(key);
        }
    }
    return out;
}

// `hlat detect --save` on a copy of the store whose run lost its alerts:
// the same alerts stored again, each with the data fields it had online.
inline void expect_saved_alerts_agree(const std::string& store, const std::string& name, const ScratchDir& scratch) {
    const std::string copy = scratch.file(name + "-saved.db");
    std::filesystem::remove(copy);
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(store.c_str(), &db), SQLITE_OK);
    const std::string vacuum = fmt::format("VACUUM INTO '{}'", copy);
    ASSERT_EQ(sqlite3_exec(db, vacuum.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    sqlite3_close(db);
    ASSERT_EQ(sqlite3_open(copy.c_str(), &db), SQLITE_OK);
    const std::string forget = fmt::format("DELETE FROM alerts WHERE run_id = (SELECT id FROM runs WHERE name = '{}')", name);
    ASSERT_EQ(sqlite3_exec(db, forget.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    sqlite3_close(db);
    CommandResult save = run_command(fmt::format("{} detect --store {} --run {} --save", HLAT_BINARY, copy, name));
    telemetry::Reader online_store(store), saved_store(copy);
    const std::vector<telemetry::Alert> online = online_store.alerts(online_store.find_run(name)->id);
    const std::vector<telemetry::Alert> saved = saved_store.alerts(saved_store.find_run(name)->id);
    EXPECT_NE(save.output.find(fmt::format("saved {} new alerts", online.size())), std::string::npos) << save.output;
    ASSERT_EQ(alert_keys(saved), alert_keys(online)) << "hlat detect --save";
    std::map<std::pair<int64_t, std::string>, std::set<std::string>> online_fields;
    for (const telemetry::Alert& a : online) online_fields[{a.step, a.kind}] = data_fields(a.data);
    for (const telemetry::Alert& a : saved)
        EXPECT_EQ(data_fields(a.data), (online_fields[{a.step, a.kind}]))
            << a.kind << " at step " << a.step << " saved as " << a.data;
}

// Checks the five roads on the stored run `name` of `store`; `scratch` holds
// the JSONL and names the two runs fed from it (NAME-ingest, NAME-http).
inline void expect_roads_agree(const std::string& store, const std::string& name, const ScratchDir& scratch) {
    SCOPED_TRACE("the five roads of run " + name);
    telemetry::Reader reader(store);
    std::optional<telemetry::RunRecord> run = reader.find_run(name);
    ASSERT_TRUE(run.has_value());
    const std::vector<AlertKey> online = alert_keys(reader.alerts(run->id));
    ASSERT_FALSE(online.empty()) << "a fault run must raise something for the comparison to mean anything";

    std::vector<telemetry::Alert> replayed;
    for (const detectors::Fired& f : session::replay_stored(reader, run->id, session::detectors_of(*run)))
        replayed.push_back(f.alert);
    EXPECT_EQ(alert_keys(replayed), online) << "hlat detect's replay";
    CommandResult detect = run_command(fmt::format("{} detect --store {} --run {}", HLAT_BINARY, store, name));
    EXPECT_NE(detect.output.find(fmt::format("{} alerts", online.size())), std::string::npos) << detect.output;
    expect_saved_alerts_agree(store, name, scratch);

    const std::string jsonl = run_as_jsonl(reader, run->id);
    std::ofstream(scratch.file(name + ".jsonl")) << jsonl;
    nlohmann::json config = nlohmann::json::parse(run->config);
    const std::string detectors = nlohmann::json{{"detectors", config.value("detectors", nlohmann::json::object())}}.dump();
    std::ofstream(scratch.file(name + "-detectors.json")) << detectors;
    CommandResult ingest = run_command(fmt::format("{} ingest --store {} --run {}-ingest --config \"$(cat {})\" {}",
                                                   HLAT_BINARY, store, name, scratch.file(name + "-detectors.json"),
                                                   scratch.file(name + ".jsonl")));
    ASSERT_EQ(ingest.exit_code, 0) << ingest.output;

    // Over HTTP in batches of 7 lines: steps and their events cut apart.
    web::Api api(store, "road-token");
    auto post = [&](const std::string& path, const std::string& body) {
        return api.handle(test::post(path, "road-token", body));
    };
    nlohmann::json start = {{"config", nlohmann::json::parse(detectors)}};
    ASSERT_EQ(post("/api/v1/runs/" + name + "-http/start", start.dump()).status, 200);
    std::string batch;
    int lines = 0;
    for (size_t at = 0, next; at < jsonl.size(); at = next) {
        next = jsonl.find('\n', at) + 1;
        batch += jsonl.substr(at, next - at);
        if (++lines % 7 == 0 || next >= jsonl.size()) {
            web::Response r = post("/api/v1/runs/" + name + "-http/ingest", batch);
            ASSERT_EQ(r.status, 200) << r.body;
            batch.clear();
        }
    }
    post("/api/v1/runs/" + name + "-http/finish", R"({"status": "finished"})");

    telemetry::Reader after(store);
    EXPECT_EQ(alert_keys(after.alerts(after.find_run(name + "-ingest")->id)), online) << "hlat ingest of the records";
    EXPECT_EQ(alert_keys(after.alerts(after.find_run(name + "-http")->id)), online) << "the HTTP endpoint";
}

}  // namespace hlat::test
