// What the store holds, as plain structs: the trainer and other trainers write
// them, detectors and the web server read them. Times are seconds since the
// Unix epoch. A metric value may be NaN or Inf: they are kept (NaN is stored
// as SQL NULL, the only way SQLite keeps it).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hlat::telemetry {

struct MetricPoint {
    std::string key;   // e.g. "loss", "grad_norm", "grad_norm/layers.0.qkv_proj"
    int64_t step;
    double value;
    double wall_time;
};

// A statistic over layers, heads or tensors at one step: one point whose
// value is a vector, stored as one row per step and drawn as a heatmap
// (docs/internals.md lists the keys). labels name the elements, in order
// ("layers.3.head.5", "layers.0.qkv_proj"); a source sends them with a key's
// first point and may leave them null after (the run's stored labels stand).
// Values are float32; NaN is kept.
struct VectorPoint {
    std::string key;  // e.g. "attn_logit_max"
    int64_t step;
    std::vector<float> values;
    double wall_time;
    std::shared_ptr<const std::vector<std::string>> labels;
};

// What one step trained on (issue 36): `data` is JSON, as docs/provenance.md
// says (the sequences of every rank and micro-batch with their documents by
// number and their losses; or the batch ids an external trainer sent).
struct BatchRecord {
    int64_t step;
    std::string data;
    double wall_time;
};

// A document that batches name by number: its id, the file it came from and
// the byte offset of its record there (a JSONL line's first byte).
struct DocumentRecord {
    int64_t ref;
    std::string doc_id;
    std::string source;
    int64_t offset;
};

struct RankMetricPoint {
    std::string key;
    int64_t step;
    int rank;
    double value;
    double wall_time;
};

// Kinds: start, restart, heartbeat, checkpoint, stop, crash, halt.
struct Event {
    std::string kind;
    int64_t step;
    double wall_time;
    std::string detail;  // free text or JSON
};

struct Alert {
    std::string kind;      // detector name, e.g. "grad_spike"
    std::string severity;  // "info", "warning", "critical"
    int64_t step;
    std::string message;   // a sentence a person understands
    std::string data;      // JSON with the numbers behind it
    double wall_time;
};

struct CheckpointRecord {
    int64_t step;
    std::string path;
    double wall_time;
};

struct EvalRecord {
    int64_t step;
    std::string task;
    std::string metric;
    double value;
    double wall_time;
    int64_t tokens = 0;  // tokens seen by the model at that step
};

// A run as the runs table holds it.
struct RunRecord {
    int64_t id = 0;
    std::string name;
    std::string config;     // JSON
    std::string precision;
    std::string status;     // running, finished, halted, crashed, stopped, stale
    std::string host;
    std::string git_revision;
    std::string source;     // "hlat", "ingest" (a log file) or "client" (the Python client)
    // JSON object of what the run says of itself beyond the config: known keys
    // bytes_per_param (of training state, as allocated), world_size,
    // bf16_matmul_engine, halt ("trainer", "client", "exit", "signal", "none":
    // what a requested halt does), format. Absent means unknown.
    std::string meta = "{}";
    std::string tags = "[]";  // JSON array of strings, set from the page
    std::string note;         // free text, set from the page
    double started_at = 0.0;
    double ended_at = 0.0;  // 0 while running
};

}  // namespace hlat::telemetry
