// Data-parallel gradient averaging across the replicas of one shard.
//
// Plain data parallelism: the gradients are cut into buckets in the order
// backward finishes them (lm_head and the final norm, then each layer from the
// last, then the embedding). On the step's last micro-batch each bucket's
// MPI_Iallreduce starts as soon as backward is past it, so communication
// overlaps the rest of backward; finish() waits for the stragglers.
//
// ZeRO-1: the flat buffer is split into dp contiguous ranges; finish() reduce-
// scatters the gradients so each rank holds the average of its own range, the
// optimizer updates that range only, and gather_params() all-gathers the
// updated parameters.
//
// In bf16 reduction (precision.reduce_bf16) the values travel as bf16 and every
// partial sum is rounded to bf16, as a bf16 all-reduce does.
#pragma once

#include "trainer/model/bf16.h"
#include "trainer/config/faults.h"
#include "trainer/model/model.h"
#include "trainer/parallel/parallel.h"

#include <chrono>
#include <cstdint>
#include <vector>

namespace hlat {

struct CommStats {
    double seconds = 0.0;          // from the first reduction's start to the last one's completion
    double exposed_seconds = 0.0;  // of which the step waited, after backward
};

// ZeRO-1's split of n parameters over dp replicas: replica r owns
// [bounds[r], bounds[r+1]). The checkpoint writer gathers by the same split.
std::vector<long> zero1_bounds(long n, int dp);

class GradReducer {
  public:
    // Installs itself as the model's grads-ready hook. With zero1 the shard of
    // this rank is [shard_begin(), shard_end()).
    GradReducer(Parallel& parallel, Model& model, bool zero1, bool reduce_bf16, const Faults& faults);
    ~GradReducer();

    // Before the backward of the step's last micro-batch: from then on the
    // model's hook starts the buckets' reductions (plain data parallelism).
    void arm(int step);
    // Completes the reduction: every rank then holds the averaged gradients
    // (plain) or the average of its own range (ZeRO-1).
    CommStats finish();
    // ZeRO-1, after the optimizer step: every rank gets every range's parameters.
    void gather_params();

    bool zero1() const { return zero1_; }
    // The range of the flat buffer this rank updates: its own under ZeRO-1, all of it otherwise.
    long shard_begin() const { return zero1_ ? begin_[rank_] : 0; }
    long shard_end() const { return zero1_ ? begin_[rank_ + 1] : begin_.back(); }

  private:
    struct Segment {
        long offset, count;
        std::string name;  // of the tensor slice, as the skip fault names it
    };
    struct Bucket {
        std::vector<Segment> segments;
        long count = 0;
        std::vector<float> values;     // packed fp32: what is reduced, or the bf16 result widened
        std::vector<bf16> values16;    // packed bf16, in bf16 reduction
        std::vector<float> previous;   // the stale fault's last reduced values
        MPI_Request request = MPI_REQUEST_NULL;
        bool started = false;
    };
    void on_grads_ready(int stage);
    void start(Bucket& b);
    void unpack(Bucket& b);
    bool faulty_rank() const { return rank_ == size_ - 1; }
    bool fault_active(AllreduceBug bug) const;
    void poll();
    CommStats finish_zero1();

    Parallel& parallel_;
    Model& model_;
    bool zero1_, bf16_;
    Faults faults_;
    int rank_, size_;
    std::vector<Bucket> buckets_;
    std::vector<int> stage_bucket_;  // bucket of model stage s at index s + 1
    std::vector<long> begin_;        // ZeRO-1 ranges: rank r owns [begin_[r], begin_[r+1])
    std::vector<int> counts_, displs_;  // the same ranges, as MPI's counts and displacements
    std::vector<bf16> send16_;          // ZeRO-1 bf16 reduce-scatter: all gradients out
    std::vector<float> recv_;           // and this rank's range back
    std::vector<bf16> recv16_;
    bool armed_ = false, any_started_ = false;
    int step_ = 0;
    std::chrono::steady_clock::time_point first_start_, last_done_;
    MPI_Op bf16_sum_ = MPI_OP_NULL;
};

}  // namespace hlat
