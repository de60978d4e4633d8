// Google Benchmark of the kernels at config S's shapes (B 8, T 256, C 256,
// NH 4, H 704, V 8192), with the fast kernels next to the reference loops where
// the reference is quick enough to time. Run: build/bench/hlat_kernels_bench
#include "trainer/model/kernels.h"

#include <benchmark/benchmark.h>
#include <omp.h>

#include <random>
#include <vector>

namespace {

constexpr int B = 8, T = 256, C = 256, NH = 4, HD = C / NH, H = 704, V = 8192, N = B * T;
constexpr int QKV = 3 * C;

std::vector<float> random_vector(long n, float scale = 1.0f) {
    std::mt19937 rng(1);
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}

void BM_MatmulForward(benchmark::State& state) {
    auto inp = random_vector((long)N * C), w = random_vector((long)QKV * C);
    std::vector<float> out((long)N * QKV);
    for (auto _ : state) hlat::matmul_forward(out.data(), inp.data(), w.data(), N, C, QKV);
    state.counters["GFLOP/s"] = benchmark::Counter(2.0 * N * C * QKV, benchmark::Counter::kIsIterationInvariantRate,
                                                   benchmark::Counter::kIs1000);
}

void BM_AttentionForward(benchmark::State& state) {
    bool store = state.range(0);
    auto qkv = random_vector((long)N * QKV);
    std::vector<float> out((long)N * C), att(store ? (long)B * NH * T * T : 0);
    std::vector<float> scratch(omp_get_max_threads() * hlat::AttentionScratch::floats(T));
    for (auto _ : state)
        hlat::attention_forward(out.data(), store ? att.data() : nullptr, scratch.data(), qkv.data(), B, T, NH, NH, HD);
}

void BM_AttentionBackward(benchmark::State& state) {
    bool stored = state.range(0);
    auto qkv = random_vector((long)N * QKV), dout = random_vector((long)N * C);
    std::vector<float> out((long)N * C), att((long)B * NH * T * T), dqkv((long)N * QKV);
    std::vector<float> scratch(omp_get_max_threads() * hlat::AttentionScratch::floats(T));
    hlat::attention_forward(out.data(), att.data(), scratch.data(), qkv.data(), B, T, NH, NH, HD);
    for (auto _ : state)
        hlat::attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), stored ? att.data() : nullptr,
                                 B, T, NH, NH, HD);
}

void BM_CrossEntropyForward(benchmark::State& state) {
    auto logits = random_vector((long)N * V);
    std::vector<int32_t> targets(N, 7);
    std::vector<float> work(logits.size()), losses(N);
    for (auto _ : state) {
        state.PauseTiming();
        work = logits;
        state.ResumeTiming();
        hlat::crossentropy_forward(work.data(), losses.data(), nullptr, targets.data(), N, V);
    }
}

void BM_RMSNormForward(benchmark::State& state) {
    auto x = random_vector((long)N * C), w = random_vector(C);
    std::vector<float> y((long)N * C), rstd(N);
    for (auto _ : state) hlat::rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
}

void BM_SwiGLUForwardBackward(benchmark::State& state) {
    auto gu = random_vector((long)N * 2 * H), dy = random_vector((long)N * H);
    std::vector<float> y((long)N * H), dgu((long)N * 2 * H);
    for (auto _ : state) {
        hlat::swiglu_forward(y.data(), gu.data(), N, H);
        hlat::swiglu_backward(dgu.data(), dy.data(), gu.data(), N, H);
    }
}

BENCHMARK(BM_MatmulForward)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AttentionForward)->Arg(1)->Arg(0)->ArgName("store_probs")->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AttentionBackward)->Arg(1)->Arg(0)->ArgName("stored_probs")->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CrossEntropyForward)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RMSNormForward)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SwiGLUForwardBackward)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
