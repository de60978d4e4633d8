// hlat eval (score a checkpoint, or each checkpoint of a run as it lands) and
// hlat make-tasks (the frozen task files, from a config's held-out split).
#include "cli/commands.h"
#include "cli/options.h"
#include "eval/evaluator.h"
#include "eval/make_tasks.h"
#include "trainer/config/config.h"
#include "trainer/data/dataset.h"

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <omp.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <csignal>
#include <fstream>
#include <sstream>

namespace hlat::cli {
namespace po = boost::program_options;

namespace {

std::atomic<bool> g_stop_watching{false};
extern "C" void stop_watching(int) { g_stop_watching = true; }

const char* kDefaultTasks =
    "data/tasks/heldout_perplexity.jsonl,data/tasks/next_sentence_mc4.jsonl,data/tasks/cloze_lastword.jsonl";

std::vector<eval::TaskFile> read_tasks(const std::string& list) {
    std::vector<eval::TaskFile> tasks;
    std::stringstream ss(list);
    for (std::string path; std::getline(ss, path, ',');)
        if (!path.empty()) tasks.push_back(eval::read_task_file(path));
    if (tasks.empty()) throw std::runtime_error("--tasks names no task file");
    return tasks;
}

}  // namespace

int eval_command(int argc, char** argv) {
    po::options_description opts("hlat eval options");
    opts.add_options()
        ("help,h", "print this help")
        ("checkpoint", po::value<std::string>()->default_value(""), "score this checkpoint folder and print a table")
        ("watch", po::value<std::string>()->default_value(""),
         "score each checkpoint of this run folder as it lands, into the store's evals table")
        ("tasks", po::value<std::string>()->default_value(kDefaultTasks), "task files (JSONL), comma-separated")
        ("limit", po::value<long>()->default_value(0), "score only the first N items of each task; 0: all")
        ("rolling-context", po::value<int>()->default_value(0),
         "perplexity windows give each token at least this many tokens of context, minus one; 0: half the model's length")
        ("threads", po::value<int>()->default_value(1), "OpenMP threads (the trainer keeps the others)")
        ("json", po::bool_switch(), "print the results as JSON instead of a table (--checkpoint)")
        ("log-samples", po::value<std::string>()->default_value(""),
         "write every item's token ids and log-likelihoods to this JSONL file (--checkpoint)")
        ("store", po::value<std::string>()->default_value("runs/hlat.db"), "telemetry store (--watch)")
        ("run", po::value<std::string>()->default_value(""), "run name in the store (--watch); default: the folder's name")
        ("poll", po::value<double>()->default_value(2.0), "seconds between looks for new checkpoints (--watch)")
        ("exit-when-done", po::bool_switch(),
         "stop watching once the run has ended and all its checkpoints are scored");
    auto parsed = parse_options(
        argc, argv, opts,
        "usage: hlat eval --checkpoint DIR [options]\n       hlat eval --watch RUN_DIR [options]\n\n"
        "Scores checkpoints on task files the way lm-evaluation-harness scores them (docs/evaluation.md).",
        "\nA checkpoint is read only once its manifest is written and every file matches it.\n");
    if (!parsed) return 0;
    const po::variables_map& vm = *parsed;
    const std::string checkpoint = vm["checkpoint"].as<std::string>(), watch = vm["watch"].as<std::string>();
    if (checkpoint.empty() == watch.empty()) throw std::runtime_error("give exactly one of --checkpoint and --watch");
    if (!watch.empty() && (vm["json"].as<bool>() || !vm["log-samples"].as<std::string>().empty()))
        throw std::runtime_error("--json and --log-samples go with --checkpoint; --watch writes to the store");
    if (vm["threads"].as<int>() < 1) throw std::runtime_error("--threads must be >= 1");
    if (vm["limit"].as<long>() < 0) throw std::runtime_error("--limit must be >= 0");
    if (vm["rolling-context"].as<int>() < 0) throw std::runtime_error("--rolling-context must be >= 0");
    if (vm["poll"].as<double>() <= 0) throw std::runtime_error("--poll must be > 0");
    omp_set_num_threads(vm["threads"].as<int>());

    std::vector<eval::TaskFile> tasks = read_tasks(vm["tasks"].as<std::string>());
    eval::TaskOptions options;
    options.limit = vm["limit"].as<long>();
    options.rolling_context = vm["rolling-context"].as<int>();

    if (!watch.empty()) {
        eval::WatchOptions w;
        w.run_dir = watch;
        w.store = vm["store"].as<std::string>();
        w.run_name = vm["run"].as<std::string>();
        w.poll_seconds = vm["poll"].as<double>();
        w.exit_when_done = vm["exit-when-done"].as<bool>();
        std::signal(SIGINT, stop_watching);
        std::signal(SIGTERM, stop_watching);
        spdlog::info("watching {}/checkpoints: {} tasks, results into {}", watch, tasks.size(), w.store);
        int scored = eval::watch_run(tasks, w, options, g_stop_watching);
        spdlog::info("scored {} checkpoints", scored);
        return 0;
    }

    std::ofstream samples;
    const std::string samples_path = vm["log-samples"].as<std::string>();
    if (!samples_path.empty()) {
        samples.open(samples_path);
        if (!samples) throw std::runtime_error(fmt::format("cannot write {}", samples_path));
        options.on_sample = [&](const nlohmann::json& j) { samples << j.dump() << "\n"; };
    }
    eval::CheckpointEval result = eval::evaluate_checkpoint(checkpoint, tasks, options);
    for (const std::string& w : result.warnings) spdlog::warn("{}", w);
    if (vm["json"].as<bool>())
        fmt::print("{}\n", eval::results_to_json(result).dump(2));
    else
        fmt::print("{}", eval::format_results(result));
    return 0;
}

int make_tasks_command(int argc, char** argv) {
    po::options_description opts("hlat make-tasks options");
    opts.add_options()
        ("help,h", "print this help")
        ("config", po::value<std::string>()->default_value("configs/demo.json"),
         "training config whose data section names the corpus and the held-out split")
        ("out", po::value<std::string>()->default_value("data/tasks"), "folder for the task files")
        ("seed", po::value<unsigned long long>()->default_value(1234), "seed of every random choice")
        ("items", po::value<long>()->default_value(500), "items per task, at most")
        ("force", po::bool_switch(), "overwrite existing task files (they are frozen otherwise)");
    auto parsed = parse_options(
        argc, argv, opts,
        "usage: hlat make-tasks [options]\n\nBuilds heldout_perplexity, next_sentence_mc4 and cloze_lastword from "
        "the held-out split,\ndropping items that share a 13-word sequence with the training text.");
    if (!parsed) return 0;
    const po::variables_map& vm = *parsed;
    if (vm["items"].as<long>() < 1) throw std::runtime_error("--items must be >= 1");
    TrainConfig config = load_config(vm["config"].as<std::string>());
    if (config.data.corpus.empty()) throw std::runtime_error("the config has no data.corpus to build tasks from");
    eval::MakeTasksOptions options;
    options.out_dir = vm["out"].as<std::string>();
    options.seed = vm["seed"].as<unsigned long long>();
    options.items = vm["items"].as<long>();
    options.force = vm["force"].as<bool>();
    Dataset ds = load_dataset(config.data);
    eval::make_tasks(ds, config.data, options);
    return 0;
}

}  // namespace hlat::cli
