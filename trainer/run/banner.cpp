#include "trainer/run/build.h"

#include "trainer/model/flops.h"
#include "trainer/model/kernels_bf16.h"
#include "trainer/parallel/sharding.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <string>

namespace hlat {

// "254.1 MiB", or "32 KiB" where MiB would round to nothing.
static std::string mib(long bytes) {
    return bytes < 104858 ? fmt::format("{:.0f} KiB", bytes / 1024.0) : fmt::format("{:.1f} MiB", bytes / 1048576.0);
}

// The tensor-parallel layout, and the activation bytes a rank keeps for
// backward, the stream's part (what sequence parallelism splits) named.
static void log_layout_and_activations(const RunContext& run) {
    const Model& model = run.trainer.model();
    const Parallel& parallel = run.parallel;
    const long rows = (long)run.config.run.batch_size * run.config.run.seq_len;
    if (model.is_shard())
        spdlog::info("tensor parallelism {}{}{}", parallel.tp_size(),
                     model.shard().shares_kv()
                         ? fmt::format(" | each kv head shared by {} ranks", model.shard().kv_replicas)
                         : "",
                     model.sequence_parallel()
                         ? fmt::format(" | sequence parallel: {} of the {} token rows per rank", model.stream_rows(),
                                       rows)
                         : "");
    const std::string split =
        model.sequence_parallel() ? fmt::format(", this rank's 1/{} of the rows, + {} of gather buffers",
                                                parallel.tp_size(), mib(model.sequence_parallel_buffer_bytes()))
                                  : "";
    const long without = model.activation_bytes_without_checkpointing();
    spdlog::info("activations: {}{} (residual stream and norms {}{}){}", mib(model.activation_bytes()),
                 parallel.distributed() ? " per rank" : "", mib(model.stream_activation_bytes()), split,
                 run.config.run.activation_checkpointing
                     ? fmt::format(" with attention recomputed ({} without: saves {})", mib(without),
                                   mib(without - model.activation_bytes()))
                     : "");
}

void log_banner(const RunContext& run, double peak_gflops, bool peak_measured) {
    const TrainConfig& config = run.config;
    const Parallel& parallel = run.parallel;
    const int B = config.run.batch_size, T = config.run.seq_len;
    const ModelConfig& m = config.model;
    const Model& model = run.trainer.model();
    const bool bf16_matmuls = config.precision.bf16_compute();
    spdlog::info("threads: {} (OpenMP, shared by oneDNN){}", config.run.threads,
                 parallel.distributed() ? " per process" : "");
    const PrecisionConfig& p = config.precision;
    auto dtype = [](bool bf16) { return bf16 ? "bf16" : "fp32"; };
    spdlog::info("precision: {}{}", precision_mode_name(p.mode),
                 bf16_matmuls ? fmt::format(" | bf16 matmuls: {} | attention's products {} | softmax {} | grad "
                                            "accumulation {}",
                                            bf16_matmul_engine_name(), dtype(!p.attention_fp32),
                                            dtype(p.softmax_bf16), dtype(p.grad_accum_bf16))
                              : "");
    spdlog::info("model: {} parameters, d {} | {} layers | {}/{} heads | hidden {} | vocab {}",
                 full_parameter_count(m), m.dim, m.n_layers, m.n_heads, m.n_kv_heads, m.hidden_dim, m.vocab_size);
    if (parallel.distributed())
        spdlog::info("this rank holds {} parameters{}; gradient reduction {} in {}{}; optimizer state {:.1f} MiB per "
                     "rank{}",
                     model.num_parameters(), model.is_shard() ? " (its tensor-parallel shard)" : "",
                     config.parallel.zero1 ? "reduce-scatter + all-gather (ZeRO-1)" : "bucketed all-reduce",
                     config.precision.reduce_bf16 ? "bf16" : "fp32",
                     config.parallel.zero1 ? "" : ", overlapped with backward",
                     run.trainer.optimizer().state_bytes() / 1048576.0,
                     config.parallel.zero1 ? fmt::format(" (ZeRO-1: 1/{} of {:.1f} MiB)", parallel.dp_size(),
                                                         model.num_parameters() * 8.0 / 1048576.0)
                                           : "");
    spdlog::info("batch {} x {} x {} accum{} = {} tokens/step", B, T, config.run.grad_accum,
                 parallel.dp_size() > 1 ? fmt::format(" x {} replicas", parallel.dp_size()) : "",
                 (long)B * T * config.run.grad_accum * parallel.dp_size());
    log_layout_and_activations(run);
    spdlog::info("FLOPs/token: {:.3e} = 6N + 12*L*d*T with N = {} (no input embedding) | peak {:.1f} GFLOP/s ({})",
                 flops_per_token(m, T), matmul_parameters(m), peak_gflops,
                 peak_measured ? (bf16_matmuls ? "measured by bf16 matmul probe" : "measured by sgemm probe")
                                : "from config");
}

}  // namespace hlat
