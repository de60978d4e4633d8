// Training configuration: one JSON file with sections model, optimizer,
// schedule, data, run, precision and detectors. Every field has a documented default (see README); a field
// of the wrong type, out of range, or unknown is an error naming it.
#pragma once

#include "detectors/config.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace hlat {

enum class InitScaling { PerLayer, TotalLayers, None };

struct ModelConfig {
    int vocab_size = 8192;
    int dim = 256;          // C
    int n_layers = 4;       // L
    int n_heads = 4;        // NH
    int n_kv_heads = 4;     // NKV, divides NH
    int hidden_dim = 704;   // H, SwiGLU width
    int max_seq_len = 256;  // T
    double norm_eps = 1e-5;
    double rope_theta = 10000.0;
    double init_std = 0.02;
    // Output projections of layer l (1-based) scaled by 1/sqrt(2l) (per_layer),
    // by 1/sqrt(2L) (total_layers), or not at all (none).
    InitScaling init_scaling = InitScaling::PerLayer;

    int head_dim() const { return dim / n_heads; }
    int qkv_dim() const { return (n_heads + 2 * n_kv_heads) * head_dim(); }
};

struct OptimizerConfig {
    double beta1 = 0.9;
    double beta2 = 0.95;
    double eps = 1e-8;
    double weight_decay = 0.1;
    bool decay_norms_and_embeddings = true;  // false: no decay on norm weights and the embedding
    double grad_clip = 1.0;                  // global L2 norm; 0 disables clipping
};

struct ScheduleConfig {
    double max_lr = 3e-4;
    double min_lr = 3e-5;
    int warmup_steps = 100;
    int total_steps = 2000;
};

// Real text through the online loader. With no corpus, run.data (a binary
// token file) is used instead.
struct DataConfig {
    std::vector<std::string> corpus;  // .jsonl, .jsonl.zst or plain text files
    std::string text_field = "text";  // of JSONL records
    std::string tokenizer;            // SentencePiece model; required with a corpus
    double heldout_percent = 10.0;    // share of documents (by id hash) held out
    bool dedup_paragraphs = true;     // drop exact-duplicate paragraphs corpus-wide first
    int prefetch_batches = 8;         // ready batches the loader keeps queued
};

struct RunConfig {
    int batch_size = 8;      // B, sequences per micro-batch
    int seq_len = 256;       // T of training sequences, <= model.max_seq_len
    int grad_accum = 1;      // micro-batches per optimizer step
    unsigned long long seed = 1234;
    int threads = 2;
    bool activation_checkpointing = false;  // recompute attention probabilities in backward
    std::string data;                       // binary token file
    std::string data_dtype = "uint16";      // uint16 or uint32
    double peak_gflops = 0.0;               // 0: measure with an sgemm probe at start
    int log_every = 1;
    std::string out_dir = "runs/default";  // run folder: checkpoints live here
    std::string name;                       // run name in the store; empty: the out_dir's folder name
    std::string store = "runs/hlat.db";     // telemetry store (SQLite); empty: none
    int tensor_norms_every = 50;            // steps between per-layer, per-tensor norms; 0: never
    // Faults to inject, e.g. "mask_leak@100", "grad_spike@50:100", "nan@70",
    // "lr_spike@60:10:5" (see faults.h); recorded with the run's config.
    std::vector<std::string> inject;
    int checkpoint_every = 0;               // steps between checkpoints; 0: only at the end
    int keep_checkpoints = 3;               // newest kept; 0 keeps all
    int eval_every = 100;                   // steps between held-out evaluations; 0: never
    int eval_batches = 4;                   // held-out batches per evaluation
};

// Training precision (issue 7). The mode says where values live and how they
// are rounded; the knobs choose fp32 or bf16 for the parts the paper's slides
// compare. Matmuls in every bf16 mode take bf16 inputs and accumulate in fp32.
enum class PrecisionMode {
    Fp32,    // everything fp32
    Bf16,    // weights, gradients, Adam moments and activations bf16, written back round-to-nearest-even
    Bf16Sr,  // as Bf16, but the parameter update (and with sr_moments the moments) rounds stochastically
    Mixed,   // fp32 master weights, gradients and optimizer state; bf16 copies for compute
};

struct PrecisionConfig {
    PrecisionMode mode = PrecisionMode::Fp32;
    bool softmax_bf16 = false;     // attention softmax and cross-entropy probabilities rounded to bf16
    bool grad_accum_bf16 = false;  // the gradient sum over micro-batches kept in bf16
    bool reduce_bf16 = false;      // gradient reductions across ranks in bf16 (distributed trainer)
    bool sr_moments = false;       // bf16_sr: the Adam moments round stochastically too
    bool sr_key_rank = false;      // key the rounding bits by rank too: replicas then round differently

    bool bf16_compute() const { return mode != PrecisionMode::Fp32; }
    bool bf16_state() const { return mode == PrecisionMode::Bf16 || mode == PrecisionMode::Bf16Sr; }
};

const char* precision_mode_name(PrecisionMode m);

// Distributed training (issue 9): the job is `mpirun -np dp*tp hlat train`.
struct ParallelConfig {
    int dp = 1;                 // data-parallel replicas
    int tp = 1;                 // tensor-parallel ranks per replica (Megatron layout)
    bool zero1 = false;         // shard the optimizer state across the dp replicas
    int check_every = 10;       // steps between replica hashes and TP drift measurements; 0: never
    bool hash_grads = false;    // hash the reduced gradients too (they must agree across replicas)
    int resync_every = 0;       // copy replicated weights from TP rank 0 every this many steps; 0: never
};

struct TrainConfig {
    ModelConfig model;
    OptimizerConfig optimizer;
    ScheduleConfig schedule;
    DataConfig data;
    RunConfig run;
    PrecisionConfig precision;
    ParallelConfig parallel;
    detectors::DetectorsConfig detectors;
};

// Parses and validates a config; throws ConfigError naming the offending field.
TrainConfig config_from_json(const nlohmann::json& j);
// Reads a JSON file and validates it; errors name the file and the field.
TrainConfig load_config(const std::string& path);
// Every field with its value, for run records and --help.
nlohmann::json config_to_json(const TrainConfig& c);
// Checks cross-field constraints (heads divide dim, ...); throws ConfigError.
void validate_config(const TrainConfig& c);

struct ConfigError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

}  // namespace hlat
