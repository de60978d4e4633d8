#include "web/api.h"

#include "session/external_run.h"

#include "web/catalogue_api.h"
#include "web/ingest_api.h"
#include "web/json_reply.h"
#include "web/heatmap_api.h"
#include "web/routes.h"
#include "web/series_api.h"

#include "detectors/config.h"
#include "report/postmortem.h"
#include "telemetry/alert_episodes.h"
#include "telemetry/ingest.h"
#include "telemetry/reader.h"
#include "telemetry/untrusted_text.h"
#include "telemetry/writer.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

namespace hlat::web {

using json = nlohmann::json;
using namespace hlat::telemetry;

namespace {

constexpr size_t kMaxReportRuns = 16;  // runs one report compares
// Alerts one reply lists, the latest: a run with tens of thousands (a noisy
// detector over a long run) made replies of megabytes, each read holding
// tens of MB while it was built.
constexpr size_t kMaxAlertsListed = 2000;
// Episodes one reply lists, the newest by last step: a run whose grad norm
// spikes every 20 steps for hours has one episode per spike (456,000 in the
// two-hour soak), and listing them all held 1.2 GB for a reply of 87 MB
// (450,000 of them; 24 MB and 0.6 MB listing 1,000).
constexpr size_t kMaxEpisodesListed = 1000;

// Run names as a request lists them: "a,b", or a JSON array of strings for
// names that hold commas (["lr=1e-3,bs=32", "b"]), as Lightning's often do.
std::vector<std::string> run_list(const std::string& text) {
    std::vector<std::string> names;
    if (!text.empty() && text.front() == '[') {
        check_json_depth(text, "runs");
        json list = json::parse(text, nullptr, false);
        if (list.is_discarded() || !list.is_array()) throw BadRequest("runs is not a JSON array of run names");
        for (const json& n : list) {
            if (!n.is_string() || n.get<std::string>().empty()) throw BadRequest("runs must list run names as strings");
            names.push_back(n.get<std::string>());
        }
        return names;
    }
    std::stringstream list(text);
    for (std::string n; std::getline(list, n, ',');)
        if (!n.empty()) names.push_back(n);
    return names;
}

json number(double v) { return json_number(v); }

// Stored JSON text (configs, alert evidence), or null when it is not JSON.
json parse_or_null(const std::string& text) {
    json j = json::parse(text, nullptr, false);
    return j.is_discarded() ? json(nullptr) : j;
}

// A pre-flight run's report (per-rank table, collectives, failures), else null.
json preflight_of(const RunRecord& run) {
    json meta = parse_or_null(run.meta);
    if (!meta.is_object() || meta.value("kind", "") != "preflight" || !meta.contains("preflight")) return nullptr;
    return meta["preflight"];
}

json run_json(const RunSummary& s) {
    return {{"name", s.run.name},
            {"status", s.run.status},
            {"precision", s.run.precision},
            {"source", s.run.source},
            {"steps", s.steps()},
            {"last_loss", number(s.last_loss)},
            {"tokens", number(s.tokens_seen)},
            {"uptime", s.uptime.wall_seconds > 0 ? json(s.uptime.ratio) : json(nullptr)},
            {"restarts", s.uptime.restarts},
            {"alerts", s.alerts},
            {"started_at", s.run.started_at},
            {"ended_at", s.run.ended_at},
            {"git_revision", s.run.git_revision},
            {"config", detectors::config_for_readers(parse_or_null(s.run.config))},
            {"halt_route", s.run.status == "running" ? json(session::halt_route(s.run).value_or("")) : json(nullptr)},
            {"tags", parse_or_null(s.run.tags)},
            {"note", s.run.note},
            {"preflight", preflight_of(s.run)}};
}

// The newest alerts (at most kMaxAlertsListed) and the newest episodes (at
// most kMaxEpisodesListed) grouped from all of them, streamed from the store:
// a run with 16,000 alerts of 10 KB each held them all in memory for every
// request (3 GB with four at once).
Response alerts_reply(Reader& reader, int64_t run) {
    const int64_t total = reader.alert_count(run);
    json out = json::array();
    for (const Alert& a : reader.latest_alerts(run, (int64_t)kMaxAlertsListed))
        out.push_back({{"kind", a.kind}, {"severity", a.severity}, {"step", a.step}, {"message", a.message},
                       {"data", parse_or_null(a.data)}, {"time", a.wall_time}});
    EpisodeBuilder builder(kMaxEpisodesListed);
    reader.for_each_alert(run, std::numeric_limits<int64_t>::min(), [&](const Alert& a) { builder.add(a); });
    json episodes = json::array();
    for (const AlertEpisode& e : builder.episodes()) episodes.push_back(episode_json(e));
    const int64_t alerts_listed = (int64_t)out.size(), episodes_listed = (int64_t)episodes.size();
    return reply(200, {{"alerts", std::move(out)}, {"total", total}, {"omitted", total - alerts_listed},
                       {"episodes", std::move(episodes)}, {"episodes_total", builder.total()},
                       {"episodes_omitted", builder.total() - episodes_listed}});
}

// A page of the run's events (offset; limit, 5,000 unless asked, at most
// 100,000), each detail cut to detail_max bytes (4,096 unless asked; 0:
// whole), and the run's uptime: a reply of at most ~20 MB unless asked.
Response events_reply(Reader& reader, int64_t run, const Request& r) {
    const int64_t offset = int_param(r, "offset", 0, 0, std::numeric_limits<int64_t>::max() / 2);
    const int64_t limit = int_param(r, "limit", 5000, 1, 100000);
    const int64_t detail_max = int_param(r, "detail_max", 4096, 0, 1 << 20);
    int64_t total = 0;
    json out = json::array();
    for (const Event& e : reader.events_page(run, offset, limit, (size_t)detail_max, &total))
        out.push_back({{"kind", e.kind}, {"step", e.step}, {"time", e.wall_time}, {"detail", e.detail}});
    const Uptime u = reader.uptime(run);
    json segments = json::array();
    for (const auto& [start, end] : u.segments) segments.push_back({start, end});
    const int64_t shown = (int64_t)out.size();
    return reply(200, {{"events", std::move(out)},
                       {"total", total},
                       {"offset", offset},
                       {"truncated", offset + shown < total},
                       {"uptime", {{"ratio", u.ratio}, {"training_seconds", u.training_seconds},
                                   {"wall_seconds", u.wall_seconds}, {"restarts", u.restarts},
                                   {"segments", std::move(segments)}}}});
}

}  // namespace

std::string new_token() {
    std::ifstream urandom("/dev/urandom", std::ios::binary);
    unsigned char bytes[16];
    urandom.read((char*)bytes, sizeof bytes);
    if (!urandom) throw std::runtime_error("cannot read /dev/urandom for the access token");
    std::string hex;
    for (unsigned char b : bytes) hex += fmt::format("{:02x}", b);
    return hex;
}

Api::Api(std::string store, std::string token)
    : store_(store), token_(std::move(token)), ingest_(std::make_unique<IngestEndpoints>(store)) {}
Api::~Api() = default;

std::string whole_body(Response& r) {
    std::string out = std::move(r.body);
    if (r.more)
        while (auto piece = r.more()) out += *piece;
    r.more = nullptr;
    return out;
}

int Api::mark_stale(double after_seconds) { return ingest_->mark_stale(after_seconds); }

Response Api::handle(const Request& r) {
    try {
        check_request_text(r);
        const RouteMatch m = match_route(r.method, r.path);
        if (!m.route) return error(404, "no such endpoint: " + excerpt(r.path, 100));
        if (m.wrong_method) return error(405, std::string("use ") + m.route->method);
        if (m.route->token && !authorized(r.token))
            return error(401, "this changes state: send the token `hlat serve` printed, as X-HLAT-Token");
        switch (m.route->id) {
            case RouteId::Runs: {
                Reader reader(store_);
                json runs = json::array();
                for (const RunSummary& s : reader.runs()) runs.push_back(run_json(s));
                return reply(200, {{"runs", runs}});
            }
            case RouteId::Health: return health();
            case RouteId::Report: return report(r);
            case RouteId::Catalogue: return catalogue_reply(r);
            case RouteId::Stream:  // a connection's, never an in-process reply
                return error(404, "an event stream is served on hlat serve's connections only");
            case RouteId::Start: return ingest_->start(m.run, r.body);
            case RouteId::Ingest: return ingest_->ingest(m.run, r.body);
            case RouteId::Finish: return ingest_->finish(m.run, r.body);
            case RouteId::State: return ingest_->state(m.run);
            default: return handle_run(r, *m.route, m.run);
        }
    } catch (const BadRequest& e) {
        return error(400, e.what());
    } catch (const IngestError& e) {
        return error(400, e.what());
    } catch (const std::invalid_argument& e) {  // a bad name, a document nested too deep
        return error(400, e.what());
    } catch (const json::exception& e) {  // a field of the wrong type ("type must be number, but is string")
        return error(400, e.what());
    } catch (const StoreError& e) {  // a store that may come back (locked, full) is a 503: try again later
        return error(e.transient() ? 503 : 500, e.what());
    } catch (const std::exception& e) {
        return error(500, e.what());
    }
}

// Whether the store takes writes, from what the writer last found (a store
// not written yet is ok: nothing has failed). 503 while it fails, so that a
// probe needs only the status.
Response Api::health() {
    const Writer* w = ingest_->open_writer();
    const WriterHealth h = w ? w->health() : WriterHealth{};
    if (h.ok) return reply(200, {{"store", "ok"}});
    return reply(503, {{"store", "failing"},
                       {"error", h.error},
                       {"since", h.since},
                       {"queued_rows", h.queued_rows},
                       {"retrying", h.retrying}});
}

// A person's tags and note on a run: {"tags": ["a", ...], "note": "..."}; what
// the body leaves out stays as it was.
Response Api::annotate(const RunRecord& run, const std::string& body) {
    check_json_depth(body, "the body");
    json j = json::parse(body, nullptr, false);
    if (j.is_discarded() || !j.is_object()) throw BadRequest("the body is not a JSON object");
    json tags = j.contains("tags") ? j["tags"] : json::parse(run.tags, nullptr, false);
    if (!tags.is_array() || tags.size() > 32) throw BadRequest("tags must be an array of at most 32 strings");
    for (const json& t : tags) {
        const std::string tag = t.is_string() ? t.get<std::string>() : "";
        if (tag.empty() || utf8_characters(tag) > 64 || has_control(tag, false))
            throw BadRequest("each tag must be a string of 1 to 64 characters, none of them a control character");
    }
    json note = j.contains("note") ? j["note"] : json(run.note);
    if (!note.is_string() || utf8_characters(note.get<std::string>()) > 10000 || has_control(note.get<std::string>(), true))
        throw BadRequest("note must be a string of at most 10,000 characters, with no control character but line "
                         "breaks and tabs");
    ingest_->writer().annotate(run.id, tags.dump(), note.get<std::string>());
    return reply(200, {{"run", run.name}, {"tags", tags}, {"note", note}});
}

// The post-mortem of `hlat compare --out`, the same HTML, for the runs named
// (each once: a name repeated 200 times took 10.7 s).
Response Api::report(const Request& r) {
    auto runs = r.query.find("runs");
    std::vector<std::string> names;
    for (const std::string& n : run_list(runs == r.query.end() ? std::string() : runs->second))
        if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
    if (names.empty()) throw BadRequest("parameter runs (run names, comma-separated or a JSON array) is required");
    if (names.size() > kMaxReportRuns)
        throw BadRequest(fmt::format("a report compares at most {} runs; it names {}", kMaxReportRuns, names.size()));
    Reader reader(store_);
    for (const std::string& n : names)
        if (!reader.find_run(n)) return error(404, fmt::format("no run named {}", excerpt(n, 100)));
    auto postmortems = report::postmortem(reader, names);
    return {200, "text/html; charset=utf-8",
            report::postmortem_html(postmortems, report::config_differences(reader, names))};
}

// A route on a stored run: 404 when there is no run of that name.
Response Api::handle_run(const Request& r, const Route& route, const std::string& name) {
    Reader reader(store_);
    auto run = reader.find_run(name);
    if (!run) return error(404, fmt::format("no run named {}", excerpt(name, 100)));
    switch (route.id) {
        case RouteId::Halt: return halt(r, *run);
        case RouteId::Keys: return keys_reply(reader, run->id, r);
        case RouteId::RankKeys: return reply(200, {{"keys", reader.rank_keys(run->id)}});
        case RouteId::RankSeries: return rank_series_reply(reader, run->id, r);
        case RouteId::Series: return series_reply(reader, run->id, r);
        case RouteId::Heatmap: return heatmap_reply(reader, run->id, r);
        case RouteId::Episodes: return episodes_reply(reader, run->id, r);
        case RouteId::Csv: return csv_reply(store_, run->id, r);
        case RouteId::Annotate: return annotate(*run, r.body);
        case RouteId::Alerts: return alerts_reply(reader, run->id);
        case RouteId::Events: return events_reply(reader, run->id, r);
        case RouteId::Checkpoints: {
            json out = json::array();
            for (const CheckpointRecord& c : reader.checkpoints(run->id))
                out.push_back({{"step", c.step}, {"path", c.path}, {"time", c.wall_time}});
            return reply(200, {{"checkpoints", out}});
        }
        case RouteId::Evals: {
            json out = json::array();
            for (const EvalRecord& e : reader.evals(run->id))
                out.push_back({{"step", e.step}, {"tokens", e.tokens}, {"task", e.task}, {"metric", e.metric},
                               {"value", number(e.value)}, {"time", e.wall_time}});
            return reply(200, {{"evals", out}});
        }
        default: return error(404, "no such endpoint: " + excerpt(r.path, 100));
    }
}

// Asks a running run's trainer to halt, through whatever reaches it (409 when nothing does).
Response Api::halt(const Request& r, const RunRecord& run) {
    if (run.status != "running") return error(409, fmt::format("run \"{}\" is {}, not running", run.name, run.status));
    std::optional<std::string> route = session::halt_route(run);
    if (!route)
        return error(409, fmt::format("run \"{}\" is imported from a log that nothing here can stop: halt its "
                                      "trainer by hand, or follow the log with `hlat ingest --follow --on-halt`",
                                      run.name));
    Writer& w = ingest_->writer();
    w.request_halt(run.id, "web " + r.remote);
    w.flush();
    return reply(202, {{"run", run.name}, {"halt", *route}});
}

}  // namespace hlat::web
