// One optimizer step at a time: micro-batches through forward and backward,
// gradient clipping, AdamW at the scheduled learning rate, and the numbers a
// person watching the run needs.
#pragma once

#include "trainer/batch_source.h"
#include "trainer/config.h"
#include "trainer/faults.h"
#include "trainer/grad_reducer.h"
#include "trainer/model.h"
#include "trainer/optimizer.h"
#include "trainer/parallel.h"
#include "trainer/replica_check.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hlat {

struct StepStats {
    int step;               // 0-based index of the optimizer step just taken
    double loss;            // mean over the step's tokens
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
    double tp_comm_seconds;       // tensor-parallel all-reduces inside forward and backward
    // When asked for: ("grad_norm/layers.3.qkv_proj", x), ("param_norm/kind/o_proj", y), ...
    // Gradient norms are taken before clipping, parameter norms after the update.
    std::vector<std::pair<std::string, double>> tensor_norms;
    // When asked for: the reduced gradients compared across data-parallel
    // replicas, before clipping (complete on world rank 0).
    std::optional<ReplicaReport> grad_replicas;
};

class Trainer {
  public:
    // peak_gflops > 0 enables MFU (per process). The model is built but not
    // initialised: call model().init_weights() or load_weights() first. With a
    // distributed job, the model is this rank's tensor-parallel shard, the
    // gradients are averaged over the data-parallel replicas, loss and norms
    // are those of the whole job, and tokens count every replica's.
    Trainer(const TrainConfig& config, BatchSource& data, double peak_gflops, Parallel* parallel = nullptr);
    ~Trainer();

    // One optimizer step; with tensor_norms, also the per-layer and per-kind
    // norms; with hash_grads (distributed, every rank), the replica check of
    // the reduced gradients.
    StepStats step(bool tensor_norms = false, bool hash_grads = false);
    Model& model() { return *model_; }
    AdamW& optimizer() { return *optimizer_; }
    int next_step() const { return step_; }
    long tokens_seen() const { return tokens_seen_; }
    void set_next_step(int step, long tokens_seen) { step_ = step; tokens_seen_ = tokens_seen; }

  private:
    // The phases of step(), in order.
    void accumulate_gradients(StepStats& s);          // forward and backward of every micro-batch
    void finish_reduction(StepStats& s);              // data-parallel gradient all-reduce
    void clip_gradients(StepStats& s, bool tensor_norms);
    void apply_update(StepStats& s, bool tensor_norms);  // AdamW, ZeRO-1 gather, parameter norms
    void count_tokens(StepStats& s);

    TrainConfig config_;
    BatchSource& data_;
    double peak_gflops_;
    Parallel* parallel_;
    Faults faults_;
    std::unique_ptr<Model> model_;
    std::unique_ptr<GradReducer> reducer_;
    std::unique_ptr<AdamW> optimizer_;
    std::vector<int32_t> inputs_, targets_;
    int step_ = 0;
    long tokens_seen_ = 0;
    bool weights_rounded_ = false;
};

// Sets the thread count (OpenMP's, which oneDNN shares) for the whole process.
void set_thread_count(int threads);

}  // namespace hlat
