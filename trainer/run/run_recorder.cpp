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
    if (!config.run.store.empty()) {
        fs::path parent = fs::path(config.run.store).parent_path();
        if (!parent.empty()) fs::create_directories(parent);
        writer_ = std::make_unique<telemetry::Writer>(config.run.store);
    }
    telemetry::RunRecord r;
    r.name = run_name(config);
    r.config = config_to_json(config).dump();
    r.precision = precision_mode_name(config.precision.mode);
    r.meta = meta.dump();
    r.host = telemetry::host_name();
    r.git_revision = git_revision();
    r.source = "hlat";
    r.started_at = now_seconds();
    // A restart continues from a checkpoint; --resume with nothing to resume is a start.
    session::Opening opening{resume, first_step > 0 ? "restart" : "start", first_step, 0.0,
                             fmt::format("hlat {}", git_revision())};
    session::SessionOptions options;
    options.catch_up = false;  // the detectors' windows come from the checkpoint
    options.whole_steps = true;
    options.heartbeat_seconds = kHeartbeatSeconds;
    options.on_alert = [this](const telemetry::Alert& a) {
        jsonl({{"event", "alert"}, {"kind", a.kind}, {"step", a.step}, {"severity", a.severity},
               {"message", a.message}},
              false);
    };
    session_ = session::RunSession::open(writer_.get(), r, opening, std::move(options));
}

RunRecorder::~RunRecorder() = default;

void RunRecorder::start(nlohmann::json info) {
    info["event"] = "start";
    jsonl(info, true);
}

void RunRecorder::jsonl(const nlohmann::json& record, bool flush) {
    if (!jsonl_.is_open()) return;
    jsonl_ << record.dump() << "\n";
    if (flush) jsonl_.flush();
}

void RunRecorder::step(const StepStats& s, session::StepPoints& points) {
    if (!session_) return;
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
    for (const StepMetric& m : metrics) {
        if (m.when == StepMetric::When::NonZero && m.value == 0) continue;
        if (m.when == StepMetric::When::Measured && std::isnan(m.value)) continue;
        points.add(m.key, m.value);
    }
    points.add("cpu_pct", usage_.cpu_percent());
    points.add("rss_mb", ProcessUsage::rss_mb());
    for (const auto& [key, value] : s.tensor_norms) points.add(key, value);
    for (const auto& [key, value] : s.lost_updates_by_kind) points.add(key, value);
    // The internals' vectors (docs/internals.md); their labels are shared, not copied.
    for (const telemetry::VectorPoint& v : s.internals) points.add(v.key, v.values, v.labels);
}

void RunRecorder::heldout_loss(int64_t step, double loss, int64_t tokens_seen) {
    if (!session_) return;
    jsonl({{"event", "eval"}, {"step", step}, {"heldout_loss", loss}}, true);
    session_->eval({step, "heldout", "loss", loss, now_seconds(), tokens_seen});
}

void RunRecorder::rank_metrics(int64_t step, const std::string& key, const std::vector<double>& per_rank) {
    if (session_) session_->rank_values(step, key, per_rank);
}

void RunRecorder::flush() {
    if (session_) session_->flush();
}

void RunRecorder::checkpoint(int64_t step, const std::string& path) {
    if (session_) session_->checkpoint(step, path);
}

void RunRecorder::finish(const std::string& status, int64_t step, const std::string& detail) {
    if (session_) session_->finish(status, step, detail);
}

std::string RunRecorder::summary() const {
    if (!writer_) return "store disabled";
    telemetry::WriterStats st = writer_->stats();
    return fmt::format("store {}: {} rows in {} commits; queue full {} times ({:.3f} s waited)", writer_->path(),
                       st.rows_committed, st.commits, st.queue_full_waits, st.queue_wait_seconds);
}

}  // namespace hlat
