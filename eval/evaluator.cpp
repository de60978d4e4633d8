#include "eval/evaluator.h"

#include "telemetry/reader.h"
#include "session/run_session.h"
#include "telemetry/writer.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/config/config.h"
#include "trainer/model/weights.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <set>
#include <thread>

namespace fs = std::filesystem;

namespace hlat::eval {

CheckpointEval evaluate_checkpoint(const std::string& dir, const std::vector<TaskFile>& tasks,
                                   const TaskOptions& options) {
    verify_checkpoint(dir);
    CheckpointState state = read_checkpoint_state(dir);
    TrainConfig config = config_from_json(state.config);
    const std::string tokenizer_path = (fs::path(dir) / "tokenizer.model").string();
    if (!fs::exists(tokenizer_path))
        throw std::runtime_error(fmt::format("checkpoint {} has no tokenizer.model: it was trained on a token file, "
                                             "and text tasks need the tokenizer it was made with",
                                             dir));
    Tokenizer tokenizer(tokenizer_path);
    // A model may have more embedding rows than its tokenizer has pieces
    // (vocab padded to a round number), never fewer.
    if (tokenizer.vocab_size() > config.model.vocab_size)
        throw std::runtime_error(fmt::format("checkpoint {}: its tokenizer has {} pieces, more than the model's {}",
                                             dir, tokenizer.vocab_size(), config.model.vocab_size));
    Model model(config.model, 1, config.model.max_seq_len, false);
    load_weights(model, (fs::path(dir) / "model.safetensors").string());
    Scorer scorer(model, tokenizer.eos_id());

    CheckpointEval out;
    out.dir = dir;
    out.step = state.step;
    out.tokens_seen = state.tokens_seen;
    for (const TaskFile& task : tasks) {
        const nlohmann::json* corpus = task.header.contains("corpus") ? &task.header["corpus"] : nullptr;
        if (corpus && corpus->value("fingerprint", "") != state.corpus_fingerprint)
            out.warnings.push_back(fmt::format(
                "{} was built from another corpus or split than this model was trained on: its items were not "
                "checked against this model's training text",
                task.path));
        out.results.push_back(evaluate_task(task, scorer, tokenizer, options));
    }
    return out;
}

static std::string with_stderr(const Metric& m) {
    if (std::isnan(m.stderr_)) return fmt::format("{:.4f}", m.value);
    return fmt::format("{:.4f} ± {:.4f}", m.value, m.stderr_);
}

std::string format_results(const CheckpointEval& eval) {
    std::string out = fmt::format("{} (after {} steps, {} tokens)\n", eval.dir, eval.step, eval.tokens_seen);
    out += fmt::format("{:<22} {:>5} {:<16} {:>18} {:>7} {:>7}\n", "task", "items", "metric", "value", "chance",
                       "seconds");
    for (const TaskResult& r : eval.results) {
        for (size_t i = 0; i < r.metrics.size(); i++) {
            const Metric& m = r.metrics[i];
            const bool first = i == 0;
            const bool accuracy = m.name == "acc" || m.name == "acc_norm";
            out += fmt::format("{:<22} {:>5} {:<16} {:>18} {:>7} {:>7}\n", first ? r.task : "",
                               first ? std::to_string(r.items) : "", m.name, with_stderr(m),
                               accuracy && !std::isnan(r.chance) ? fmt::format("{:.3f}", r.chance) : "",
                               first ? fmt::format("{:.1f}", r.seconds) : "");
        }
    }
    return out;
}

static nlohmann::json number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

nlohmann::json results_to_json(const CheckpointEval& eval) {
    nlohmann::json tasks = nlohmann::json::object();
    for (const TaskResult& r : eval.results) {
        nlohmann::json metrics = nlohmann::json::object();
        for (const Metric& m : r.metrics) {
            metrics[m.name] = number(m.value);
            metrics[m.name + "_stderr"] = number(m.stderr_);
        }
        tasks[r.task] = {{"kind", task_kind_name(r.kind)}, {"items", r.items}, {"chance", number(r.chance)},
                         {"metrics", metrics}, {"tokens_run", r.tokens_run}, {"seconds", r.seconds}};
    }
    return {{"checkpoint", eval.dir}, {"step", eval.step}, {"tokens_seen", eval.tokens_seen}, {"tasks", tasks},
            {"warnings", eval.warnings}};
}

static void write_results(session::RunSession& run, const CheckpointEval& eval) {
    const double t = telemetry::now_seconds();
    // The store counts steps from 0: the checkpoint after n steps is step n - 1,
    // as the trainer records it.
    const int64_t step = eval.step - 1;
    for (const TaskResult& r : eval.results) {
        for (const Metric& m : r.metrics) {
            run.eval({step, r.task, m.name, m.value, t, eval.tokens_seen});
            if (!std::isnan(m.stderr_)) run.eval({step, r.task, m.name + "_stderr", m.stderr_, t, eval.tokens_seen});
        }
        if (!std::isnan(r.chance)) run.eval({step, r.task, "chance", r.chance, t, eval.tokens_seen});
    }
    run.flush();
}

// The scores go to the run through its session, beside the trainer's own
// (which may still be feeding it): no catch-up, nothing to halt.
static std::unique_ptr<session::RunSession> scoring_session(telemetry::Writer& writer, telemetry::Reader& reader,
                                                            const telemetry::RunRecord& run) {
    session::SessionOptions options;
    options.catch_up = false;
    options.halts = false;
    return session::RunSession::attach(writer, reader, run, options);
}

int watch_run(const std::vector<TaskFile>& tasks, const WatchOptions& watch, const TaskOptions& options,
              const std::atomic<bool>& stop) {
    const std::string run_name =
        watch.run_name.empty() ? fs::path(watch.run_dir).lexically_normal().filename().string() : watch.run_name;
    const fs::path root = fs::path(watch.run_dir) / "checkpoints";
    telemetry::Writer writer(watch.store);
    telemetry::Reader reader(watch.store);
    TaskOptions cancellable = options;
    cancellable.cancel = &stop;
    std::unique_ptr<session::RunSession> session;  // the run's, once found
    std::set<int> done;           // steps scored, or found in the store
    std::set<std::string> told;   // incomplete folders already reported
    int scored = 0;
    bool announced = false;
    const auto started = std::chrono::steady_clock::now();
    while (!stop) {
        auto run = reader.find_run(run_name);
        if (!run) {
            if (!announced) spdlog::info("waiting for run \"{}\" to appear in {}", run_name, watch.store);
            announced = true;
            const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
            if (watch.exit_when_done && waited > watch.wait_for_run_seconds)
                throw std::runtime_error(fmt::format("the store {} has no run named \"{}\" after {:.0f} s; --run names "
                                                     "it when it is not the run folder's name",
                                                     watch.store, run_name, waited));
        } else {
            if (done.empty())
                for (const telemetry::EvalRecord& e : reader.evals(run->id))
                    if (e.task == tasks.back().name) done.insert((int)e.step + 1);
            const bool ended = run->status != "running";
            bool pending = false;
            for (const fs::path& dir : checkpoint_dirs(root)) {
                if (stop) break;
                const int step = std::stoi(dir.filename().string().substr(5));  // step_NNNNNNNN
                if (done.count(step)) continue;
                try {
                    CheckpointEval eval = evaluate_checkpoint(dir.string(), tasks, cancellable);
                    for (const std::string& w : eval.warnings) spdlog::warn("{}", w);
                    if (!session || session->run_id() != run->id) session = scoring_session(writer, reader, *run);
                    write_results(*session, eval);
                    fmt::print("{}", format_results(eval));
                    std::fflush(stdout);
                    done.insert(step);
                    scored++;
                } catch (const Cancelled&) {
                    break;  // told to stop mid-checkpoint: nothing of it is stored, the next watcher scores it whole
                } catch (const std::exception& e) {
                    // Not complete yet (no manifest, a file still short), or
                    // deleted by the trainer's keep policy while we looked.
                    // Once the run has ended a folder that does not verify never will.
                    if (fs::exists(dir) && !ended) pending = true;
                    if (told.insert(dir.string()).second) spdlog::info("not scored yet: {}", e.what());
                }
            }
            if (watch.exit_when_done && ended && !pending) break;
        }
        for (int i = 0; i < (int)(watch.poll_seconds * 10) && !stop; i++)
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return scored;
}

}  // namespace hlat::eval
