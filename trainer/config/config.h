// Training configuration: one JSON file with sections model, optimizer,
// schedule, data, run, precision and detectors. Every field has a documented default (see README); a field
// of the wrong type, out of range, or unknown is an error naming it.
#pragma once

#include "detectors/config.h"
#include "trainer/config/model_config.h"
#include "trainer/config/optimizer_config.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace hlat {

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
    // The order the loader draws documents in; -1: seed. Set apart from the
    // weights' seed, runs that share an init see different data (and back).
    int data_seed = -1;
    int threads = 2;
    bool activation_checkpointing = false;  // recompute attention probabilities in backward
    std::string data;                       // binary token file
    std::string data_dtype = "uint16";      // uint16 or uint32
    double peak_gflops = 0.0;               // 0: measure with an sgemm probe at start
    double price_per_rank_hour = 0.0;       // what one rank costs an hour (any currency); 0: unknown, no cost figures
    int log_every = 1;
    std::string out_dir = "runs/default";  // run folder: checkpoints live here
    std::string name;                       // run name in the store; empty: the out_dir's folder name
    std::string store = "runs/hlat.db";     // telemetry store (SQLite); empty: none
    int tensor_norms_every = 50;            // steps between per-layer, per-tensor norms; 0: never
    int internals_every = 1;                // steps between the model's internals (docs/internals.md); 0: never
    // Faults to inject, e.g. "mask_leak@100", "grad_spike@50:100", "nan@70",
    // "lr_spike@60:10:5" (see faults.h); recorded with the run's config.
    std::vector<std::string> inject;
    int checkpoint_every = 0;               // steps between checkpoints; 0: only at the end
    int keep_checkpoints = 3;               // newest kept; 0 keeps all
    int eval_every = 100;                   // steps between held-out evaluations; 0: never
    int eval_batches = 4;                   // held-out batches per evaluation
};

// Distributed training (issue 9): the job is `mpirun -np dp*tp hlat train`.
struct ParallelConfig {
    int dp = 1;                 // data-parallel replicas
    int tp = 1;                 // tensor-parallel ranks per replica (Megatron layout)
    // Sequence parallelism beside tensor parallelism (Korthikanti et al.
    // 2022): the RMSNorms and residual adds split along the batch's token
    // rows across the tp ranks instead of repeated on each.
    bool sp = false;
    bool zero1 = false;         // shard the optimizer state across the dp replicas
    int check_every = 10;       // steps between replica hashes and TP drift measurements; 0: never
    bool hash_grads = false;    // hash the reduced gradients too (they must agree across replicas)
    int resync_every = 0;       // copy replicated weights from TP rank 0 every this many steps; 0: never
    // Health check between steps (exact-integer GEMMs on every rank, an
    // all-reduce timed) every this many steps of a distributed run; 0: never.
    int health_every = 100;
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
