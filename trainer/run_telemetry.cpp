#include "trainer/run_telemetry.h"

#include "hlat_version.h"

#include <fmt/format.h>
#include <unistd.h>

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

RunTelemetry::RunTelemetry(const TrainConfig& config, bool resume, int first_step) {
    if (config.run.store.empty()) return;
    fs::path parent = fs::path(config.run.store).parent_path();
    if (!parent.empty()) fs::create_directories(parent);
    writer_ = std::make_unique<telemetry::Writer>(config.run.store);
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    telemetry::RunRecord r;
    r.name = run_name(config);
    r.config = config_to_json(config).dump();
    r.precision = precision_mode_name(config.precision.mode);
    r.host = host;
    r.git_revision = git_revision();
    r.source = "hlat";
    r.started_at = now_seconds();
    run_ = writer_->open_run(r, resume);
    // A restart continues from a checkpoint; --resume with nothing to resume is a start.
    event(first_step > 0 ? "restart" : "start", first_step, fmt::format("hlat {}", git_revision()));
    writer_->flush();  // the run is visible to readers before the first step
}

RunTelemetry::~RunTelemetry() = default;

void RunTelemetry::event(const std::string& kind, int64_t step, const std::string& detail) {
    double t = now_seconds();
    writer_->event(run_, {kind, step, t, detail});
    last_heartbeat_ = t;
}

void RunTelemetry::step(const StepStats& s) {
    if (!writer_) return;
    double t = now_seconds();
    std::vector<telemetry::MetricPoint> m = {
        {"loss", s.step, s.loss, t},
        {"grad_norm", s.step, s.grad_norm, t},
        {"clipped", s.step, s.clipped ? 1.0 : 0.0, t},
        {"param_norm", s.step, s.param_norm, t},
        {"lr", s.step, s.lr, t},
        {"tokens_seen", s.step, (double)s.tokens_seen, t},
        {"tokens_per_s", s.step, s.tokens_per_second, t},
        {"mfu", s.step, s.mfu, t},
        {"step_s", s.step, s.step_seconds, t},
        {"data_s", s.step, s.data_seconds, t},
        {"forward_s", s.step, s.forward_seconds, t},
        {"backward_s", s.step, s.backward_seconds, t},
        {"optimizer_s", s.step, s.optimizer_seconds, t},
        {"cpu_pct", s.step, usage_.cpu_percent(), t},
        {"rss_mb", s.step, ProcessUsage::rss_mb(), t},
    };
    if (s.comm_seconds > 0) {
        m.push_back({"comm_s", s.step, s.comm_seconds, t});
        m.push_back({"comm_exposed_s", s.step, s.comm_exposed_seconds, t});
    }
    if (s.tp_comm_seconds > 0) m.push_back({"tp_comm_s", s.step, s.tp_comm_seconds, t});
    for (const auto& [key, value] : s.tensor_norms) m.push_back({key, s.step, value, t});
    writer_->metrics(run_, std::move(m));
    if (t - last_heartbeat_ >= kHeartbeatSeconds) event("heartbeat", s.step);
}

void RunTelemetry::heldout_loss(int64_t step, double loss, int64_t tokens_seen) {
    if (!writer_) return;
    double t = now_seconds();
    writer_->metric(run_, "heldout_loss", step, loss, t);
    writer_->eval(run_, {step, "heldout", "loss", loss, t, tokens_seen});
}

void RunTelemetry::metrics(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
    if (!writer_) return;
    double t = now_seconds();
    std::vector<telemetry::MetricPoint> m;
    for (const auto& [key, value] : values) m.push_back({key, step, value, t});
    writer_->metrics(run_, std::move(m));
}

void RunTelemetry::rank_metrics(int64_t step, const std::string& key, const std::vector<double>& per_rank) {
    if (!writer_) return;
    double t = now_seconds();
    for (size_t r = 0; r < per_rank.size(); r++) writer_->rank_metric(run_, {key, step, (int)r, per_rank[r], t});
}

void RunTelemetry::note(const std::string& kind, int64_t step, const std::string& detail) {
    if (writer_) event(kind, step, detail);
}

void RunTelemetry::alert(const telemetry::Alert& alert) {
    if (writer_) writer_->alert(run_, alert);
}

std::optional<std::string> RunTelemetry::halt_requested() {
    if (!writer_) return std::nullopt;
    if (!reader_) reader_ = std::make_unique<telemetry::Reader>(writer_->path());
    std::optional<std::string> who = reader_->pending_halt(run_);
    if (who) writer_->mark_halt_handled(run_);
    return who;
}

void RunTelemetry::flush() {
    if (writer_) writer_->flush();
}

void RunTelemetry::checkpoint(int64_t step, const std::string& path) {
    if (!writer_) return;
    writer_->checkpoint(run_, {step, path, now_seconds()});
    event("checkpoint", step, path);
}

void RunTelemetry::finish(const std::string& status, int64_t step, const std::string& detail) {
    if (!writer_) return;
    event(status == "crashed" ? "crash" : status == "halted" ? "halt" : "stop", step, detail);
    writer_->set_status(run_, status, now_seconds());
    writer_->flush();
}

std::string RunTelemetry::summary() const {
    if (!writer_) return "store disabled";
    telemetry::WriterStats st = writer_->stats();
    return fmt::format("store {}: {} rows in {} commits; queue full {} times ({:.3f} s waited)", writer_->path(),
                       st.rows_committed, st.commits, st.queue_full_waits, st.queue_wait_seconds);
}

}  // namespace hlat
