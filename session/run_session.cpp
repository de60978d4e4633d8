#include "session/run_session.h"

#include "detectors/stragglers.h"

#include "session/divergence.h"

#include "session/moved_first.h"
#include "session/step_views.h"

#include "telemetry/key_aliases.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <map>

namespace hlat::session {

using telemetry::now_seconds;

// Distinct keys kept for the unwatched notice: enough to recognise a naming scheme.
constexpr size_t kKeysNamed = 12;

detectors::DetectorsConfig detectors_of(const telemetry::RunRecord& run) {
    nlohmann::json config = nlohmann::json::parse(run.config, nullptr, false);
    if (config.is_object() && config.contains("detectors")) return detectors::detectors_from_json(config["detectors"]);
    return {};
}

const char* end_event_kind(const std::string& status) {
    if (status == "crashed") return "crash";
    if (status == "halted") return "halt";
    if (status == "stale") return "stale";
    return "stop";
}

RunSession::RunSession(telemetry::Writer* writer, telemetry::RunRecord run, SessionOptions options,
                       const detectors::DetectorsConfig& config)
    : writer_(writer),
      run_(std::move(run)),
      options_(std::move(options)),
      suite_(config),
      flight_recorder_steps_(config.flight_recorder.steps),
      flight_recorder_(config.flight_recorder.steps, config.flight_recorder.store_every),
      rewind_config_(config.rewind) {
    if (!config.webhook.empty())
        webhook_ = std::make_unique<Webhook>(config.webhook, run_.name, config.webhook_format, config.webhook_ca,
                                             config.webhook_page);
}

RunSession::~RunSession() = default;

std::unique_ptr<RunSession> RunSession::open(telemetry::Writer* writer, const telemetry::RunRecord& run,
                                             const Opening& opening, SessionOptions options) {
    const bool catch_up = options.catch_up && opening.resume;
    const detectors::DetectorsConfig config = options.detectors ? *options.detectors : detectors_of(run);
    std::unique_ptr<RunSession> s(new RunSession(writer, run, std::move(options), config));
    if (!writer) return s;
    bool existed = false;
    if (opening.kind.empty()) existed = telemetry::Reader(writer->path()).find_run(run.name).has_value();
    s->run_.id = writer->open_run(run, opening.resume);
    const std::string kind = !opening.kind.empty() ? opening.kind : existed ? "restart" : "start";
    s->store_event({kind, opening.step, opening.wall_time > 0 ? opening.wall_time : now_seconds(), opening.detail});
    writer->flush();  // the run is visible to readers before the first step
    if (catch_up) s->catch_up();
    return s;
}

std::unique_ptr<RunSession> RunSession::attach(telemetry::Writer& writer, telemetry::Reader& reader,
                                               const telemetry::RunRecord& stored, SessionOptions options) {
    const bool catch_up = options.catch_up;
    const detectors::DetectorsConfig config = options.detectors ? *options.detectors : detectors_of(stored);
    std::unique_ptr<RunSession> s(new RunSession(&writer, stored, std::move(options), config));
    if (catch_up) s->catch_up(reader);
    return s;
}

// Another trainer's name for one of hlat's keys becomes that key, unless the
// same step has the key under its own name (then both are kept as written).
void RunSession::rename_aliases(std::vector<telemetry::MetricPoint>& points) {
    std::set<std::pair<int64_t, std::string>> present;
    for (const telemetry::MetricPoint& p : points)
        if (!telemetry::alias_of(p.key)) present.insert({p.step, p.key});
    for (telemetry::MetricPoint& p : points) {
        std::optional<std::string> key = telemetry::alias_of(p.key);
        if (!key || !present.insert({p.step, *key}).second) continue;
        if (aliases_used_.insert(p.key).second)
            spdlog::info("run \"{}\": \"{}\" is read as hlat's \"{}\"", run_.name, p.key, *key);
        p.key = *key;
    }
}

std::vector<Fired> RunSession::ingest(std::vector<telemetry::MetricPoint> points, std::vector<telemetry::Event> events,
                                      std::vector<telemetry::VectorPoint> vectors) {
    take_rank_vectors(points, vectors);
    rename_aliases(points);
    note_keys(points);
    resolve_labels(vectors);
    note_times(points, events);
    std::vector<detectors::StepView> views = steps_from(points, events, suite_, vectors);
    // A late step is judged from the store, with the steps after it: stored first.
    const std::optional<int64_t> late = late_step(views);
    std::vector<Fired> fired;
    if (!late) fired = detect(std::move(views));
    const int64_t step = points.empty() ? last_step_ : points.back().step;
    store(std::move(points), std::move(events), std::move(vectors));
    if (late) fired = rejudge(*late);
    if (options_.heartbeat_seconds > 0 && now_seconds() - last_heartbeat_ >= options_.heartbeat_seconds)
        store_event({"heartbeat", step, now_seconds(), ""});
    for (Fired& f : fired) route(f);
    source_times_.clear();  // an alert raised later, outside a batch, is dated when it is raised
    return fired;
}

void RunSession::store(std::vector<telemetry::MetricPoint> points, std::vector<telemetry::Event> events,
                       std::vector<telemetry::VectorPoint> vectors) {
    if (writer_ && !points.empty()) writer_->metrics(run_.id, std::move(points));
    std::vector<telemetry::VectorPoint> sampled = flight_recorder_.record(std::move(vectors));
    if (writer_ && !sampled.empty()) writer_->vectors(run_.id, std::move(sampled));
    for (telemetry::Event& e : events) store_event(std::move(e));
}

// The source's own clock for this batch's steps: an alert is dated by the
// time of the step it is about, so a log imported a month later has its
// alerts a month back, with its steps (not at the import's time).
void RunSession::note_times(const std::vector<telemetry::MetricPoint>& points,
                            const std::vector<telemetry::Event>& events) {
    source_times_.clear();
    auto note = [&](int64_t step, double t) {
        if (!(t > 0)) return;
        double& at = source_times_[step];
        at = std::max(at, t);
    };
    for (const telemetry::MetricPoint& p : points) note(p.step, p.wall_time);
    for (const telemetry::Event& e : events)  // a trainer's alert line often has no time of its own: its step's
        if (!source_times_.count(e.step)) note(e.step, e.wall_time);
}

double RunSession::source_time(int64_t step) const {
    if (source_times_.empty()) return now_seconds();
    auto it = source_times_.find(step);
    if (it != source_times_.end()) return it->second;
    double latest = 0.0;
    for (const auto& [s, t] : source_times_) latest = std::max(latest, t);
    return latest;  // an alert about an earlier step (judged at this one): the batch's clock
}

std::vector<Fired> RunSession::step(int64_t step, const StepPoints& s) {
    const double t = now_seconds();
    std::vector<telemetry::MetricPoint> points;
    points.reserve(s.values.size());
    for (const auto& [key, value] : s.values) points.push_back({key, step, value, t});
    std::vector<telemetry::Event> events;
    for (const auto& [kind, detail] : s.events) events.push_back({kind, step, t, detail});
    std::vector<telemetry::VectorPoint> vectors = s.vectors;
    for (telemetry::VectorPoint& v : vectors) v.step = step, v.wall_time = t;
    return ingest(std::move(points), std::move(events), std::move(vectors));
}

// A vector's labels: its own when it brings them (they become the key's),
// else the key's; a length that does not match is a source's mistake, said
// once per key and the point dropped (the rest of the step is kept).
void RunSession::resolve_labels(std::vector<telemetry::VectorPoint>& vectors) {
    std::erase_if(vectors, [&](telemetry::VectorPoint& v) {
        auto& known = labels_[v.key];
        std::string wrong;
        if (v.labels && v.labels->size() != v.values.size())
            wrong = fmt::format("{} names for {} values", v.labels->size(), v.values.size());
        else if (!v.labels && known && known->size() != v.values.size())
            wrong = fmt::format("{} values where earlier steps had {}", v.values.size(), known->size());
        if (!wrong.empty()) {
            if (refused_keys_.insert(v.key).second)
                spdlog::warn("run \"{}\": \"{}\" at step {} has {}; such points of it are dropped", run_.name,
                             v.key, v.step, wrong);
            return true;
        }
        if (!v.labels) v.labels = known;
        else if (known && (known == v.labels || *known == *v.labels)) v.labels = known;  // one copy, shared
        else known = v.labels;
        return false;
    });
}

// Remembers which keys the run has, and says once (log, store) when two steps
// in none of them feeds a detector: a run that succeeds silently unwatched is
// the failure this guards against.
void RunSession::note_keys(const std::vector<telemetry::MetricPoint>& points) {
    for (const telemetry::MetricPoint& p : points) {
        if (p.step != last_step_) steps_seen_++, last_step_ = p.step;
        if (suite_.reads(p.key)) watched_ = true;
        if (seen_keys_.size() < kKeysNamed) seen_keys_.insert(p.key);
    }
    if (watched_ || steps_seen_ < 2 || !unwatched_notice_.empty()) return;
    std::string keys, read;
    for (const std::string& k : seen_keys_) keys += (keys.empty() ? "" : ", ") + k;
    for (size_t i = 0; i < suite_.keys().size() && i < 5; i++) read += suite_.keys()[i] + ", ";
    unwatched_notice_ = fmt::format(
        "run \"{}\" is not watched: none of its keys ({}) feeds a detector. The detectors read {}... (and the "
        "names torchtitan, Megatron, Hugging Face and W&B use for them: docs/external-trainers.md); log yours under "
        "those names, or map them (hlat ingest --map LOG_NAME=HLAT_NAME)",
        run_.name, keys, read);
    spdlog::warn("{}", unwatched_notice_);
    store_event({"unwatched", last_step_, now_seconds(), unwatched_notice_});
}

std::optional<std::string> RunSession::poll_halt_request() {
    if (!writer_) return std::nullopt;
    if (!halt_reader_) halt_reader_ = std::make_unique<telemetry::Reader>(writer_->path());
    std::optional<std::string> who = halt_reader_->pending_halt(run_.id);
    if (!who) return std::nullopt;
    writer_->mark_halt_handled(run_.id);
    if (halting()) return std::nullopt;  // our own request, or one after it
    return who;
}

void RunSession::halt(int64_t step, const std::string& reason) {
    if (halt_reason_.empty()) halt_reason_ = reason;
    if (!writer_) return;
    writer_->mark_halt_handled(run_.id);
    store_event({"halt", step, now_seconds(), reason});
    halt_event_written_ = true;
}

void RunSession::take_rank_vectors(std::vector<telemetry::MetricPoint>& points,
                                   std::vector<telemetry::VectorPoint>& vectors) {
    const size_t before = points.size();
    std::erase_if(vectors, [&](const telemetry::VectorPoint& v) {
        if (!v.key.starts_with("rank/")) return false;
        if (v.labels) {  // by rank, in order: "0", "1", ... (a dict a client built by rank)
            for (size_t r = 0; r < v.labels->size(); r++)
                if ((*v.labels)[r] != std::to_string(r)) {
                    if (refused_keys_.insert(v.key).second)
                        spdlog::warn("run \"{}\": \"{}\" at step {} is a value per rank, but its names are not the "
                                     "ranks 0, 1, ... in order (\"{}\"); such points of it are dropped",
                                     run_.name, v.key, v.step, (*v.labels)[r]);
                    return true;
                }
        }
        std::vector<double> by_rank(v.values.begin(), v.values.end());
        if (writer_)
            for (size_t r = 0; r < by_rank.size(); r++)
                if (!std::isnan(by_rank[r])) writer_->rank_metric(run_.id, {v.key, v.step, (int)r, by_rank[r], v.wall_time});
        if (v.key == "rank/compute_s" && std::none_of(by_rank.begin(), by_rank.end(), [](double x) { return std::isnan(x); })) {
            const StragglerSummary worst = summarize_stragglers(by_rank);
            points.push_back({"straggler_ratio", v.step, worst.ratio, v.wall_time});
            points.push_back({"straggler_rank", v.step, (double)worst.rank, v.wall_time});
            if (worst.rank >= 0) points.push_back({"straggler_compute_s", v.step, by_rank[worst.rank], v.wall_time});
        }
        return true;
    });
    if (points.size() != before)  // the summaries join their steps: a batch's points stay in step order
        std::stable_sort(points.begin(), points.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
}

void RunSession::rank_values(int64_t step, const std::string& key, const std::vector<double>& per_rank) {
    if (!writer_) return;
    const double t = now_seconds();
    for (size_t r = 0; r < per_rank.size(); r++) writer_->rank_metric(run_.id, {key, step, (int)r, per_rank[r], t});
}

void RunSession::store_event(telemetry::Event e) {
    if (!writer_) return;
    last_heartbeat_ = now_seconds();
    writer_->event(run_.id, std::move(e));
}

void RunSession::event(const std::string& kind, int64_t step, const std::string& detail, double wall_time) {
    store_event({kind, step, wall_time > 0 ? wall_time : now_seconds(), detail});
}

void RunSession::checkpoint(int64_t step, const std::string& path) {
    if (!writer_) return;
    writer_->checkpoint(run_.id, {step, path, now_seconds()});
    store_event({"checkpoint", step, now_seconds(), path});
}

void RunSession::eval(telemetry::EvalRecord record) {
    if (writer_) writer_->eval(run_.id, std::move(record));
}

void RunSession::finish(const std::string& status, int64_t step, const std::string& detail, double wall_time) {
    if (!writer_) return;
    if (status == "halted" && halt_event_written_) {  // halt() wrote the event when it happened
        writer_->set_status(run_.id, status, now_seconds());
        writer_->flush();
        return;
    }
    write_end(*writer_, run_.id, status, step, detail, wall_time);
}

void RunSession::crashed(int64_t step, const std::string& detail, double wall_time) {
    if (!writer_) return;
    store_event({"crash", step, wall_time > 0 ? wall_time : now_seconds(), detail});
    writer_->set_status(run_.id, "crashed", now_seconds());
    writer_->flush();
}

// A run that ends with its loss or grad norm non-finite ends "diverged"
// (session/divergence.h): judged from the store, so a session attached only
// to end a run judges it as well as one that saw every step.
void write_end(telemetry::Writer& writer, int64_t run, const std::string& reported, int64_t step,
               const std::string& reported_detail, double wall_time) {
    writer.flush();
    std::string detail = reported_detail;
    telemetry::Reader reader(writer.path());
    const std::string status = ending_status(reader, run, reported, detail);
    writer.event(run, {end_event_kind(status), step, wall_time > 0 ? wall_time : now_seconds(), detail});
    writer.set_status(run, status, now_seconds());
    writer.mark_halt_handled(run);
    writer.flush();
}

void RunSession::flush() {
    if (writer_) writer_->flush();
}

}  // namespace hlat::session
