#include "trainer/run/run_recorder.h"

#include "hlat_version.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>

namespace hlat {

namespace fs = std::filesystem;
using telemetry::now_seconds;

// Seconds between heartbeat events: they bound how much of a run that died
// without a word (SIGKILL, power loss) is counted as training time.
constexpr double kHeartbeatSeconds = 10.0;

const char* git_revision() { return HLAT_GIT_REVISION; }

std::string run_name(const TrainConfig& config) {
    if (!config.run.name.empty()) return config.run.name;
    std::string name = fs::path(config.run.out_dir).lexically_normal().filename().string();
    return name.empty() ? fs::path(config.run.out_dir).lexically_normal().parent_path().filename().string() : name;
}

RunRecorder::RunRecorder(const TrainConfig& config, const nlohmann::json& meta, bool resume, int first_step,
                         const std::string& metrics_jsonl, bool root) {
    if (!root) return;
    if (!metrics_jsonl.empty()) {
        jsonl_.open(metrics_jsonl, std::ios::app);
        if (!jsonl_) throw std::runtime_error("cannot open " + metrics_jsonl);
    }
    if (config.run.store.empty()) return;
    fs::path parent = fs::path(config.run.store).parent_path();
    if (!parent.empty()) fs::create_directories(parent);
    writer_ = std::make_unique<telemetry::Writer>(config.run.store);
    telemetry::RunRecord r;
    r.name = run_name(config);
    r.config = config_to_json(config).dump();
    r.precision = precision_mode_name(config.precision.mode);
    r.meta = meta.dump();
    r.host = telemetry::host_name();
    r.git_revision = git_revision();
    r.source = "hlat";
    r.started_at = now_seconds();
    run_id_ = writer_->open_run(r, resume);
    // A restart continues from a checkpoint; --resume with nothing to resume is a start.
    event(first_step > 0 ? "restart" : "start", first_step, fmt::format("hlat {}", git_revision()));
    writer_->flush();  // the run is visible to readers before the first step
}

RunRecorder::~RunRecorder() = default;

void RunRecorder::event(const std::string& kind, int64_t step, const std::string& detail) {
    double t = now_seconds();
    writer_->event(run_id_, {kind, step, t, detail});
    last_heartbeat_ = t;
}

void RunRecorder::start(nlohmann::json info) {
    info["event"] = "start";
    jsonl(info, true);
}

void RunRecorder::jsonl(const nlohmann::json& record, bool flush) {
    if (!jsonl_.is_open()) return;
    jsonl_ << record.dump() << "\n";
    if (flush) jsonl_.flush();
}

void RunRecorder::step(const StepStats& s) {
    const std::vector<StepMetric> metrics = step_metrics(s);
    if (jsonl_.is_open()) {
        nlohmann::json line = {{"step", s.step}};
        for (const StepMetric& m : metrics)
            if (m.when != StepMetric::When::Measured || !std::isnan(m.value))
                line[m.key] = m.kind == StepMetric::Kind::Flag    ? nlohmann::json(m.value != 0)
                          : m.kind == StepMetric::Kind::Count ? nlohmann::json((long)m.value)
                                                              : nlohmann::json(m.value);
        jsonl(line, true);
    }
    if (!writer_) return;
    double t = now_seconds();
    std::vector<telemetry::MetricPoint> points;
    for (const StepMetric& m : metrics) {
        if (m.when == StepMetric::When::NonZero && m.value == 0) continue;
        if (m.when == StepMetric::When::Measured && std::isnan(m.value)) continue;
        points.push_back({m.key, s.step, m.value, t});
    }
    points.push_back({"cpu_pct", s.step, usage_.cpu_percent(), t});
    points.push_back({"rss_mb", s.step, ProcessUsage::rss_mb(), t});
    for (const auto& [key, value] : s.tensor_norms) points.push_back({key, s.step, value, t});
    for (const auto& [key, value] : s.lost_updates_by_kind) points.push_back({key, s.step, value, t});
    writer_->metrics(run_id_, std::move(points));
    if (t - last_heartbeat_ >= kHeartbeatSeconds) event("heartbeat", s.step);
}

void RunRecorder::heldout_loss(int64_t step, double loss, int64_t tokens_seen) {
    jsonl({{"event", "eval"}, {"step", step}, {"heldout_loss", loss}}, true);
    if (!writer_) return;
    double t = now_seconds();
    writer_->metric(run_id_, "heldout_loss", step, loss, t);
    writer_->eval(run_id_, {step, "heldout", "loss", loss, t, tokens_seen});
}

void RunRecorder::metrics(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
    if (!writer_) return;
    double t = now_seconds();
    std::vector<telemetry::MetricPoint> m;
    for (const auto& [key, value] : values) m.push_back({key, step, value, t});
    writer_->metrics(run_id_, std::move(m));
}

void RunRecorder::rank_metrics(int64_t step, const std::string& key, const std::vector<double>& per_rank) {
    if (!writer_) return;
    double t = now_seconds();
    for (size_t r = 0; r < per_rank.size(); r++) writer_->rank_metric(run_id_, {key, step, (int)r, per_rank[r], t});
}

void RunRecorder::note(const std::string& kind, int64_t step, const std::string& detail) {
    if (writer_) event(kind, step, detail);
}

void RunRecorder::alert(const telemetry::Alert& alert) {
    jsonl({{"event", "alert"}, {"kind", alert.kind}, {"step", alert.step}, {"severity", alert.severity},
           {"message", alert.message}},
          false);
    if (writer_) writer_->alert(run_id_, alert);
}

std::optional<std::string> RunRecorder::halt_requested() {
    if (!writer_) return std::nullopt;
    if (!reader_) reader_ = std::make_unique<telemetry::Reader>(writer_->path());
    std::optional<std::string> who = reader_->pending_halt(run_id_);
    if (who) writer_->mark_halt_handled(run_id_);
    return who;
}

void RunRecorder::flush() {
    if (writer_) writer_->flush();
}

void RunRecorder::checkpoint(int64_t step, const std::string& path) {
    if (!writer_) return;
    writer_->checkpoint(run_id_, {step, path, now_seconds()});
    event("checkpoint", step, path);
}

void RunRecorder::finish(const std::string& status, int64_t step, const std::string& detail) {
    if (!writer_) return;
    event(status == "crashed" ? "crash" : status == "halted" ? "halt" : "stop", step, detail);
    writer_->set_status(run_id_, status, now_seconds());
    writer_->flush();
}

std::string RunRecorder::summary() const {
    if (!writer_) return "store disabled";
    telemetry::WriterStats st = writer_->stats();
    return fmt::format("store {}: {} rows in {} commits; queue full {} times ({:.3f} s waited)", writer_->path(),
                       st.rows_committed, st.commits, st.queue_full_waits, st.queue_wait_seconds);
}

}  // namespace hlat
