#include "web/api.h"

#include "web/ingest_api.h"
#include "web/json_reply.h"

#include "detectors/postmortem.h"
#include "telemetry/ingest.h"
#include "telemetry/reader.h"
#include "telemetry/writer.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

namespace hlat::web {

using json = nlohmann::json;
using namespace hlat::telemetry;

namespace {

json number(double v) { return json_number(v); }

// Stored JSON text (configs, alert evidence), or null when it is not JSON.
json parse_or_null(const std::string& text) {
    json j = json::parse(text, nullptr, false);
    return j.is_discarded() ? json(nullptr) : j;
}


int64_t int_param(const Request& r, const std::string& name, int64_t fallback, int64_t lo, int64_t hi) {
    auto it = r.query.find(name);
    if (it == r.query.end()) return fallback;
    int64_t v;
    const std::string& s = it->second;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi)
        throw BadRequest(fmt::format("parameter {}={} must be an integer in [{}, {}]", name, s, lo, hi));
    return v;
}

json run_json(const RunSummary& s) {
    return {{"name", s.run.name},
            {"status", s.run.status},
            {"precision", s.run.precision},
            {"source", s.run.source},
            {"steps", s.last_step + 1},
            {"last_loss", number(s.last_loss)},
            {"tokens", number(s.tokens_seen)},
            {"uptime", s.uptime.wall_seconds > 0 ? json(s.uptime.ratio) : json(nullptr)},
            {"restarts", s.uptime.restarts},
            {"alerts", s.alerts},
            {"started_at", s.run.started_at},
            {"ended_at", s.run.ended_at},
            {"git_revision", s.run.git_revision},
            {"config", parse_or_null(s.run.config)},
            {"halt_route", s.run.status == "running" ? json(halt_route(s.run).value_or("")) : json(nullptr)}};
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

int Api::mark_stale(double after_seconds) { return ingest_->mark_stale(after_seconds); }

Response Api::handle(const Request& r) {
    try {
        const std::string prefix = "/api/v1/runs";
        if (r.path == prefix) {
            if (r.method != "GET") return error(405, "use GET");
            Reader reader(store_);
            json runs = json::array();
            for (const RunSummary& s : reader.runs()) runs.push_back(run_json(s));
            return reply(200, {{"runs", runs}});
        }
        if (r.path == "/api/v1/report") return report(r);
        if (r.path.rfind(prefix + "/", 0) == 0) {
            std::string rest = r.path.substr(prefix.size() + 1);
            size_t slash = rest.rfind('/');
            if (slash == std::string::npos || slash == 0) return error(404, "no such endpoint: " + r.path);
            return handle_run(r, rest.substr(0, slash), rest.substr(slash + 1));
        }
        return error(404, "no such endpoint: " + r.path);
    } catch (const BadRequest& e) {
        return error(400, e.what());
    } catch (const IngestError& e) {
        return error(400, e.what());
    } catch (const StoreError& e) {
        return error(500, e.what());
    } catch (const std::exception& e) {
        return error(500, e.what());
    }
}

// The post-mortem of `hlat compare --out`, the same HTML, for the runs named.
Response Api::report(const Request& r) {
    if (r.method != "GET") return error(405, "use GET");
    auto runs = r.query.find("runs");
    std::vector<std::string> names;
    std::stringstream list(runs == r.query.end() ? std::string() : runs->second);
    for (std::string n; std::getline(list, n, ',');)
        if (!n.empty()) names.push_back(n);
    if (names.empty()) throw BadRequest("parameter runs (comma-separated run names) is required");
    Reader reader(store_);
    for (const std::string& n : names)
        if (!reader.find_run(n)) return error(404, fmt::format("no run named \"{}\"", n));
    auto postmortems = detectors::postmortem(reader, names);
    return {200, "text/html; charset=utf-8",
            detectors::postmortem_html(postmortems, detectors::config_differences(reader, names))};
}

Response Api::handle_run(const Request& r, const std::string& name, const std::string& what) {
    bool post = what == "halt" || what == "ingest" || what == "start" || what == "finish";
    if (post != (r.method == "POST")) return error(405, post ? "use POST" : "use GET");
    if (post && (token_.empty() || r.token != token_))
        return error(401, "this changes state: send the token `hlat serve` printed, as X-HLAT-Token");

    if (what == "start") return ingest_->start(name, r.body);
    if (what == "ingest") return ingest_->ingest(name, r.body);
    if (what == "finish") return ingest_->finish(name, r.body);
    if (what == "state") return ingest_->state(name);

    Reader reader(store_);
    auto run = reader.find_run(name);
    if (!run) return error(404, fmt::format("no run named \"{}\"", name));
    if (what == "halt") {
        if (run->status != "running") return error(409, fmt::format("run \"{}\" is {}, not running", name, run->status));
        std::optional<std::string> route = halt_route(*run);
        if (!route)
            return error(409, fmt::format("run \"{}\" is imported from a log that nothing here can stop: halt its "
                                          "trainer by hand, or follow the log with `hlat ingest --follow --on-halt`",
                                          name));
        Writer& w = ingest_->writer();
        w.request_halt(run->id, "web " + r.remote);
        w.flush();
        return reply(202, {{"run", name}, {"halt", *route}});
    }
    if (what == "keys") return reply(200, {{"keys", reader.keys(run->id)}});
    if (what == "series") {
        auto key = r.query.find("key");
        if (key == r.query.end() || key->second.empty()) throw BadRequest("parameter key is required");
        const int64_t max = std::numeric_limits<int64_t>::max() / 2;
        int64_t from = int_param(r, "from", 0, 0, max), to = int_param(r, "to", max, 0, max);
        if (to < from) throw BadRequest(fmt::format("from={} is after to={}", from, to));
        if (r.query.count("points")) {
            int points = (int)int_param(r, "points", 0, 1, 100000);
            json buckets = json::array();
            for (const Bucket& b : reader.downsample(run->id, key->second, from, to, points))
                buckets.push_back({b.first_step, b.last_step, number(b.min), number(b.max), number(b.last), b.has_nan});
            return reply(200, {{"key", key->second}, {"columns", {"first", "last", "min", "max", "value", "has_nan"}},
                               {"buckets", buckets}});
        }
        json rows = json::array();
        for (const SeriesPoint& p : reader.series(run->id, key->second, from, to))
            rows.push_back({p.step, number(p.value), p.wall_time});
        return reply(200, {{"key", key->second}, {"columns", {"step", "value", "time"}}, {"points", rows}});
    }
    if (what == "alerts") {
        json out = json::array();
        for (const Alert& a : reader.alerts(run->id))
            out.push_back({{"kind", a.kind}, {"severity", a.severity}, {"step", a.step}, {"message", a.message},
                           {"data", parse_or_null(a.data)}, {"time", a.wall_time}});
        return reply(200, {{"alerts", out}});
    }
    if (what == "events") {
        json out = json::array();
        for (const Event& e : reader.events(run->id))
            out.push_back({{"kind", e.kind}, {"step", e.step}, {"time", e.wall_time}, {"detail", e.detail}});
        Uptime u = reader.uptime(run->id);
        return reply(200, {{"events", out},
                           {"uptime", {{"ratio", u.ratio}, {"training_seconds", u.training_seconds},
                                       {"wall_seconds", u.wall_seconds}, {"restarts", u.restarts}}}});
    }
    if (what == "checkpoints") {
        json out = json::array();
        for (const CheckpointRecord& c : reader.checkpoints(run->id))
            out.push_back({{"step", c.step}, {"path", c.path}, {"time", c.wall_time}});
        return reply(200, {{"checkpoints", out}});
    }
    if (what == "evals") {
        json out = json::array();
        for (const EvalRecord& e : reader.evals(run->id))
            out.push_back({{"step", e.step}, {"tokens", e.tokens}, {"task", e.task}, {"metric", e.metric},
                           {"value", number(e.value)}, {"time", e.wall_time}});
        return reply(200, {{"evals", out}});
    }
    return error(404, "no such endpoint: " + r.path);
}

}  // namespace hlat::web
