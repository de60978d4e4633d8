// What one optimizer step measured, and the per-step metrics it becomes:
// the step's points (stored and detected by the run session) and the
// metrics JSONL's step records both come from step_metrics(). A new scalar of
// the step is one line where it is computed, `s.record("key", value)`; the
// fields below are what the progress line, the run hooks and the tests read,
// and step_metrics() writes each of them once.
#pragma once

#include "telemetry/records.h"
#include "trainer/data/loader.h"
#include "trainer/parallel/replica_check.h"

#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hlat {

// One per-step metric: its key in the store and the JSONL, and its value.
struct StepMetric {
    enum class Kind { Real, Count, Flag };  // how the JSONL writes it: 0.5, 1234, true
    enum class When { Always, NonZero, Measured };  // the store skips NonZero ones at 0, both skip unmeasured (NaN) ones
    std::string key;
    double value;
    Kind kind = Kind::Real;
    When when = When::Always;
};

struct StepStats {
    int step;               // 0-based index of the optimizer step just taken
    double loss;            // mean over the step's tokens
    double z_loss = NAN;    // mean z-loss term, model.z_loss * (log Z)^2 (not in loss); NaN when off
    double grad_norm;       // global L2 norm before clipping
    bool clipped;
    double param_norm;      // global L2 norm after the update
    double lr;
    long tokens_seen;       // after this step
    double step_seconds;
    double data_seconds, forward_seconds, backward_seconds, optimizer_seconds;
    double tokens_per_second;
    double mfu;             // model FLOPs/s over peak_gflops; 0 when the peak is unknown
    bool update_skipped;    // the loss or gradient was not finite: the weights were left as they were
    double comm_seconds;    // data-parallel gradient reduction (and ZeRO-1 parameter gather)
    double comm_exposed_seconds;  // of which the step waited for; the rest overlapped backward
    double tp_comm_seconds;       // tensor-parallel collectives inside forward and backward
    double compute_seconds;       // forward, backward and optimizer less the time in communication
    // bf16 modes: the share of weights whose non-zero update left the stored
    // value unchanged (lost in rounding), overall and per tensor kind
    // ("lost_updates/kind/o_proj", x); NaN and empty in fp32 and mixed.
    double lost_updates;
    std::vector<std::pair<std::string, double>> lost_updates_by_kind;
    // When asked for: ("grad_norm/layers.3.qkv_proj", x), ("param_norm/kind/o_proj", y), ...
    // Gradient norms are taken before clipping, parameter norms after the update.
    std::vector<std::pair<std::string, double>> tensor_norms;
    // The model's internals (docs/internals.md): the output logits' log Z
    // (mean and max over the step's tokens) and largest logit; NaN when not
    // measured.
    double logz_mean = NAN, logz_max = NAN, logit_max = NAN;
    // Statistics over heads, blocks and tensors, every step: ("attn_logit_max",
    // labels "layers.l.head.h", L*NH values), ("update_ratio", labels
    // "layers.l.qkv_proj", ...). step and wall_time are left 0.
    std::vector<telemetry::VectorPoint> internals;
    // When asked for: the reduced gradients compared across data-parallel
    // replicas, before clipping (complete on world rank 0).
    std::optional<ReplicaReport> grad_replicas;
    // What this rank trained on (docs/provenance.md): per micro-batch the
    // loader's provenance (empty for a token file), and per sequence (micro
    // major) its loss and its logits' gradient norm.
    std::vector<BatchProvenance> provenance;
    std::vector<float> sequence_losses, sequence_grad_norms;
    // Scalars recorded where they are computed, in that order, after the fields' own.
    std::vector<StepMetric> recorded;
    void record(std::string key, double value, StepMetric::Kind kind = StepMetric::Kind::Real,
                StepMetric::When when = StepMetric::When::Always) {
        recorded.push_back({std::move(key), value, kind, when});
    }
};

// The step's metrics: its fields' in a fixed order, then what was recorded
// (tensor norms not included: their keys are built per tensor).
std::vector<StepMetric> step_metrics(const StepStats& s);

}  // namespace hlat
