// Pre-flight burn-in (issue 21). Before a long job every rank measures what it
// brings: fp32 and bf16 GEMM rates, memory bandwidth (a STREAM triad, the
// ranks of a host one at a time since they share its memory) and
// whether its arithmetic is right (GEMMs of small integers, whose exact result
// is known whatever the summation order, and a seeded forward/backward of the
// configured model, whose gradients must be bit-identical on every rank).
// Together the ranks time all-reduce and all-gather over message sizes, and
// report them as nccl-tests does. A rank below a fraction of the fleet's median
// in any rate, or computing wrong numbers, fails the pre-flight, named with
// its host and the measurement.
#pragma once

#include "trainer/config/config.h"
#include "trainer/config/faults.h"
#include "trainer/parallel/parallel.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace hlat {

struct PreflightOptions {
    int threads = 1;            // per rank
    double min_fraction = 0.8;         // of the fleet's median, for the GEMM rates
    // Memory bandwidth is looser: on a shared VM a plain triad varies 35-50
    // GB/s run to run; a rank at 60% of the median has a real fault.
    double min_memory_fraction = 0.6;
    long max_bytes = 64L << 20; // largest collective message
    ModelConfig model;          // the model whose forward/backward is checksummed
};

struct RankMeasurement {
    int rank = 0;
    std::string host;
    double fp32_gflops = 0, bf16_gflops = 0, triad_gbs = 0;
    long wrong_elements = 0;  // of the exact-integer GEMMs, fp32 and bf16
    uint64_t model_checksum = 0;
};

struct CollectiveRow {
    std::string op;  // "all_reduce", "all_gather" or "reduce_scatter"
    long bytes;      // message size; all_gather, reduce_scatter: the whole (gathered, scattered) total, as nccl-tests counts it
    double seconds;  // one call, the slowest rank's mean
    double algbw_gbs, busbw_gbs;
};

struct PreflightReport {
    int threads = 1;
    double min_fraction = 0.8, min_memory_fraction = 0.6;
    std::vector<RankMeasurement> ranks;
    std::vector<CollectiveRow> collectives;
    std::vector<std::string> failures;  // sentences naming rank, host and measurement; empty: passed
    bool passed() const { return failures.empty(); }
    nlohmann::json to_json() const;
};

// Runs the pre-flight on every rank of the job (a collective over the world).
// The full report is at rank 0; the others get theirs with failures only.
// Faults: slow_rank stretches that rank's timed compute, sdc corrupts its GEMMs.
PreflightReport run_preflight(Parallel& parallel, const PreflightOptions& options, const Faults& faults);

// fp32 and bf16 GEMMs of small integers, whose exact result is known: the
// number of output elements that came out wrong (0 on a healthy core). The
// pre-flight's arithmetic check, and the health check's between steps.
long wrong_gemm_elements();

// The judgment alone: each rate against the fleet median, the exact GEMMs,
// the model checksums (a rank outside the majority is wrong; with no majority
// every rank is named).
std::vector<std::string> judge_preflight(const std::vector<RankMeasurement>& ranks, double min_fraction,
                                         double min_memory_fraction);

// nccl-tests' bus bandwidth: all-reduce moves 2(n-1)/n of the data over each
// link, all-gather (n-1)/n.
double bus_bandwidth(const std::string& op, double algbw, int ranks);

// The report as a person reads it: per-rank table, collectives, verdict.
std::string format_preflight(const PreflightReport& report);

}  // namespace hlat
