#include "trainer/parallel/grad_reducer.h"

#include "trainer/model/bf16.h"

#include <fmt/format.h>

#include <algorithm>

namespace hlat {

using Clock = std::chrono::steady_clock;

namespace {

// The bf16 all-reduce's addition: each partial sum rounded to bf16.
extern "C" void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
    const bf16* a = static_cast<const bf16*>(in);
    bf16* b = static_cast<bf16*>(inout);
    for (int i = 0; i < *len; i++) b[i] = float_to_bf16_rne(bf16_to_float(a[i]) + bf16_to_float(b[i]));
}

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

}  // namespace

std::vector<long> zero1_bounds(long n, int dp) {
    std::vector<long> b;
    for (int r = 0; r <= dp; r++) b.push_back(n * r / dp);
    return b;
}

GradReducer::GradReducer(Parallel& parallel, Model& model, bool zero1, bool reduce_bf16, const Faults& faults)
    : parallel_(parallel),
      model_(model),
      zero1_(zero1),
      bf16_(reduce_bf16),
      faults_(faults),
      rank_(parallel.dp_rank()),
      size_(parallel.dp_size()) {
    const long n = model.num_parameters();
    begin_ = zero1_bounds(n, size_);
    if (size_ > 1 && bf16_) MPI_Op_create(bf16_sum, /*commute=*/1, &bf16_sum_);
    if (size_ > 1 && zero1_) {
        for (int r = 0; r < size_; r++) {
            counts_.push_back((int)(begin_[r + 1] - begin_[r]));
            displs_.push_back((int)begin_[r]);
        }
        recv_.resize(counts_[rank_]);
        if (bf16_) {
            send16_.resize(n);
            recv16_.resize(counts_[rank_]);
        }
    }
    if (size_ == 1 || zero1_) return;

    // Buckets in the order backward completes them; stage s of the model's
    // hook is L for the head, l for layer l, -1 for the embedding.
    const int L = model.config().n_layers;
    stage_bucket_.assign(L + 2, -1);
    auto add_bucket = [&](int stage) {
        stage_bucket_[stage + 1] = (int)buckets_.size();
        buckets_.emplace_back();
    };
    add_bucket(L);
    for (int l = L - 1; l >= 0; l--) add_bucket(l);
    add_bucket(-1);
    for (const TensorKind& k : model.tensor_kinds()) {
        long slice = k.rows * k.cols;
        for (int l = 0; l < (k.layers ? k.layers : 1); l++) {
            int stage = k.layers ? l : k.name == "embed_tokens" ? -1 : L;
            std::string name = k.layers ? fmt::format("layers.{}.{}", l, k.name) : k.name;
            Bucket& b = buckets_[stage_bucket_[stage + 1]];
            b.segments.push_back({k.offset + l * slice, slice, name});
            b.count += slice;
        }
    }
    for (Bucket& b : buckets_) {
        b.values.resize(b.count);
        if (bf16_) b.values16.resize(b.count);
        if (faults_.allreduce_bug == AllreduceBug::Stale) b.previous.resize(b.count);
    }
    model.set_grads_ready_hook([this](int stage) { on_grads_ready(stage); });
}

GradReducer::~GradReducer() {
    model_.set_grads_ready_hook(nullptr);
    for (Bucket& b : buckets_)
        if (b.request != MPI_REQUEST_NULL) MPI_Request_free(&b.request);
    if (bf16_sum_ != MPI_OP_NULL) MPI_Op_free(&bf16_sum_);
}

bool GradReducer::fault_active(AllreduceBug bug) const {
    return faults_.allreduce_bug == bug && faults_.allreduce_bug_from >= 0 && step_ >= faults_.allreduce_bug_from;
}

void GradReducer::arm(int step) {
    step_ = step;
    armed_ = size_ > 1 && !zero1_;
}

void GradReducer::on_grads_ready(int stage) {
    if (!armed_) return;
    poll();
    start(buckets_[stage_bucket_[stage + 1]]);
}

void GradReducer::start(Bucket& b) {
    const float* grads = model_.grads();
    long at = 0;
    for (const Segment& s : b.segments) {
        if (bf16_) {
            for (long i = 0; i < s.count; i++) b.values16[at + i] = float_to_bf16_rne(grads[s.offset + i]);
        } else {
            std::copy(grads + s.offset, grads + s.offset + s.count, b.values.begin() + at);
        }
        at += s.count;
    }
    if (!any_started_) first_start_ = Clock::now();
    any_started_ = true;
    if (bf16_) {
        MPI_Iallreduce(MPI_IN_PLACE, b.values16.data(), (int)b.count, MPI_UINT16_T, bf16_sum_,
                       parallel_.comm(Group::Data), &b.request);
    } else {
        MPI_Iallreduce(MPI_IN_PLACE, b.values.data(), (int)b.count, MPI_FLOAT, MPI_SUM, parallel_.comm(Group::Data),
                       &b.request);
    }
    b.started = true;
}

// Lets MPI progress the reductions in flight (it advances them only inside
// MPI calls) and notes when the last one completed.
void GradReducer::poll() {
    for (Bucket& b : buckets_) {
        if (b.request == MPI_REQUEST_NULL) continue;
        int done = 0;
        MPI_Test(&b.request, &done, MPI_STATUS_IGNORE);
        if (done) last_done_ = Clock::now();
    }
}

void GradReducer::unpack(Bucket& b) {
    const bool sum_bug = faulty_rank() && fault_active(AllreduceBug::Sum);
    const bool stale_bug = faulty_rank() && fault_active(AllreduceBug::Stale);
    const bool skip_bug = fault_active(AllreduceBug::Skip);
    const float scale = sum_bug ? 1.0f : 1.0f / size_;
    if (bf16_)
        for (long i = 0; i < b.count; i++) b.values[i] = bf16_to_float(b.values16[i]);
    if (!b.previous.empty()) {
        // The stale fault: this rank applies the buffer of the step before.
        if (stale_bug) std::swap(b.values, b.previous);
        if (!stale_bug) b.previous = b.values;
    }
    const std::vector<float>& values = b.values;
    float* grads = model_.grads();
    long at = 0;
    for (const Segment& s : b.segments) {
        if (!(skip_bug && s.name == faults_.allreduce_bug_tensor))
            for (long i = 0; i < s.count; i++) grads[s.offset + i] = values[at + i] * scale;
        at += s.count;
    }
}

CommStats GradReducer::finish() {
    if (size_ == 1) return {};
    if (zero1_) return finish_zero1();
    CommStats st;
    for (Bucket& b : buckets_)
        if (!b.started) start(b);
    auto wait_begin = Clock::now();
    for (Bucket& b : buckets_) {
        if (b.request == MPI_REQUEST_NULL) continue;
        MPI_Wait(&b.request, MPI_STATUS_IGNORE);
        last_done_ = Clock::now();
    }
    auto wait_end = Clock::now();
    for (Bucket& b : buckets_) {
        unpack(b);
        b.started = false;
    }
    st.exposed_seconds = seconds(wait_begin, wait_end);
    st.seconds = std::max(st.exposed_seconds, seconds(first_start_, last_done_));
    armed_ = any_started_ = false;
    return st;
}

CommStats GradReducer::finish_zero1() {
    auto t0 = Clock::now();
    const long n = model_.num_parameters(), own = counts_[rank_];
    float* grads = model_.grads();
    const float scale = 1.0f / size_;
    if (bf16_) {
        for (long i = 0; i < n; i++) send16_[i] = float_to_bf16_rne(grads[i]);
        MPI_Reduce_scatter(send16_.data(), recv16_.data(), counts_.data(), MPI_UINT16_T, bf16_sum_,
                           parallel_.comm(Group::Data));
        for (long i = 0; i < own; i++) recv_[i] = bf16_to_float(recv16_[i]);
    } else {
        MPI_Reduce_scatter(grads, recv_.data(), counts_.data(), MPI_FLOAT, MPI_SUM, parallel_.comm(Group::Data));
    }
    for (long i = 0; i < own; i++) grads[shard_begin() + i] = recv_[i] * scale;
    CommStats st;
    st.seconds = st.exposed_seconds = seconds(t0, Clock::now());
    return st;
}

void GradReducer::gather_params() {
    if (size_ == 1 || !zero1_) return;
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, model_.params(), counts_.data(), displs_.data(), MPI_FLOAT,
                   parallel_.comm(Group::Data));
}

}  // namespace hlat
