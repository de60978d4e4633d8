// hlat train: parses options into a config and run options, then runs.
#include "cli/commands.h"
#include "cli/options.h"
#include "trainer/config/config.h"
#include "trainer/run/train.h"

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include <iostream>
#include <sstream>
#include <vector>

namespace hlat::cli {
namespace po = boost::program_options;

// The config file with the command line's overrides, validated.
static TrainConfig effective_config(const po::variables_map& vm) {
    std::string config_path = vm["config"].as<std::string>();
    TrainConfig config = config_path.empty() ? TrainConfig{} : load_config(config_path);
    if (!vm["data"].as<std::string>().empty()) config.run.data = vm["data"].as<std::string>();
    if (!vm["out-dir"].as<std::string>().empty()) config.run.out_dir = vm["out-dir"].as<std::string>();
    std::string store = vm["store"].as<std::string>();
    if (!store.empty()) config.run.store = store == "none" ? "" : store;
    if (!vm["name"].as<std::string>().empty()) config.run.name = vm["name"].as<std::string>();
    if (vm["threads"].as<int>() < 0) throw std::runtime_error("--threads must be >= 0");
    if (vm["threads"].as<int>() > 0) config.run.threads = vm["threads"].as<int>();
    if (vm.count("inject"))
        for (const std::string& spec : vm["inject"].as<std::vector<std::string>>()) config.run.inject.push_back(spec);
    if (!vm["precision"].as<std::string>().empty()) override_precision_mode(config, vm["precision"].as<std::string>());
    for (const char* key : {"dp", "tp"})
        if (vm[key].as<int>() < 0) throw std::runtime_error(fmt::format("--{} must be >= 1", key));
    if (vm["dp"].as<int>() > 0) config.parallel.dp = vm["dp"].as<int>();
    if (vm["tp"].as<int>() > 0) config.parallel.tp = vm["tp"].as<int>();
    if (vm.count("zero1")) config.parallel.zero1 = true;
    if (vm.count("sp")) config.parallel.sp = true;
    if (vm.count("price")) config.run.price_per_rank_hour = vm["price"].as<double>();
    validate_config(config);
    return config;
}

// "12,13,40" -> {12, 13, 40}; anything but non-negative integers is refused.
static std::vector<long> parse_batch_list(const std::string& text) {
    std::vector<long> out;
    std::stringstream in(text);
    for (std::string item; std::getline(in, item, ',');) {
        size_t used = 0;
        long v = -1;
        try {
            v = std::stol(item, &used);
        } catch (const std::exception&) {
        }
        if (used != item.size() || v < 0)
            throw std::runtime_error(fmt::format("--skip-batches: \"{}\" is not a batch index (an integer >= 0)", item));
        out.push_back(v);
    }
    return out;
}

int train_command(int argc, char** argv) {
    po::options_description opts("hlat train options");
    opts.add_options()
        ("help,h", "print this help")
        ("config", po::value<std::string>()->default_value(""),
         "training config JSON; fields left out take the defaults listed below")
        ("data", po::value<std::string>()->default_value(""),
         "binary token file; overrides run.data (used when data.corpus is empty)")
        ("steps", po::value<int>()->default_value(0),
         "stop once this many optimizer steps are done in total, resumed ones included; 0: schedule.total_steps")
        ("threads", po::value<int>()->default_value(0), "thread count; 0 keeps run.threads")
        ("out-dir", po::value<std::string>()->default_value(""), "run folder; overrides run.out_dir")
        ("store", po::value<std::string>()->default_value(""),
         "telemetry store (SQLite file); overrides run.store; \"none\" disables it")
        ("name", po::value<std::string>()->default_value(""), "run name in the store; overrides run.name")
        ("resume", "continue from the latest good checkpoint in the run folder")
        ("resume-from", po::value<std::string>()->default_value(""),
         "continue from this checkpoint folder rather than the latest (how hlat run rewinds)")
        ("skip-batches", po::value<std::string>()->default_value(""),
         "comma-separated batch indices of the data stream never to train on, kept in the loader's state "
         "(how hlat run skips the batches of a rewind_skip alert)")
        ("allow-data-change", "with --resume: accept a different corpus, tokenizer or world size")
        ("init", po::value<std::string>()->default_value(""),
         "start from these weights (safetensors) instead of a random init")
        ("save", po::value<std::string>()->default_value(""), "write the final weights here (safetensors)")
        ("metrics-jsonl", po::value<std::string>()->default_value(""),
         "append a start record, one record per step and the held-out evaluations to this file")
        ("inject", po::value<std::vector<std::string>>()->multitoken()->composing(),
         "faults to inject, e.g. mask_leak@100 grad_spike@50:100 nan@70 lr_spike@60:10:5 (added to run.inject)")
        ("precision", po::value<std::string>()->default_value(""),
         "fp32, bf16, bf16_sr, bf16_kahan or mixed; overrides precision.mode")
        ("dp", po::value<int>()->default_value(0),
         "data-parallel replicas; overrides parallel.dp (run under mpirun -np dp*tp)")
        ("tp", po::value<int>()->default_value(0), "tensor-parallel ranks per replica; overrides parallel.tp")
        ("price", po::value<double>(), "price of one rank for an hour, for the run's cost per 4M tokens (run.price_per_rank_hour)")
        ("zero1", "shard the optimizer state across the data-parallel replicas (parallel.zero1)")
        ("sp", "sequence parallelism beside --tp: the norms and residual adds split across its ranks (parallel.sp)")
        ("print-config", "print the effective config as JSON and exit");
    auto parsed = parse_options(argc, argv, opts, "usage: hlat train [options]",
                                "\nconfig fields and defaults:\n" + config_to_json(TrainConfig{}).dump(2) + "\n");
    if (!parsed) return 0;
    const po::variables_map& vm = *parsed;

    TrainConfig config = effective_config(vm);

    TrainOptions options;
    options.steps = vm["steps"].as<int>();
    if (options.steps < 0) throw std::runtime_error("--steps must be >= 0");
    options.resume = vm.count("resume") > 0;
    options.resume_from = vm["resume-from"].as<std::string>();
    options.skip_batches = parse_batch_list(vm["skip-batches"].as<std::string>());
    options.allow_data_change = vm.count("allow-data-change") > 0;
    options.init_weights = vm["init"].as<std::string>();
    options.save_weights = vm["save"].as<std::string>();
    options.metrics_jsonl = vm["metrics-jsonl"].as<std::string>();
    options.faults = parse_faults(config.run.inject);  // the run's one parse: a bad spec fails --print-config too
    check_faults_fit(options.faults, config.parallel);
    if (vm.count("print-config")) {
        std::cout << config_to_json(config).dump(2) << "\n";
        return 0;
    }
    return train(config, options);
}

}  // namespace hlat::cli
