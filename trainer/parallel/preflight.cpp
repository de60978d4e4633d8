#include "trainer/parallel/preflight.h"

#include "telemetry/clock.h"
#include "trainer/model/aligned.h"
#include "trainer/model/kernels_bf16.h"
#include "trainer/model/sgemm.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <thread>

namespace hlat {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Best of five timed calls after an untimed one: on a shared machine the best
// is the one least disturbed by neighbours. An injected slowdown stretches
// each call by sleeping, as a throttled core would take longer.
template <typename F>
double best_seconds(F&& call, double slowdown) {
    call();
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        auto t0 = Clock::now();
        call();
        double s = seconds_since(t0);
        if (slowdown > 1.0) std::this_thread::sleep_for(std::chrono::duration<double>(s * (slowdown - 1.0)));
        best = std::min(best, seconds_since(t0));
    }
    return best;
}

// On a cache line, as the step's buffers are (aligned.h): oneDNN's AMX
// products ran up to 3x slower on glibc's 16-byte offset.
AlignedVector<float> uniform(long n, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    AlignedVector<float> x(n);
    for (float& v : x) v = u(rng);
    return x;
}

void measure_gemm_rates(RankMeasurement& m, double slowdown) {
    const int n = 768;
    AlignedVector<float> a = uniform((long)n * n, 1), b = uniform((long)n * n, 2), c((long)n * n);
    AlignedVector<bf16> a16(a.size()), b16(b.size());
    bf16_narrow(a16.data(), a.data(), (long)a.size());
    bf16_narrow(b16.data(), b.data(), (long)b.size());
    const double flops = 2.0 * n * n * n;
    m.fp32_gflops = flops / 1e9 / best_seconds([&] {
        sgemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    }, slowdown);
    m.bf16_gflops = flops / 1e9 / best_seconds([&] {
        gemm_bf16(c.data(), a16.data(), b16.data(), n, n, n, false, false, false);
    }, slowdown);
}

// STREAM's triad, a = b + s c, over arrays far larger than the caches:
// 3 x 4 bytes move per element.
double triad_gbs(double slowdown) {
    const long n = 8L << 20;
    std::vector<float> a(n), b(n, 1.0f), c(n, 2.0f);
    const float s = 3.0f;
    double t = best_seconds([&] {
#pragma omp parallel for simd
        for (long i = 0; i < n; i++) a[i] = b[i] + s * c[i];
    }, slowdown);
    return 12.0 * n / t / 1e9;
}

// FNV-1a over the gradients (and loss) of one seeded forward/backward of the
// configured model on a short batch: the same bits on every healthy rank.
uint64_t model_checksum(const ModelConfig& config) {
    const int T = std::min(16, config.max_seq_len);
    Model model(config, 1, T, false);
    model.init_weights(1234);
    std::mt19937 rng(99);
    std::vector<int32_t> tokens(T + 1);
    for (int32_t& t : tokens) t = (int32_t)(rng() % config.vocab_size);
    float loss = model.forward(tokens.data(), tokens.data() + 1);
    model.backward(1.0f / T);
    uint64_t h = 1469598103934665603ull;
    auto mix = [&](const void* p, size_t bytes) {
        for (size_t i = 0; i < bytes; i++) h = (h ^ ((const unsigned char*)p)[i]) * 1099511628211ull;
    };
    mix(&loss, sizeof loss);
    mix(model.grads(), model.num_parameters() * sizeof(float));
    return h;
}


// One collective at one size: the mean of `iters` calls after two untimed,
// the slowest rank's. bytes is the whole message, as nccl-tests counts it: an
// all-gather's output, a reduce-scatter's input (sequence parallelism's pair).
double time_collective(Parallel& parallel, const std::string& op, long bytes) {
    const int world = parallel.world_size();
    const bool split = op == "all_gather" || op == "reduce_scatter";
    const long count = std::max(1L, bytes / 4 / (split ? world : 1));  // floats each rank sends or receives
    std::vector<float> send(count * (op == "reduce_scatter" ? world : 1), 1.0f);
    std::vector<float> recv(count * (op == "all_gather" ? world : 1));
    MPI_Comm comm = parallel.comm(Group::World);
    auto call = [&] {
        if (op == "all_reduce")
            MPI_Allreduce(send.data(), recv.data(), (int)count, MPI_FLOAT, MPI_SUM, comm);
        else if (op == "all_gather")
            MPI_Allgather(send.data(), (int)count, MPI_FLOAT, recv.data(), (int)count, MPI_FLOAT, comm);
        else
            MPI_Reduce_scatter_block(send.data(), recv.data(), (int)count, MPI_FLOAT, MPI_SUM, comm);
    };
    const int iters = (int)std::clamp((32L << 20) / std::max(bytes, 1L), 3L, 50L);
    call();
    call();
    MPI_Barrier(comm);
    auto t0 = Clock::now();
    for (int i = 0; i < iters; i++) call();
    double t = seconds_since(t0) / iters;
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, comm);
    return t;
}

std::vector<CollectiveRow> measure_collectives(Parallel& parallel, long max_bytes) {
    std::vector<CollectiveRow> rows;
    if (!parallel.distributed()) return rows;
    for (const std::string op : {"all_reduce", "all_gather", "reduce_scatter"}) {
        for (long bytes = 8;; bytes = std::min(bytes * 4, max_bytes)) {
            double t = time_collective(parallel, op, bytes);
            double algbw = bytes / t / 1e9;
            rows.push_back({op, bytes, t, algbw, bus_bandwidth(op, algbw, parallel.world_size())});
            if (bytes >= max_bytes) break;
        }
    }
    return rows;
}

void barrier(Parallel& parallel) {
    if (parallel.distributed()) MPI_Barrier(parallel.comm(Group::World));
}

// The triad of the ranks of one host, one rank at a time: they share its
// memory system, and measured at once they split it unevenly (27 against 43
// GB/s on this machine), which would fail a healthy rank.
double triad_in_turns(Parallel& parallel, double slowdown) {
    if (!parallel.distributed()) return triad_gbs(slowdown);
    MPI_Comm host;
    MPI_Comm_split_type(parallel.comm(Group::World), MPI_COMM_TYPE_SHARED, parallel.world_rank(), MPI_INFO_NULL, &host);
    int turn_of = 0, ranks_here = 1;
    MPI_Comm_rank(host, &turn_of);
    MPI_Comm_size(host, &ranks_here);
    double gbs = 0.0;
    for (int turn = 0; turn < ranks_here; turn++) {
        MPI_Barrier(host);
        if (turn == turn_of) gbs = triad_gbs(slowdown);
    }
    MPI_Comm_free(&host);
    return gbs;
}

// The rates of this rank, keeping the better of what m has and a new
// measurement. The ranks start the GEMMs together (each on its own cores).
void measure_rates(Parallel& parallel, RankMeasurement& m, double slowdown) {
    RankMeasurement now;
    barrier(parallel);
    measure_gemm_rates(now, slowdown);
    barrier(parallel);
    now.triad_gbs = triad_in_turns(parallel, slowdown);
    m.fp32_gflops = std::max(m.fp32_gflops, now.fp32_gflops);
    m.bf16_gflops = std::max(m.bf16_gflops, now.bf16_gflops);
    m.triad_gbs = std::max(m.triad_gbs, now.triad_gbs);
}

RankMeasurement measure_rank(Parallel& parallel, const PreflightOptions& options, const Faults& faults) {
    RankMeasurement m;
    m.rank = parallel.world_rank();
    m.host = telemetry::host_name();
    set_gemm_bit_flip(faults.corrupts_arithmetic(m.rank, 0));
    measure_rates(parallel, m, faults.slowdown(m.rank, 0));
    m.wrong_elements = wrong_gemm_elements();
    m.model_checksum = model_checksum(options.model);
    set_gemm_bit_flip(false);
    return m;
}

// Every rank's measurement at rank 0, in rank order.
std::vector<RankMeasurement> gather_ranks(Parallel& parallel, const RankMeasurement& m) {
    std::vector<double> mine = {m.fp32_gflops, m.bf16_gflops, m.triad_gbs, (double)m.wrong_elements};
    std::vector<double> all = parallel.gather(mine, Group::World);
    std::vector<uint64_t> sums = parallel.allgather({m.model_checksum}, Group::World);
    std::vector<std::string> hosts = parallel.gather(m.host, Group::World);
    std::vector<RankMeasurement> out;
    for (size_t r = 0; r < hosts.size(); r++)
        out.push_back({(int)r, hosts[r], all[4 * r], all[4 * r + 1], all[4 * r + 2], (long)all[4 * r + 3], sums[r]});
    return out;
}

// The model checksum a healthy rank gives: the one most ranks share; on a tie,
// the one every rank with exact GEMMs shares; else none is known.
std::optional<uint64_t> reference_checksum(const std::vector<RankMeasurement>& ranks) {
    std::map<uint64_t, int> votes;
    for (const RankMeasurement& m : ranks) votes[m.model_checksum]++;
    int best = 0, holders = 0;
    uint64_t best_sum = 0;
    for (const auto& [sum, n] : votes) {
        if (n > best) best = n, best_sum = sum, holders = 1;
        else if (n == best) holders++;
    }
    if (holders == 1) return best_sum;
    std::set<uint64_t> exact;
    for (const RankMeasurement& m : ranks)
        if (m.wrong_elements == 0) exact.insert(m.model_checksum);
    if (exact.size() == 1) return *exact.begin();
    return std::nullopt;
}

}  // namespace

// GEMMs of integers in [-8, 8]: every product and partial sum is an integer
// below 2^24, exact in fp32 and in bf16 inputs, so the right answer does not
// depend on the order of the sums and any other answer is wrong arithmetic.
long wrong_gemm_elements() {
    const int n = 256;
    std::mt19937 rng(2024);
    std::vector<float> a((long)n * n), b((long)n * n), c((long)n * n);
    for (float& x : a) x = (float)((int)(rng() % 17) - 8);
    for (float& x : b) x = (float)((int)(rng() % 17) - 8);
    std::vector<long> exact((long)n * n, 0);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < n; k++)
            for (int j = 0; j < n; j++) exact[(long)i * n + j] += (long)a[(long)i * n + k] * (long)b[(long)k * n + j];
    auto count_wrong = [&] {
        long wrong = 0;
        for (long i = 0; i < (long)c.size(); i++) wrong += c[i] != (float)exact[i];
        return wrong;
    };
    sgemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    long wrong = count_wrong();
    std::vector<bf16> a16(a.size()), b16(b.size());
    bf16_narrow(a16.data(), a.data(), (long)a.size());
    bf16_narrow(b16.data(), b.data(), (long)b.size());
    gemm_bf16(c.data(), a16.data(), b16.data(), n, n, n, false, false, false);
    return wrong + count_wrong();
}

double bus_bandwidth(const std::string& op, double algbw, int ranks) {
    if (ranks < 2) return 0.0;
    return algbw * (op == "all_reduce" ? 2.0 * (ranks - 1) / ranks : (double)(ranks - 1) / ranks);
}

PreflightReport run_preflight(Parallel& parallel, const PreflightOptions& options, const Faults& faults) {
    omp_set_num_threads(options.threads);
    PreflightReport report;
    report.threads = options.threads;
    report.min_fraction = options.min_fraction;
    report.min_memory_fraction = options.min_memory_fraction;
    RankMeasurement mine = measure_rank(parallel, options, faults);
    report.ranks = gather_ranks(parallel, mine);
    report.collectives = measure_collectives(parallel, options.max_bytes);
    // A rank that fails is measured once more, with every rank, and judged by
    // its better rates: a neighbour's burst on a shared machine passes, a slow
    // rank fails twice.
    for (int attempt = 0; attempt < 2; attempt++) {
        if (parallel.is_root())
            report.failures = judge_preflight(report.ranks, options.min_fraction, options.min_memory_fraction);
        int failed = report.failures.empty() ? 0 : 1;
        if (parallel.distributed()) parallel.broadcast(&failed, sizeof failed, Group::World);
        if (!failed || attempt == 1) {
            if (failed && report.failures.empty()) report.failures.push_back("rank 0 failed the pre-flight");
            break;
        }
        set_gemm_bit_flip(faults.corrupts_arithmetic(mine.rank, 0));
        measure_rates(parallel, mine, faults.slowdown(mine.rank, 0));
        set_gemm_bit_flip(false);
        report.ranks = gather_ranks(parallel, mine);
    }
    return report;
}

std::vector<std::string> judge_preflight(const std::vector<RankMeasurement>& ranks, double min_fraction,
                                         double min_memory_fraction) {
    std::vector<std::string> failures;
    struct Rate {
        const char* what;
        const char* unit;
        double RankMeasurement::*field;
        double min_fraction;
    };
    for (const Rate& rate : {Rate{"fp32 GEMM", "GFLOP/s", &RankMeasurement::fp32_gflops, min_fraction},
                             Rate{"bf16 GEMM", "GFLOP/s", &RankMeasurement::bf16_gflops, min_fraction},
                             Rate{"memory bandwidth (triad)", "GB/s", &RankMeasurement::triad_gbs,
                                  min_memory_fraction}}) {
        std::vector<double> values;
        for (const RankMeasurement& m : ranks) values.push_back(m.*rate.field);
        std::sort(values.begin(), values.end());
        size_t n = values.size();
        double median = n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
        for (const RankMeasurement& m : ranks)
            if (m.*rate.field < rate.min_fraction * median)
                failures.push_back(fmt::format("rank {} ({}): {} {:.1f} {} is {:.0f}% of the fleet median {:.1f} "
                                               "(below {:.0f}%)",
                                               m.rank, m.host, rate.what, m.*rate.field, rate.unit,
                                               100 * m.*rate.field / median, median, 100 * rate.min_fraction));
    }
    for (const RankMeasurement& m : ranks)
        if (m.wrong_elements > 0)
            failures.push_back(fmt::format("rank {} ({}) computes wrong numbers: {} elements of its GEMMs of exact "
                                           "integers differ from the exact result",
                                           m.rank, m.host, m.wrong_elements));
    std::optional<uint64_t> right = reference_checksum(ranks);
    for (const RankMeasurement& m : ranks) {
        if (right && m.model_checksum == *right) continue;
        if (!right && std::all_of(ranks.begin(), ranks.end(),
                                  [&](const RankMeasurement& o) { return o.model_checksum == m.model_checksum; }))
            continue;
        failures.push_back(fmt::format("rank {} ({}) computes wrong numbers: its model forward/backward checksum "
                                       "{:016x} {}",
                                       m.rank, m.host, m.model_checksum,
                                       right ? fmt::format("differs from the others' {:016x}", *right)
                                             : std::string("is not shared by a majority of ranks")));
    }
    return failures;
}

nlohmann::json PreflightReport::to_json() const {
    nlohmann::json j = {{"passed", passed()}, {"threads", threads}, {"min_fraction", min_fraction},
                        {"min_memory_fraction", min_memory_fraction},
                        {"failures", failures}, {"ranks", nlohmann::json::array()},
                        {"collectives", nlohmann::json::array()}};
    for (const RankMeasurement& m : ranks)
        j["ranks"].push_back({{"rank", m.rank}, {"host", m.host}, {"fp32_gemm_gflops", m.fp32_gflops},
                              {"bf16_gemm_gflops", m.bf16_gflops}, {"triad_gbs", m.triad_gbs},
                              {"wrong_gemm_elements", m.wrong_elements},
                              {"model_checksum", fmt::format("{:016x}", m.model_checksum)}});
    for (const CollectiveRow& c : collectives)
        j["collectives"].push_back({{"op", c.op}, {"bytes", c.bytes}, {"time_us", c.seconds * 1e6},
                                    {"algbw_gbs", c.algbw_gbs}, {"busbw_gbs", c.busbw_gbs}});
    return j;
}

std::string format_preflight(const PreflightReport& r) {
    std::string out = fmt::format("pre-flight: {} ranks, {} threads each; a rank fails below {:.0f}% of the fleet "
                                  "median GEMM rate or {:.0f}% of its memory bandwidth, or on a wrong number\n\n",
                                  r.ranks.size(), r.threads, 100 * r.min_fraction, 100 * r.min_memory_fraction);
    out += fmt::format("{:>4}  {:<16} {:>10} {:>10} {:>11} {:>11}  {}\n", "RANK", "HOST", "FP32 GF/s", "BF16 GF/s",
                       "TRIAD GB/s", "WRONG ELEM", "MODEL CHECKSUM");
    for (const RankMeasurement& m : r.ranks)
        out += fmt::format("{:>4}  {:<16} {:>10.1f} {:>10.1f} {:>11.2f} {:>11}  {:016x}\n", m.rank, m.host,
                           m.fp32_gflops, m.bf16_gflops, m.triad_gbs, m.wrong_elements, m.model_checksum);
    if (!r.collectives.empty()) {
        out += "\ncollectives over all ranks (as nccl-tests: algbw = bytes / time; busbw = algbw x 2(n-1)/n for "
               "all_reduce, x (n-1)/n for all_gather and reduce_scatter)\n";
        out += fmt::format("{:<14} {:>12} {:>11} {:>11} {:>11}\n", "OP", "BYTES", "TIME us", "ALGBW GB/s",
                           "BUSBW GB/s");
        for (const CollectiveRow& c : r.collectives)
            out += fmt::format("{:<14} {:>12} {:>11.1f} {:>11.3f} {:>11.3f}\n", c.op, c.bytes, c.seconds * 1e6,
                               c.algbw_gbs, c.busbw_gbs);
    }
    out += r.passed() ? "\npre-flight passed\n" : "\npre-flight FAILED:\n";
    for (const std::string& f : r.failures) out += "  " + f + "\n";
    return out;
}

}  // namespace hlat
