// The model's internals (docs/internals.md) against brute force: every
// statistic the trainer reports for a step is recomputed here in plain double
// loops from what the step saw (the weights before it, its batches, the
// weights and Adam moments after it) on a tiny model, with and without
// activation checkpointing and gradient accumulation. The reference
// activations come from a second fp32 model holding the same weights, run on
// the same batches (q and k after RoPE, the residual stream, the raw output
// logits); the attention logits, softmax, entropies, log Z and every norm are
// then computed here, not taken from the trainer.
//
// Tolerances: the trainer computes in float what this file computes in
// double; a softmax row or a norm over a few hundred floats differs by a few
// float ulps (relative ~1e-6). The tests allow 1e-5 relative (1e-5 absolute
// for entropies, in nats): far below any real difference (one wrong row of
// a head moves its mean entropy by ~1e-2).
#include "test_util.h"
#include "telemetry/reader.h"
#include "trainer/trainer.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace hlat {
namespace {

constexpr int kV = 37, kC = 16, kL = 2, kNH = 2, kT = 12, kB = 2;
constexpr int kSeenTokens = 30;  // tokens 30..36 never appear: their embedding rows keep v = 0
constexpr double kRel = 1e-5, kEntropyAbs = 1e-5;

TrainConfig tiny_config(int accum, bool checkpointing, PrecisionMode mode = PrecisionMode::Fp32) {
    TrainConfig c;
    c.model.vocab_size = kV;
    c.model.dim = kC;
    c.model.n_layers = kL;
    c.model.n_heads = kNH;
    c.model.n_kv_heads = kNH;
    c.model.hidden_dim = 32;
    c.model.max_seq_len = kT;
    c.model.init_std = 0.3;  // logits large enough that softmax rows are far from uniform
    c.run.batch_size = kB;
    c.run.seq_len = kT;
    c.run.grad_accum = accum;
    c.run.activation_checkpointing = checkpointing;
    c.schedule = {1e-2, 1e-3, 2, 10};
    // An epsilon that dominates some coordinates' denominators and not others.
    c.optimizer.eps = 3e-3;
    c.optimizer.grad_clip = 0.5;  // clipping happens: the pre-clip norms must undo it
    c.precision.mode = mode;
    return c;
}

// Random batches, every one kept so the reference can replay a step's.
class RecordingBatches : public BatchSource {
  public:
    void next_batch(int32_t* inputs, int32_t* targets, int B, int T) override {
        std::vector<int32_t> x(B * T), y(B * T);
        for (int i = 0; i < B * T; i++) x[i] = rng_() % kSeenTokens, y[i] = rng_() % kSeenTokens;
        std::copy(x.begin(), x.end(), inputs);
        std::copy(y.begin(), y.end(), targets);
        batches.push_back({x, y});
    }
    std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> batches;

  private:
    std::mt19937 rng_{11};
};

const telemetry::VectorPoint& vector_of(const StepStats& s, const std::string& key) {
    for (const telemetry::VectorPoint& v : s.internals)
        if (v.key == key) return v;
    throw std::runtime_error("no internal " + key);
}

// The largest |a - b| / max(|b|, floor) over two vectors, printed with its key.
double worst_relative(const std::string& key, const std::vector<float>& got, const std::vector<double>& want,
                      double floor = 1e-12) {
    EXPECT_EQ(got.size(), want.size()) << key;
    double worst = 0.0;
    for (size_t i = 0; i < std::min(got.size(), want.size()); i++)
        worst = std::max(worst, std::abs(got[i] - want[i]) / std::max(std::abs(want[i]), floor));
    std::printf("%-20s max relative difference %.2e\n", key.c_str(), worst);
    return worst;
}

// What forward's internals should be for one step, in double.
struct ForwardReference {
    std::vector<double> logit_max = std::vector<double>(kL * kNH, -INFINITY);
    std::vector<double> entropy = std::vector<double>(kL * kNH, 0.0);  // summed, then the mean
    std::vector<double> residual_rms = std::vector<double>(kL, 0.0);    // squares, then the RMS
    std::vector<double> residual_max = std::vector<double>(kL, 0.0);
    double logz_mean = 0.0, logz_max = -INFINITY, logit_max_out = -INFINITY;
    double rows = 0.0;
};

// Attention of one micro-batch from the reference model's q and k (after
// RoPE): logits q.k / sqrt(HD) over keys j <= i, their softmax and entropy.
void add_attention(ForwardReference& r, const ActivationTensors& a) {
    const int HD = kC / kNH, QKV = 3 * kNH * HD;
    for (int l = 0; l < kL; l++)
        for (int h = 0; h < kNH; h++)
            for (int b = 0; b < kB; b++)
                for (int i = 0; i < kT; i++) {
                    const float* q = a.qkv + (((long)l * kB + b) * kT + i) * QKV + h * HD;
                    std::vector<double> s(i + 1);
                    for (int j = 0; j <= i; j++) {
                        const float* k = a.qkv + (((long)l * kB + b) * kT + j) * QKV + (kNH + h) * HD;
                        double dot = 0.0;
                        for (int d = 0; d < HD; d++) dot += (double)q[d] * k[d];
                        s[j] = dot / std::sqrt((double)HD);
                    }
                    const double m = *std::max_element(s.begin(), s.end());
                    double z = 0.0;
                    for (double x : s) z += std::exp(x - m);
                    double entropy = 0.0;
                    for (double x : s) {
                        const double p = std::exp(x - m) / z;
                        if (p > 0) entropy -= p * std::log(p);
                    }
                    r.logit_max[l * kNH + h] = std::max(r.logit_max[l * kNH + h], m);
                    r.entropy[l * kNH + h] += entropy;
                }
}

// The residual stream leaving each block and the raw output logits of one micro-batch.
void add_stream_and_logits(ForwardReference& r, const ActivationTensors& a) {
    const long N = (long)kB * kT;
    for (int l = 0; l < kL; l++) {
        const float* x = a.residual + (l + 1) * N * kC;
        for (long i = 0; i < N * kC; i++) {
            r.residual_rms[l] += (double)x[i] * x[i];
            r.residual_max[l] = std::max(r.residual_max[l], std::abs((double)x[i]));
        }
    }
    for (long n = 0; n < N; n++) {
        const float* row = a.logits + n * kV;
        const double m = *std::max_element(row, row + kV);
        double z = 0.0;
        for (int v = 0; v < kV; v++) z += std::exp(row[v] - m);
        r.logz_mean += m + std::log(z);
        r.logz_max = std::max(r.logz_max, m + std::log(z));
        r.logit_max_out = std::max(r.logit_max_out, m);
    }
    r.rows += N;
}

// The step's forward internals from the weights before it and its batches;
// grads gets the step's gradients before clipping.
ForwardReference forward_reference(const TrainConfig& c, const std::vector<float>& weights,
                                   const RecordingBatches& data, size_t first_batch, std::vector<float>& grads) {
    Model ref(c.model, kB, kT, false);
    std::copy(weights.begin(), weights.end(), ref.params());
    ForwardReference r;
    const int accum = c.run.grad_accum;
    for (int m = 0; m < accum; m++) {
        const auto& [x, y] = data.batches[first_batch + m];
        ref.forward(x.data(), nullptr);  // leaves the raw logits
        add_attention(r, ref.activations());
        add_stream_and_logits(r, ref.activations());
    }
    for (double& e : r.entropy) e /= r.rows;
    for (double& s : r.residual_rms) s = std::sqrt(s / (r.rows * kC));
    r.logz_mean /= r.rows;
    ref.zero_grad();
    for (int m = 0; m < accum; m++) {
        const auto& [x, y] = data.batches[first_batch + m];
        ref.forward(x.data(), y.data());
        ref.backward(1.0f / (kB * kT * accum));
    }
    grads.assign(ref.grads(), ref.grads() + ref.num_parameters());
    return r;
}

void expect_forward_internals(const StepStats& s, const ForwardReference& r) {
    EXPECT_LT(worst_relative("attn_logit_max", vector_of(s, "attn_logit_max").values, r.logit_max), kRel);
    const std::vector<float>& entropy = vector_of(s, "attn_entropy").values;
    double worst = 0.0;
    for (size_t i = 0; i < r.entropy.size(); i++) worst = std::max(worst, std::abs(entropy[i] - r.entropy[i]));
    std::printf("%-20s max absolute difference %.2e nats\n", "attn_entropy", worst);
    EXPECT_LT(worst, kEntropyAbs);
    EXPECT_LT(worst_relative("residual_rms", vector_of(s, "residual_rms").values, r.residual_rms), kRel);
    EXPECT_LT(worst_relative("residual_max", vector_of(s, "residual_max").values, r.residual_max), kRel);
    EXPECT_LT(worst_relative("logz_mean", {(float)s.logz_mean}, {r.logz_mean}), kRel);
    EXPECT_LT(worst_relative("logz_max", {(float)s.logz_max}, {r.logz_max}), kRel);
    EXPECT_LT(worst_relative("logit_max", {(float)s.logit_max}, {r.logit_max_out}), kRel);
}

// Per tensor slice (one layer of a kind, or a global kind) in buffer order:
// norms of the gradient, the weights after, the update, the update ratio and
// the share of moments with sqrt(v_hat) < eps among those with v != 0.
void expect_tensor_internals(const StepStats& s, const std::vector<TensorKind>& kinds, const std::vector<float>& before,
                             const std::vector<float>& after, const std::vector<float>& grads,
                             const std::vector<float>& v, const TrainConfig& c, long steps_taken, bool with_grads) {
    std::vector<double> grad, param, update, ratio, eps;
    const double bc2 = 1.0 - std::pow(c.optimizer.beta2, (double)steps_taken);
    for (const TensorKind& k : kinds) {
        const long slices = k.layers ? k.layers : 1, per = k.numel() / slices;
        for (long sl = 0; sl < slices; sl++) {
            double g2 = 0, w2 = 0, n2 = 0, u2 = 0, small = 0, seen = 0;
            for (long i = k.offset + sl * per; i < k.offset + (sl + 1) * per; i++) {
                g2 += (double)grads[i] * grads[i];
                w2 += (double)before[i] * before[i];
                n2 += (double)after[i] * after[i];
                u2 += ((double)after[i] - before[i]) * ((double)after[i] - before[i]);
                if (v[i] != 0.0f) {
                    seen++;
                    small += std::sqrt(v[i] / bc2) < c.optimizer.eps;
                }
            }
            grad.push_back(std::sqrt(g2));
            param.push_back(std::sqrt(n2));
            update.push_back(std::sqrt(u2));
            ratio.push_back(std::sqrt(u2) / std::sqrt(w2));
            eps.push_back(small / seen);
        }
    }
    if (with_grads) {
        EXPECT_LT(worst_relative("tensor_grad_norm", vector_of(s, "tensor_grad_norm").values, grad), kRel);
    }
    EXPECT_LT(worst_relative("tensor_param_norm", vector_of(s, "tensor_param_norm").values, param), kRel);
    EXPECT_LT(worst_relative("tensor_update_norm", vector_of(s, "tensor_update_norm").values, update), kRel);
    EXPECT_LT(worst_relative("update_ratio", vector_of(s, "update_ratio").values, ratio), kRel);
    // A coordinate exactly at the boundary could fall either way in float:
    // at most one coordinate of a slice, here none.
    EXPECT_LT(worst_relative("eps_share", vector_of(s, "eps_share").values, eps, 1e-3), 1e-6);
}

struct Setting {
    const char* name;
    int accum;
    bool checkpointing;
};

class InternalsMatchBruteForce : public ::testing::TestWithParam<Setting> {};

INSTANTIATE_TEST_SUITE_P(Settings, InternalsMatchBruteForce,
                         ::testing::Values(Setting{"plain", 1, false}, Setting{"checkpointing", 1, true},
                                           Setting{"grad_accum_3", 3, false},
                                           Setting{"checkpointing_grad_accum_2", 2, true}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST_P(InternalsMatchBruteForce, EveryStatisticOfEveryStepEqualsItsRecomputation) {
    const Setting setting = GetParam();
    const TrainConfig c = tiny_config(setting.accum, setting.checkpointing);
    RecordingBatches data;
    Trainer trainer(c, data, 0.0);
    trainer.model().init_weights(5);
    const long n = trainer.model().num_parameters();
    int clipped = 0;
    double eps_shares = 0.0;
    for (int step = 0; step < 4; step++) {
        std::vector<float> before(trainer.model().params(), trainer.model().params() + n), grads;
        const size_t first_batch = data.batches.size();
        StepStats s = trainer.step();
        clipped += s.clipped;
        std::printf("step %d (%s)\n", step, s.clipped ? "clipped" : "not clipped");
        ForwardReference r = forward_reference(c, before, data, first_batch, grads);
        expect_forward_internals(s, r);
        std::vector<float> after(trainer.model().params(), trainer.model().params() + n);
        std::vector<float> v = trainer.optimizer().second_moment().to_float();
        expect_tensor_internals(s, trainer.model().tensor_kinds(), before, after, grads, v, c, trainer.optimizer().steps_taken(), true);
        for (float e : vector_of(s, "eps_share").values) eps_shares += e > 0.0f && e < 1.0f;
    }
    EXPECT_GT(clipped, 0) << "the steps should exercise the pre-clip norms";
    EXPECT_GT(eps_shares, 0) << "some tensor should have a share strictly between 0 and 1";
}

TEST(Internals, ActivationCheckpointingReportsTheSameNumbersAsStoredProbabilities) {
    std::map<std::string, std::vector<float>> seen[2];
    for (bool checkpointing : {false, true}) {
        RecordingBatches data;
        Trainer trainer(tiny_config(2, checkpointing), data, 0.0);
        trainer.model().init_weights(5);
        for (int step = 0; step < 3; step++) {
            StepStats s = trainer.step();
            for (const auto& v : s.internals) {
                auto& out = seen[checkpointing][v.key + "@" + std::to_string(step)];
                out = v.values;
            }
        }
    }
    ASSERT_EQ(seen[0].size(), seen[1].size());
    for (const auto& [key, values] : seen[0]) {
        ASSERT_TRUE(seen[1].count(key)) << key;
        const std::vector<float>& other = seen[1].at(key);
        ASSERT_EQ(values.size(), other.size()) << key;
        for (size_t i = 0; i < values.size(); i++)
            EXPECT_NEAR(values[i], other[i], 1e-6 * std::max(1.0f, std::abs(values[i]))) << key << "[" << i << "]";
    }
}

TEST(Internals, LabelsNameHeadsBlocksAndTensorsAsThePerTensorNormsDo) {
    RecordingBatches data;
    Trainer trainer(tiny_config(1, false), data, 0.0);
    trainer.model().init_weights(5);
    StepStats s = trainer.step(/*tensor_norms=*/true);
    const auto& heads = *vector_of(s, "attn_logit_max").labels;
    EXPECT_EQ(heads, (std::vector<std::string>{"layers.0.head.0", "layers.0.head.1", "layers.1.head.0",
                                                "layers.1.head.1"}));
    EXPECT_EQ(*vector_of(s, "residual_rms").labels, (std::vector<std::string>{"layers.0", "layers.1"}));
    // One shared label list per shape, not a copy per point.
    EXPECT_EQ(vector_of(s, "attn_logit_max").labels, vector_of(s, "attn_entropy").labels);
    EXPECT_EQ(vector_of(s, "update_ratio").labels, vector_of(s, "eps_share").labels);
    // Each per-layer tensor's gradient norm is the one the per-tensor norms
    // report under the same name (measured apart, before clipping); global
    // tensors appear there by kind.
    std::map<std::string, double> norms(s.tensor_norms.begin(), s.tensor_norms.end());
    const telemetry::VectorPoint& grad = vector_of(s, "tensor_grad_norm");
    ASSERT_EQ(grad.labels->size(), grad.values.size());
    for (size_t i = 0; i < grad.values.size(); i++) {
        const std::string& label = (*grad.labels)[i];
        const bool per_layer = label.rfind("layers.", 0) == 0;
        const std::string key = "grad_norm/" + (per_layer ? label : "kind/" + label);
        ASSERT_TRUE(norms.count(key)) << key;
        EXPECT_NEAR(grad.values[i], norms.at(key), kRel * norms.at(key)) << label;
    }
    EXPECT_EQ(grad.labels->front(), "embed_tokens");
    EXPECT_EQ(grad.labels->back(), "lm_head");
}

TEST(Internals, InternalsEveryZeroMeasuresNothingAndTwoMeasuresEveryOtherStep) {
    for (int every : {0, 2}) {
        TrainConfig c = tiny_config(1, false);
        c.run.internals_every = every;
        RecordingBatches data;
        Trainer trainer(c, data, 0.0);
        trainer.model().init_weights(5);
        for (int step = 0; step < 4; step++) {
            StepStats s = trainer.step();
            const bool measured = every > 0 && step % every == 0;
            EXPECT_EQ(s.internals.empty(), !measured) << "every " << every << " step " << step;
            EXPECT_EQ(std::isnan(s.logz_mean), !measured) << "every " << every << " step " << step;
            bool in_metrics = false;
            std::set<std::string> keys;
            for (const StepMetric& m : step_metrics(s)) {
                in_metrics |= m.key == "logit_max" && !std::isnan(m.value);
                EXPECT_TRUE(keys.insert(m.key).second) << m.key << " written twice";  // a field's and a record's
            }
            EXPECT_EQ(in_metrics, measured) << "every " << every << " step " << step;
        }
    }
}

// The bf16 modes keep weights and moments in fp32 containers (bf16 values in
// the pure modes): the per-tensor statistics are exact there too, and every
// vector has its full length and finite values.
TEST(Internals, Bf16ModesReportEveryInternalWithExactUpdateStatistics) {
    for (PrecisionMode mode : {PrecisionMode::Mixed, PrecisionMode::Bf16, PrecisionMode::Bf16Sr}) {
        std::printf("%s\n", precision_mode_name(mode));
        TrainConfig c = tiny_config(2, false, mode);
        RecordingBatches data;
        Trainer trainer(c, data, 0.0);
        trainer.model().init_weights(5);
        const long n = trainer.model().num_parameters();
        for (int step = 0; step < 3; step++) {
            trainer.step();  // the pure modes round the weights at the first step
            std::vector<float> before(trainer.model().params(), trainer.model().params() + n);
            StepStats s = trainer.step();
            std::vector<float> after(trainer.model().params(), trainer.model().params() + n);
            std::vector<float> v = trainer.optimizer().second_moment().to_float();
            expect_tensor_internals(s, trainer.model().tensor_kinds(), before, after, after, v, c, trainer.optimizer().steps_taken(), false);
            // and in pure bf16, where rounding throws updates away, their share per tensor kind (precision_stall's input)
            ASSERT_EQ(s.internals.size(), mode == PrecisionMode::Bf16 ? 10u : 9u);
            for (const auto& p : s.internals) {
                EXPECT_EQ(p.values.size(), p.labels->size()) << p.key;
                for (float x : p.values) EXPECT_TRUE(std::isfinite(x)) << precision_mode_name(mode) << " " << p.key;
            }
            EXPECT_TRUE(std::isfinite(s.logz_mean) && std::isfinite(s.logz_max) && std::isfinite(s.logit_max));
        }
    }
}


// Distributed jobs through the binary under mpirun (2 processes, as
// test_distributed.cpp runs them): tensor parallelism gathers every head in
// the global order and sums the sharded tensors' squares over the group; data
// parallelism with ZeRO-1 reduces the activation statistics over the ranks'
// tokens and the optimizer's sums over the ranks' ranges. Each stores what
// one process stores for the same global batch, within 1e-4 relative (the
// layouts sum in other orders, and Adam carries such differences forward
// into the update norms; the curves themselves agree within 1e-5).
TEST(InternalsDistributed, TensorParallelAndDataParallelZeroOneStoreWhatOneProcessStores) {
    test::ScratchDir dir("internals_distributed");
    std::mt19937 rng(7);
    std::vector<uint16_t> tokens(40000);
    for (uint16_t& t : tokens) t = (uint16_t)(rng() % 256);
    std::ofstream(dir.file("tokens.bin"), std::ios::binary)
        .write(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
    auto train = [&](const std::string& name, int np, int batch, const std::string& args) {
        const std::string config = dir.file(name + ".json");
        std::ofstream(config) << fmt::format(R"({{
          "model": {{"vocab_size": 256, "dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2,
                    "hidden_dim": 128, "max_seq_len": 32}},
          "schedule": {{"max_lr": 3e-3, "min_lr": 3e-4, "warmup_steps": 2, "total_steps": 30}},
          "run": {{"batch_size": {}, "seq_len": 32, "threads": 1, "data": "{}", "eval_every": 0,
                  "peak_gflops": 100, "tensor_norms_every": 0, "checkpoint_every": 0, "keep_checkpoints": 0}},
          "detectors": {{"leak_probe": {{"policy": "off"}}, "straggler": {{"policy": "off"}},
                        "flight_recorder": {{"store_every": 1}}}}
        }})", batch, dir.file("tokens.bin"));
        const std::string launch = np == 1 ? "" : fmt::format("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                                                              "mpirun --oversubscribe -np {} ", np);
        test::CommandResult r = test::run_command(fmt::format(
            "{}{} train --config {} --out-dir {} --store {} --steps 6 {}", launch, HLAT_BINARY, config,
            dir.file(name), dir.file(name + ".db"), args));
        EXPECT_EQ(r.exit_code, 0) << r.output;
        telemetry::Reader reader(dir.file(name + ".db"));
        const int64_t run = reader.find_run(name).value().id;
        std::map<std::string, std::vector<telemetry::VectorPoint>> out;
        for (const std::string& key : reader.vector_keys(run)) out[key] = reader.vector_series(run, key, 0, 5);
        return out;
    };
    const auto single = train("single", 1, 8, "");
    ASSERT_EQ(single.size(), 9u);
    for (const auto& [name, job] : {std::pair{"tp2", train("tp2", 2, 8, "--tp 2")},
                                    std::pair{"dp2_zero1", train("dp2_zero1", 2, 4, "--dp 2 --zero1")}}) {
        ASSERT_EQ(job.size(), single.size()) << name;
        for (const auto& [key, series] : single) {
            const auto& other = job.at(key);
            ASSERT_EQ(series.size(), 6u) << key;
            ASSERT_EQ(other.size(), series.size()) << name << " " << key;
            double worst = 0.0;
            for (size_t s = 0; s < series.size(); s++) {
                ASSERT_EQ(other[s].values.size(), series[s].values.size()) << name << " " << key;
                for (size_t i = 0; i < series[s].values.size(); i++) {
                    const double a = series[s].values[i], b = other[s].values[i];
                    // eps_share counts coordinates: a share, compared as one.
                    const double scale = key == "eps_share" ? 1.0 : std::max(std::abs(a), 1e-6);
                    worst = std::max(worst, std::abs(a - b) / scale);
                }
            }
            std::printf("%-10s %-20s max relative difference to one process %.2e\n", name, key.c_str(), worst);
            EXPECT_LT(worst, 1e-4) << name << " " << key;
        }
    }
}

}  // namespace
}  // namespace hlat
