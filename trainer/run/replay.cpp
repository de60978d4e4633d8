#include "trainer/run/replay.h"

#include "telemetry/reader.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/parallel/parallel.h"
#include "trainer/run/run_context.h"
#include "trainer/run/step_hook.h"
#include "trainer/run/train.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

namespace hlat {
namespace {

constexpr int kBaselineSteps = 10;  // session/moved_first.h's baseline

// A sequence of the step, as the batch record names it.
struct SequenceId {
    int rank, micro, row;
    bool operator<(const SequenceId& o) const { return std::tie(rank, micro, row) < std::tie(o.rank, o.micro, o.row); }
};

// What a replay measured, on world rank 0.
struct Replayed {
    std::map<int, std::pair<double, double>> steps;  // step -> (loss, grad norm)
    std::map<SequenceId, float> sequence_losses;     // at the target step
    std::vector<float> tensor_grad_norm;             // at the target step, when measured
    std::shared_ptr<const std::vector<std::string>> tensor_labels;
    nlohmann::json attribution;  // what an alert at the target step would say: moved_first, batch
};

// Records every replayed step; at the target, leaves out the sequences asked
// for and gathers each rank's sequence losses.
class ReplayHook : public StepHook {
  public:
    ReplayHook(RunContext& run, int target, std::set<SequenceId> drop, Replayed& out)
        : run_(run), target_(target), drop_(std::move(drop)), out_(out) {}
    const char* name() const override { return "replay"; }

    void before_step(int step, StepRequest& request) override {
        if (step != target_ || drop_.empty()) return;
        const int B = run_.config.run.batch_size, accum = run_.config.run.grad_accum;
        request.drop_sequences.assign(accum, std::vector<char>(B, 0));
        for (const SequenceId& s : drop_)
            if (s.rank == run_.parallel.dp_rank() && s.micro < accum && s.row < B) request.drop_sequences[s.micro][s.row] = 1;
    }

    void after_step(StepResult& result) override {
        const StepStats& s = result.stats;
        out_.steps[s.step] = {s.loss, s.grad_norm};
        if (s.step != target_) return;
        std::vector<double> mine(s.sequence_losses.begin(), s.sequence_losses.end());
        std::vector<double> all = run_.parallel.gather(mine, Group::World);
        const int B = run_.config.run.batch_size, tp = run_.parallel.tp_size();
        for (size_t w = 0; w * mine.size() < all.size(); w += tp)
            for (size_t i = 0; i < mine.size(); i++)
                out_.sequence_losses[{(int)(w / tp), (int)(i / B), (int)(i % B)}] = (float)all[w * mine.size() + i];
        for (const telemetry::VectorPoint& v : s.internals)
            if (v.key == "tensor_grad_norm") out_.tensor_grad_norm = v.values, out_.tensor_labels = v.labels;
        // A note at the step, through the session as any alert: it comes back
        // with the tensor that moved first and the batch's top sequences.
        if (session::RunSession* session = run_.recorder.session()) {
            telemetry::Alert a = session->raise({"replay", "info", s.step, "the replayed step", "{}", 0.0},
                                                detectors::Policy::Warn, "");
            out_.attribution = nlohmann::json::parse(a.data, nullptr, false).value("attribution", nlohmann::json());
        }
    }

  private:
    RunContext& run_;
    int target_;
    std::set<SequenceId> drop_;
    Replayed& out_;
};

// What the store holds of the run at and before the step.
struct Stored {
    telemetry::RunRecord run;
    TrainConfig config;
    std::map<int64_t, double> loss, grad_norm;
    std::map<SequenceId, float> sequence_losses;  // the step's batch record
    std::vector<float> tensor_grad_norm;
    std::vector<std::string> tensor_labels;
    std::vector<long> skip_batches;  // rewinds before the step skipped these
};

Stored read_stored(const ReplayOptions& o) {
    telemetry::Reader reader(o.store);
    Stored st;
    std::optional<telemetry::RunRecord> run = reader.find_run(o.run);
    if (!run) throw std::runtime_error(fmt::format("no run \"{}\" in {}", o.run, o.store));
    st.run = *run;
    nlohmann::json config = nlohmann::json::parse(run->config, nullptr, false);
    if (!config.is_object() || config.empty() || run->source != "hlat")
        throw std::runtime_error(fmt::format("run \"{}\" was not trained by hlat train (no training config stored): "
                                             "only hlat's own runs can be replayed", o.run));
    st.config = config_from_json(config);
    for (const char* key : {"loss", "grad_norm"})
        for (const telemetry::SeriesPoint& p : reader.series(run->id, key, 0, o.step))
            (std::string(key) == "loss" ? st.loss : st.grad_norm)[p.step] = p.value;
    if (!st.loss.count(o.step))
        throw std::runtime_error(fmt::format("run \"{}\" has no loss stored for step {}", o.run, o.step));
    if (std::optional<telemetry::BatchRecord> b = reader.batch(run->id, o.step)) {
        nlohmann::json data = nlohmann::json::parse(b->data, nullptr, false);
        if (data.is_object() && data.contains("sequences"))
            for (const auto& s : data["sequences"])
                st.sequence_losses[{s[0].get<int>(), s[1].get<int>(), s[2].get<int>()}] =
                    s[4].is_number() ? s[4].get<float>() : NAN;
    }
    for (const telemetry::VectorPoint& v : reader.vector_series(run->id, "tensor_grad_norm", o.step, o.step))
        st.tensor_grad_norm = v.values;
    if (!st.tensor_grad_norm.empty()) st.tensor_labels = reader.vector_labels(run->id, "tensor_grad_norm");
    for (const telemetry::Event& e : reader.events(run->id)) {
        nlohmann::json plan = nlohmann::json::parse(e.detail, nullptr, false);
        if (e.kind != "rewind" || !plan.is_object() || plan.value("alert_step", (int64_t)-1) >= o.step) continue;
        for (const auto& b : plan.value("skip_batches", nlohmann::json::array())) st.skip_batches.push_back(b.get<long>());
    }
    return st;
}

// The run's config for a replay: nothing stored, no checkpoints, no held-out
// evaluations, no detector acting, and of the faults only the data's.
TrainConfig replay_config(TrainConfig c, const std::string& scratch) {
    c.run.store = "";
    c.run.out_dir = scratch;
    c.run.eval_every = 0;
    std::vector<std::string> kept;
    for (const std::string& f : c.run.inject)
        if (f.rfind("bad_batch@", 0) == 0) kept.push_back(f);
    c.run.inject = kept;
    c.detectors.webhook = "";
    c.detectors.sections([](const char*, auto& section) {
        if constexpr (requires { section.policy; }) section.policy = detectors::Policy::Off;
    });
    return c;
}

Replayed run_replay(const Stored& st, const ReplayOptions& o, const std::optional<std::string>& checkpoint,
                    std::set<SequenceId> drop) {
    const std::string scratch = o.scratch.empty() ? fmt::format("/tmp/hlat-replay-{}", getpid()) : o.scratch;
    TrainConfig config = replay_config(st.config, scratch);
    TrainOptions options;
    options.steps = o.step + 1;
    options.resume_from = checkpoint ? *checkpoint : "scratch";
    options.skip_batches = st.skip_batches;
    options.faults = parse_faults(config.run.inject);
    options.write_checkpoints = false;
    Replayed out;
    options.run_hooks.push_back([&](RunContext& run) {
        return std::make_shared<ReplayHook>(run, o.step, drop, out);
    });
    const int code = train(config, options);
    std::error_code ignored;
    std::filesystem::remove_all(scratch, ignored);
    if (code != 0) throw std::runtime_error(fmt::format("the replay's training ended with exit code {}", code));
    return out;
}

bool same(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

nlohmann::json number(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); }

// Where the replay and the store part: the first step, the ranks whose
// sequences differ at the target, the tensor that differs most.
void compare(const Stored& st, const Replayed& r, int step, nlohmann::json& report) {
    report["first_difference"] = nullptr;
    for (const auto& [s, values] : r.steps) {
        auto loss = st.loss.find(s), grad = st.grad_norm.find(s);
        if (loss == st.loss.end() || grad == st.grad_norm.end()) continue;
        if (same(loss->second, values.first) && same(grad->second, values.second)) continue;
        report["first_difference"] = {{"step", s}, {"loss", {number(loss->second), number(values.first)}},
                                      {"grad_norm", {number(grad->second), number(values.second)}}};
        break;
    }
    auto at = r.steps.find(step);
    report["loss"] = {{"stored", number(st.loss.at(step))}, {"replayed", number(at->second.first)}};
    auto grad = st.grad_norm.find(step);
    report["grad_norm"] = {{"stored", grad == st.grad_norm.end() ? nullptr : number(grad->second)},
                           {"replayed", number(at->second.second)}};
    std::set<int> ranks;
    long differing = 0;
    for (const auto& [id, loss] : st.sequence_losses) {
        auto it = r.sequence_losses.find(id);
        if (it != r.sequence_losses.end() && same(it->second, loss)) continue;
        ranks.insert(id.rank);
        differing++;
    }
    report["sequences_compared"] = st.sequence_losses.size();
    report["sequences_differing"] = differing;
    report["ranks_differing"] = ranks;
    report["tensor_differing"] = nullptr;
    double worst = 0.0;
    for (size_t i = 0; i < std::min(st.tensor_grad_norm.size(), r.tensor_grad_norm.size()); i++) {
        const double a = st.tensor_grad_norm[i], b = r.tensor_grad_norm[i];
        if (same(a, b)) continue;
        const double rel = std::isfinite(a) && std::isfinite(b) ? std::fabs(a - b) / std::max(1e-30, std::fabs(a)) : INFINITY;
        if (rel <= worst) continue;
        worst = rel;
        report["tensor_differing"] = {{"tensor", i < st.tensor_labels.size() ? st.tensor_labels[i] : fmt::format("#{}", i)},
                                      {"stored", number(a)}, {"replayed", number(b)}, {"relative", number(rel)}};
    }
    report["verdict"] = report["first_difference"].is_null() && differing == 0 && report["tensor_differing"].is_null()
                            ? "reproducible"
                            : "not reproducible";
}

// The mean grad norm of the `window` steps before the step: what the spike rule judges by.
double mean_before(const std::map<int64_t, double>& grad_norm, int step, int window) {
    double sum = 0.0;
    int n = 0;
    for (int s = std::max(0, step - window); s < step; s++)
        if (auto it = grad_norm.find(s); it != grad_norm.end() && std::isfinite(it->second)) sum += it->second, n++;
    return n ? sum / n : NAN;
}

}  // namespace

nlohmann::json replay_step(const ReplayOptions& o) {
    if (o.step < 0) throw std::runtime_error("--step must be a step index >= 0");
    if (o.without < 0) throw std::runtime_error("--without must be >= 0");
    const Stored st = read_stored(o);
    // From far enough back that the tensors' recent range is known (the
    // moved-first rule's baseline), when a checkpoint allows.
    std::vector<std::string> skipped;
    std::optional<std::string> checkpoint = latest_good_checkpoint(st.config.run.out_dir, &skipped, o.step - kBaselineSteps);
    if (!checkpoint) checkpoint = latest_good_checkpoint(st.config.run.out_dir, &skipped, o.step);
    for (const std::string& s : skipped) spdlog::info("replay: not from {}", s);
    const int first = checkpoint ? read_checkpoint_state(*checkpoint).step : 0;
    spdlog::info("replay: step {} of run \"{}\" from {} ({} steps)", o.step, o.run,
                 checkpoint ? *checkpoint : "the start (no checkpoint at or before it)", o.step - first + 1);
    nlohmann::json report = {{"run", o.run}, {"step", o.step}, {"from_checkpoint", checkpoint ? nlohmann::json(*checkpoint) : nullptr},
                             {"first_step", first}, {"steps_replayed", o.step - first + 1}};
    const Replayed faithful = run_replay(st, o, checkpoint, {});
    const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
    const bool root = !Parallel::launched_by_mpirun() || !rank || std::string(rank) == "0";
    if (root) {
        compare(st, faithful, o.step, report);
        report["attribution"] = faithful.attribution;
    }
    if (o.without == 0) return root ? report : nlohmann::json();
    if (st.sequence_losses.empty()) throw std::runtime_error("--without: the store has no batch record for the step");
    std::vector<std::pair<float, SequenceId>> by_loss;
    for (const auto& [id, loss] : st.sequence_losses) by_loss.push_back({loss, id});
    std::stable_sort(by_loss.begin(), by_loss.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    std::set<SequenceId> drop;
    nlohmann::json dropped = nlohmann::json::array();
    for (int k = 0; k < std::min<int>(o.without, by_loss.size()); k++) {
        drop.insert(by_loss[k].second);
        const SequenceId& id = by_loss[k].second;
        dropped.push_back({{"rank", id.rank}, {"micro", id.micro}, {"row", id.row}, {"loss", number(by_loss[k].first)}});
    }
    const Replayed without = run_replay(st, o, checkpoint, drop);
    const detectors::GradSpikeConfig& rule = st.config.detectors.grad_spike;
    const double mean = mean_before(st.grad_norm, o.step, rule.window);
    const double with_norm = faithful.steps.at(o.step).second, without_norm = without.steps.at(o.step).second;
    const double alert_ratio = o.step < rule.warmup_steps ? rule.warmup_alert_ratio : rule.alert_ratio;
    report["without"] = {{"dropped", dropped},
                         {"grad_norm", number(without_norm)},
                         {"grad_norm_with", number(with_norm)},
                         {"mean_grad_norm_before", number(mean)},
                         {"ratio", number(without_norm / mean)},
                         {"ratio_with", number(with_norm / mean)},
                         {"alert_ratio", alert_ratio},
                         {"spike_gone", with_norm / mean > alert_ratio && without_norm / mean <= alert_ratio}};
    return root ? report : nlohmann::json();
}

// The tensor that moved first and the step's top sequences, as lines.
static std::string describe_attribution(const nlohmann::json& a) {
    std::string out;
    if (!a.is_object()) return out;
    if (a.contains("moved_first")) {
        const auto& m = a["moved_first"];
        out += fmt::format("  moved first: {} ({}x its median over the steps before, step {})\n",
                           m["label"].get<std::string>(), m["ratio"].dump(), m["step"].get<int64_t>());
    }
    if (!a.contains("batch")) return out;
    out += fmt::format("  the batch: {} sequences, mean loss {}; highest loss or gradient:\n",
                       a["batch"]["sequences"].get<long>(), a["batch"]["mean_loss"].dump());
    for (const auto& s : a["batch"]["top"]) {
        std::string docs;
        for (const auto& d : s["documents"])
            docs += fmt::format("{}{} ({}:{})", docs.empty() ? "" : ", ", d["id"].get<std::string>(),
                                d["source"].get<std::string>(), d["offset"].get<int64_t>());
        std::string preview = s["preview"].get<std::string>();
        size_t cut = std::min<size_t>(70, preview.size());
        while (cut < preview.size() && (preview[cut] & 0xc0) == 0x80) cut--;  // not inside a character
        preview.resize(cut);
        std::replace(preview.begin(), preview.end(), '\n', ' ');
        out += fmt::format("    loss {} (#{}) grad {} (#{})  rank {} micro {} row {}  {}\n      \"{}\"  4-gram repeats "
                           "{:.0f}%, {} bits/byte\n",
                           s["loss"].dump(), s["loss_rank"].get<int>(), s["grad_norm"].dump(), s["grad_rank"].get<int>(),
                           s["rank"].get<int>(), s["micro"].get<int>(), s["row"].get<int>(), docs, preview,
                           100 * s["repeated_ngrams"].get<double>(), s["byte_entropy"].dump());
    }
    return out;
}


std::string describe_replay(const nlohmann::json& r) {
    std::string out = fmt::format("step {} of run \"{}\", replayed from {} ({} steps): {}\n", r["step"].get<int>(),
                                  r["run"].get<std::string>(),
                                  r["from_checkpoint"].is_null() ? "the start" : r["from_checkpoint"].get<std::string>(),
                                  r["steps_replayed"].get<int>(), r["verdict"].get<std::string>());
    auto show = [](const nlohmann::json& x) { return x.is_null() ? std::string("-") : fmt::format("{:.9g}", x.get<double>()); };
    out += fmt::format("  loss       stored {}  replayed {}\n", show(r["loss"]["stored"]), show(r["loss"]["replayed"]));
    out += fmt::format("  grad norm  stored {}  replayed {}\n", show(r["grad_norm"]["stored"]),
                       show(r["grad_norm"]["replayed"]));
    if (!r["first_difference"].is_null())
        out += fmt::format("  the numbers first differ at step {}\n", r["first_difference"]["step"].get<int>());
    if (r["sequences_differing"].get<long>() > 0)
        out += fmt::format("  {} of {} sequences' losses differ, on rank(s) {}\n", r["sequences_differing"].get<long>(),
                           r["sequences_compared"].get<long>(), fmt::join(r["ranks_differing"].get<std::vector<int>>(), ", "));
    if (!r["tensor_differing"].is_null())
        out += fmt::format("  the gradient that differs most: {} (relative {:.3g})\n",
                           r["tensor_differing"]["tensor"].get<std::string>(),
                           r["tensor_differing"]["relative"].is_null() ? INFINITY : r["tensor_differing"]["relative"].get<double>());
    out += describe_attribution(r.value("attribution", nlohmann::json()));
    if (r["verdict"] == "reproducible")
        out += "  the same numbers came back: the data or the optimisation, not the hardware, made this step\n";
    else
        out += "  different numbers came back: hardware, silent data corruption or nondeterminism\n";
    if (r.contains("without")) {
        const auto& w = r["without"];
        out += fmt::format("  without its {} highest-loss sequences: grad norm {} ({:.1f}x the mean of the steps before; "
                           "{:.1f}x with them; the spike rule alerts past {:.0f}x): {}\n",
                           w["dropped"].size(), show(w["grad_norm"]), w["ratio"].is_null() ? NAN : w["ratio"].get<double>(),
                           w["ratio_with"].is_null() ? NAN : w["ratio_with"].get<double>(), w["alert_ratio"].get<double>(),
                           w["spike_gone"].get<bool>() ? "the spike goes away" : "the spike does not go away");
    }
    return out;
}

}  // namespace hlat
