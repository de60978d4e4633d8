// hlat train: builds the model from a config, trains it on a token file and
// prints one progress line per logged step.
#include "cli/commands.h"
#include "trainer/config.h"
#include "trainer/flops.h"
#include "trainer/token_file.h"
#include "trainer/trainer.h"
#include "trainer/weights.h"

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <fstream>
#include <iostream>

namespace hlat::cli {
namespace po = boost::program_options;

namespace {

std::string format_duration(double seconds) {
    long s = (long)(seconds + 0.5);
    if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
    if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
    return fmt::format("{}s", s);
}

void log_step(const StepStats& s, int total_steps, double eta_seconds) {
    spdlog::info("step {:>6}/{} | loss {:.4f} | grad norm {:.4f}{} | param norm {:.2f} | lr {:.3e} | "
                 "{:.0f} tok/s | MFU {:.1f}% | ETA {}",
                 s.step + 1, total_steps, s.loss, s.grad_norm, s.clipped ? " (clipped)" : "",
                 s.param_norm, s.lr, s.tokens_per_second, 100.0 * s.mfu, format_duration(eta_seconds));
}

nlohmann::json step_json(const StepStats& s) {
    return {{"step", s.step},          {"loss", s.loss},
            {"grad_norm", s.grad_norm}, {"clipped", s.clipped},
            {"param_norm", s.param_norm}, {"lr", s.lr},
            {"tokens_seen", s.tokens_seen}, {"tokens_per_s", s.tokens_per_second},
            {"mfu", s.mfu},            {"step_s", s.step_seconds},
            {"data_s", s.data_seconds}, {"forward_s", s.forward_seconds},
            {"backward_s", s.backward_seconds}, {"optimizer_s", s.optimizer_seconds}};
}

}  // namespace

int train_command(int argc, char** argv) {
    po::options_description opts("hlat train options");
    opts.add_options()
        ("help,h", "print this help")
        ("config", po::value<std::string>()->default_value(""),
         "training config JSON; fields left out take the defaults listed below")
        ("data", po::value<std::string>()->default_value(""),
         "binary token file; overrides run.data")
        ("steps", po::value<int>()->default_value(0),
         "optimizer steps to run; 0 runs schedule.total_steps")
        ("threads", po::value<int>()->default_value(0), "thread count; 0 keeps run.threads")
        ("init", po::value<std::string>()->default_value(""),
         "start from these weights (safetensors) instead of a random init")
        ("save", po::value<std::string>()->default_value(""),
         "write the final weights here (safetensors)")
        ("metrics-jsonl", po::value<std::string>()->default_value(""),
         "append a start record, then one JSON object per step, to this file")
        ("print-config", "print the effective config as JSON and exit");
    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(opts).run(), vm);
    if (vm.count("help")) {
        std::cout << "usage: hlat train [options]\n\n" << opts << "\nconfig fields and defaults:\n"
                  << config_to_json(TrainConfig{}).dump(2) << "\n";
        return 0;
    }
    po::notify(vm);

    std::string config_path = vm["config"].as<std::string>();
    TrainConfig config = config_path.empty() ? TrainConfig{} : load_config(config_path);
    if (!vm["data"].as<std::string>().empty()) config.run.data = vm["data"].as<std::string>();
    if (vm["threads"].as<int>() < 0) throw std::runtime_error("--threads must be >= 0");
    if (vm["threads"].as<int>() > 0) config.run.threads = vm["threads"].as<int>();
    int steps = vm["steps"].as<int>();
    if (steps < 0) throw std::runtime_error("--steps must be >= 0");
    if (steps == 0) steps = config.schedule.total_steps;
    if (vm.count("print-config")) {
        std::cout << config_to_json(config).dump(2) << "\n";
        return 0;
    }
    if (config.run.data.empty())
        throw std::runtime_error("no training data: set run.data in the config or pass --data");

    set_thread_count(config.run.threads);
    const ModelConfig& m = config.model;
    const int B = config.run.batch_size, T = config.run.seq_len;
    TokenFile data(config.run.data, config.run.data_dtype, m.vocab_size, (long)B * T + 1);

    std::ofstream metrics;
    if (!vm["metrics-jsonl"].as<std::string>().empty()) {
        metrics.open(vm["metrics-jsonl"].as<std::string>(), std::ios::app);
        if (!metrics) throw std::runtime_error("cannot open " + vm["metrics-jsonl"].as<std::string>());
    }

    double peak = config.run.peak_gflops;
    bool measured = peak <= 0;
    if (measured) peak = measure_sgemm_peak_gflops();
    Trainer trainer(config, data, peak);
    Model& model = trainer.model();
    if (!vm["init"].as<std::string>().empty()) {
        load_weights(model, vm["init"].as<std::string>());
    } else {
        model.init_weights(config.run.seed);
    }

    spdlog::info("threads: {} (OpenMP and OpenBLAS)", config.run.threads);
    spdlog::info("model: {} parameters, d {} | {} layers | {}/{} heads | hidden {} | vocab {}",
                 model.num_parameters(), m.dim, m.n_layers, m.n_heads, m.n_kv_heads, m.hidden_dim,
                 m.vocab_size);
    spdlog::info("data: {} ({} tokens) | batch {} x {} x {} accum = {} tokens/step", config.run.data,
                 data.size(), B, T, config.run.grad_accum, (long)B * T * config.run.grad_accum);
    spdlog::info("activations: {:.1f} MiB{}", model.activation_bytes() / 1048576.0,
                 config.run.activation_checkpointing
                     ? fmt::format(" with attention recomputed ({:.1f} MiB without: saves {:.1f} MiB)",
                                   model.activation_bytes_without_checkpointing() / 1048576.0,
                                   (model.activation_bytes_without_checkpointing() -
                                    model.activation_bytes()) / 1048576.0)
                     : "");
    spdlog::info("FLOPs/token: {:.3e} = 6N + 12*L*d*T with N = {} (no input embedding) | peak {:.1f} "
                 "GFLOP/s ({})",
                 flops_per_token(m, T), matmul_parameters(m), peak,
                 measured ? "measured by sgemm probe" : "from config");

    if (metrics.is_open())
        metrics << nlohmann::json{{"event", "start"},
                                  {"threads", config.run.threads},
                                  {"peak_gflops", peak},
                                  {"peak_measured", measured},
                                  {"flops_per_token", flops_per_token(m, T)},
                                  {"parameters", model.num_parameters()},
                                  {"config", config_to_json(config)}}
                       .dump()
                << "\n";

    double elapsed = 0.0;
    for (int i = 0; i < steps; i++) {
        StepStats s = trainer.step();
        elapsed += s.step_seconds;
        if (metrics.is_open()) metrics << step_json(s).dump() << "\n" << std::flush;
        if ((i + 1) % config.run.log_every == 0 || i + 1 == steps)
            log_step(s, steps, elapsed / (i + 1) * (steps - i - 1));
    }
    if (!vm["save"].as<std::string>().empty()) {
        save_weights(model, vm["save"].as<std::string>());
        spdlog::info("saved weights to {}", vm["save"].as<std::string>());
    }
    return 0;
}

}  // namespace hlat::cli
