// Google Benchmark of the kernels at config S's shapes (B 8, T 256, C 256,
// NH 4, H 704, V 8192), with the fast kernels next to the reference loops where
// the reference is quick enough to time. Prints Google Benchmark's table, then
// a last line of one JSON object: each kernel's time per call in ms, its
// iterations and its counters, as every bench ends.
//
// usage: build/bench/hlat_kernels_bench [--small] [Google Benchmark's --benchmark_* options]
// --small: every kernel timed once or twice on one thread (a millisecond's
// minimum time): the whole path in seconds, its figures meaningless (the test
// suite's check that the bench runs, tests/bench_small.py).
#include "trainer/model/kernels.h"

#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>
#include <omp.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
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
    state.counters["FLOP/s"] = benchmark::Counter(2.0 * N * C * QKV, benchmark::Counter::kIsIterationInvariantRate,
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

// Google Benchmark's console table (coloured on a terminal, as its own
// default), each timed run also kept for the last line.
class SummaryReporter : public benchmark::ConsoleReporter {
  public:
    SummaryReporter() : ConsoleReporter(isatty(fileno(stdout)) ? OO_Color : OO_None) {}
    void ReportRuns(const std::vector<Run>& runs) override {
        ConsoleReporter::ReportRuns(runs);
        for (const Run& r : runs) {
            if (r.error_occurred) failed_ = true;
            else if (r.run_type == Run::RT_Iteration) summary_["kernels"][r.benchmark_name()] = entry(r);
        }
    }
    bool failed() const { return failed_; }
    const nlohmann::json& summary() const { return summary_; }

  private:
    static nlohmann::json entry(const Run& r) {
        nlohmann::json e = {{"ms", 1e3 * r.real_accumulated_time / (double)r.iterations},
                            {"cpu_ms", 1e3 * r.cpu_accumulated_time / (double)r.iterations},
                            {"iterations", r.iterations}};
        for (const auto& [name, counter] : r.counters) e[name] = counter.value;
        return e;
    }
    nlohmann::json summary_ = {{"kernels", nlohmann::json::object()}};
    bool failed_ = false;
};

}  // namespace

int main(int argc, char** argv) {
    // --small is ours: Google Benchmark's own parser would refuse it.
    std::vector<char*> args;
    std::string min_time = "--benchmark_min_time=0.001";
    bool small = false;
    for (int i = 0; i < argc; i++) {
        if (std::strcmp(argv[i], "--small") == 0) small = true;
        else args.push_back(argv[i]);
    }
    if (small) {
        args.push_back(min_time.data());
        omp_set_num_threads(1);  // the test suite runs two tests at a time, on as few as 2 cores
    }
    int n = (int)args.size();
    args.push_back(nullptr);  // argv's end, as main's
    benchmark::Initialize(&n, args.data());
    if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 1;
    SummaryReporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    benchmark::Shutdown();
    std::printf("%s\n", reporter.summary().dump().c_str());
    return reporter.failed() ? 1 : 0;
}
