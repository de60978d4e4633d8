// The kernel profile (`hlat profile`): every GEMM and attention product of a
// step is counted once, with the FLOPs the model's own count says; every
// kernel's time is its own; and off, the scopes record nothing.
#include "trainer/model/flops.h"
#include "trainer/model/kernel_profile.h"
#include "trainer/trainer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <thread>

namespace hlat {
namespace {

class RandomTokens : public BatchSource {
  public:
    void next_batch(int32_t* inputs, int32_t* targets, int B, int T) override {
        for (long i = 0; i < (long)B * T; i++) inputs[i] = rng_() % 96, targets[i] = rng_() % 96;
    }

  private:
    std::mt19937 rng_{5};
};

TrainConfig small_config(PrecisionMode mode) {
    TrainConfig c;
    c.model.vocab_size = 96, c.model.dim = 32, c.model.n_layers = 2, c.model.n_heads = 4, c.model.n_kv_heads = 2;
    c.model.hidden_dim = 64, c.model.max_seq_len = 16;
    c.run.batch_size = 2, c.run.seq_len = 16, c.run.grad_accum = 2, c.run.threads = 2;
    c.precision.mode = mode;
    return c;
}

struct Profiled {
    KernelProfile profile;
    double step_seconds = 0.0;
};

void profile_steps(const TrainConfig& c, int steps, Profiled& out) {
    RandomTokens data;
    Trainer trainer(c, data, 0.0);
    trainer.model().init_weights(1);
    trainer.step();  // not profiled
    out.profile.start();
    for (int i = 0; i < steps; i++) out.step_seconds += trainer.step().step_seconds;
    out.profile.stop();
}

double flops_of(const KernelProfile& p, const std::string& prefix) {
    double f = 0.0;
    for (const auto& [name, t] : p.totals())
        if (name.rfind(prefix, 0) == 0) f += t.flops;
    return f;
}

class KernelProfileByMode : public ::testing::TestWithParam<PrecisionMode> {};

TEST_P(KernelProfileByMode, CountsEveryProductOnceAndOwnTimesFitInTheStep) {
    const TrainConfig c = small_config(GetParam());
    const int steps = 2;
    Profiled p;
    profile_steps(c, steps, p);
    const int tokens = c.run.batch_size * c.run.seq_len;
    double linear = 0.0;
    for (const GemmShape& g : training_gemms(c.model, tokens)) linear += 2.0 * g.m * g.n * g.k * g.count;
    const double micro_steps = (double)steps * c.run.grad_accum;
    EXPECT_DOUBLE_EQ(flops_of(p.profile, "gemm "), linear * micro_steps);
    // Two products forward, over the causal half of the scores; backward adds
    // four, and a fifth when the probabilities are recomputed.
    const ModelConfig& m = c.model;
    const double product = (double)c.run.batch_size * m.n_heads * c.run.seq_len * c.run.seq_len * m.head_dim();
    EXPECT_DOUBLE_EQ(flops_of(p.profile, "attention forward"), 2 * product * m.n_layers * micro_steps);
    // The probabilities are stored (no activation checkpointing): four backward.
    EXPECT_DOUBLE_EQ(flops_of(p.profile, "attention backward"), 4 * product * m.n_layers * micro_steps);
    // Per kind: the head's GEMMs are there by name, once per micro-batch and pass.
    EXPECT_EQ(p.profile.totals().at("gemm forward lm_head").calls, (long)micro_steps);
    EXPECT_EQ(p.profile.totals().at("gemm dweight qkv_proj").calls, (long)(micro_steps * m.n_layers));
    double own = 0.0;
    for (const auto& [name, t] : p.profile.totals()) {
        EXPECT_GE(t.seconds, 0.0) << name;
        own += t.seconds;
    }
    EXPECT_LE(own, p.step_seconds);
    for (const char* kernel : {"rmsnorm forward", "rmsnorm backward", "swiglu forward", "swiglu backward",
                               "cross-entropy forward", "cross-entropy backward", "adamw", "grad norm"})
        EXPECT_TRUE(p.profile.totals().count(kernel)) << kernel;
    // The bf16 modes narrow the matmuls' inputs; fp32 has nothing to narrow.
    EXPECT_EQ(p.profile.totals().count("narrow to bf16") == 1, c.precision.bf16_compute());
    // SwiGLU's bytes as its kernel moves them: gate_up (N, 2H) read, as fp32
    // sums or, in the bf16 modes, as the bf16 values its product stored, and
    // the (N, H) output written in fp32 or bf16; backward reads gate_up and
    // the output's gradient (stored in bf16 by its product in the bf16
    // modes) and writes gate_up's gradient.
    const double NH = (double)tokens * m.hidden_dim * m.n_layers * micro_steps;
    EXPECT_DOUBLE_EQ(p.profile.totals().at("swiglu forward").bytes, NH * (c.precision.bf16_compute() ? 6 : 12));
    EXPECT_DOUBLE_EQ(p.profile.totals().at("swiglu backward").bytes, NH * (c.precision.bf16_compute() ? 10 : 20));
}

INSTANTIATE_TEST_SUITE_P(Modes, KernelProfileByMode,
                         ::testing::Values(PrecisionMode::Fp32, PrecisionMode::Mixed, PrecisionMode::Bf16Sr));

TEST(KernelProfile, NestedScopesTimeTheirOwnWorkOnly) {
    KernelProfile profile;
    profile.start();
    {
        KernelScope outer("outer", 100.0);
        KernelScope inner("inner", 10.0, 5.0);
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
    }
    profile.stop();
    const KernelTotals& outer = profile.totals().at("outer");
    const KernelTotals& inner = profile.totals().at("inner");
    EXPECT_GE(inner.seconds, 0.03);
    EXPECT_LT(outer.seconds, inner.seconds);  // the sleep was the inner scope's
    EXPECT_EQ(outer.bytes, 100.0);
    EXPECT_EQ(inner.flops, 5.0);
}

// Clipping is part of AdamW's pass: a step that clips times no kernel of
// its own.
TEST(KernelProfile, ClippingCostsNoPassOfItsOwn) {
    TrainConfig c = small_config(PrecisionMode::Fp32);
    c.optimizer.grad_clip = 1e-6;  // every step clips
    Profiled on;
    profile_steps(c, 1, on);
    EXPECT_EQ(on.profile.totals().count("clip"), 0u);
    EXPECT_EQ(on.profile.totals().at("adamw").calls, 1);
}

// Inside an OpenMP region only the driving thread may keep the stack: a scope
// there records nothing and leaves the enclosing scope's accounting whole.
TEST(KernelProfile, ScopesInsideParallelRegionsRecordNothing) {
    KernelProfile profile;
    profile.start();
    {
        KernelScope outer("outer", 1.0);
#pragma omp parallel num_threads(2)
        {
            KernelScope inner("inner", 1.0);
        }
    }
    profile.stop();
    EXPECT_EQ(profile.totals().count("inner"), 0u);
    EXPECT_EQ(profile.totals().at("outer").calls, 1);
}

TEST(KernelProfile, RecordsNothingWhenOff) {
    KernelProfile profile;
    { KernelScope s("kernel", 1.0); }
    profile.start();
    profile.stop();
    { KernelScope s("kernel", 1.0); }
    EXPECT_TRUE(profile.totals().empty());
    EXPECT_EQ(KernelProfile::active(), nullptr);
}

}  // namespace
}  // namespace hlat
