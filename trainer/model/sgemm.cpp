#include "trainer/model/sgemm.h"
#include "trainer/model/aligned.h"

#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace hlat {

static std::atomic<bool> gemm_bit_flip{false};

void set_gemm_bit_flip(bool on) { gemm_bit_flip = on; }

void flip_bit_if_injected(float* C) {
    if (gemm_bit_flip) C[0] = std::bit_cast<float>(std::bit_cast<uint32_t>(C[0]) ^ (1u << 22));
}

void flip_bit_if_injected(bf16* C) {
    if (gemm_bit_flip) C[0] ^= bf16(1u << 6);
}

static void dnnl_sgemm_or_throw(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                                const float* B, int ldb, float beta, float* C, int ldc) {
    dnnl_status_t status =
        dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    if (status != dnnl_success)
        throw std::runtime_error("sgemm: oneDNN refused a " + std::to_string(M) + "x" + std::to_string(N) + "x" +
                                 std::to_string(K) + " product (status " + std::to_string((int)status) + ")");
}

// A weight gradient with many output rows and few columns (the LM head's
// (vocab, 256) on configs S and demo) is a product A^T B whose A is read
// down columns lda floats apart. oneDNN's AVX2 sgemm ran it at 53-58
// GFLOP/s on 2 Zen 3 cores (32 single-threaded), against 105-131 with A's
// columns first copied, kColumnBlock at a time, into a tight buffer: the copy
// is 9 ms of the ~80 ms it saves a step on config S. On 2 threads oneDNN
// summed each output over K in the same order either way (compared bit for
// bit for N <= 256; more threads might split K differently); wider N was as
// fast unblocked and blocking changed its bits, so it is left alone. Measured
// on AVX2 only.
constexpr int kColumnBlock = 192, kMaxBlockedN = 256, kMinBlockedM = 1024;

static bool blocked_columns_pay(bool trans_a, bool trans_b, int M, int N) {
    return trans_a && !trans_b && N <= kMaxBlockedN && M >= kMinBlockedM;
}

static void sgemm_blocked_columns(int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
                                  float beta, float* C, int ldc) {
    static thread_local AlignedVector<float> scratch;  // grows, never shrinks: no zero-fill per call
    if (scratch.size() < (size_t)K * kColumnBlock) scratch.resize((size_t)K * kColumnBlock);
    float* block = scratch.data();  // the calling thread's, shared with the copy's threads
    for (int m0 = 0; m0 < M; m0 += kColumnBlock) {
        const int w = std::min(kColumnBlock, M - m0);
        // Inside a parallel region the copy stays on the calling thread, as
        // every sgemm does there (sgemm.h).
#pragma omp parallel for if (!omp_in_parallel())
        for (int k = 0; k < K; k++) std::memcpy(block + (size_t)k * w, A + (size_t)k * lda + m0, sizeof(float) * w);
        dnnl_sgemm_or_throw(true, false, w, N, K, alpha, block, w, B, ldb, beta, C + (size_t)m0 * ldc, ldc);
    }
}

// A transposed left operand of at most 512 columns whose rows lie a multiple
// of 2 KiB apart (config M's o_proj weight gradient: dout^T, 512 x 2048, rows
// 512 floats apart) ran at 94-97 GFLOP/s on 2 Zen 3 cores, against 118-136
// with its rows copied kPaddedRowGap floats further apart: likely oneDNN's
// copy of A, whose reads down a column then fall into a few cache sets. The
// same sums, the same bits (compared for 512 x 256 and 512 x 512 at K 1024 to
// 4096, on 1 and 2 threads); 256 columns (1 KiB), 1024 and wider products
// gained nothing. Measured on AVX2 only, and only on whole operands (lda ==
// M), so that is all it takes: no small slice of a wider matrix pays a copy
// nobody timed.
constexpr int kPaddedRowGap = 16, kAliasingStride = 512, kMaxPaddedColumns = 512;

static bool padded_rows_pay(bool trans_a, bool trans_b, int M, int N, int lda) {
    return trans_a && !trans_b && lda == M && lda % kAliasingStride == 0 && M <= kMaxPaddedColumns &&
           N <= kMaxPaddedColumns;
}

static void sgemm_padded_rows(int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
                              float beta, float* C, int ldc) {
    static thread_local AlignedVector<float> scratch;  // grows, never shrinks: no zero-fill per call
    const int padded = M + kPaddedRowGap;
    if (scratch.size() < (size_t)K * padded) scratch.resize((size_t)K * padded);
    float* rows = scratch.data();
#pragma omp parallel for if (!omp_in_parallel())
    for (int k = 0; k < K; k++) std::memcpy(rows + (size_t)k * padded, A + (size_t)k * lda, sizeof(float) * M);
    dnnl_sgemm_or_throw(true, false, M, N, K, alpha, rows, padded, B, ldb, beta, C, ldc);
}

void sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
           int ldb, float beta, float* C, int ldc) {
    if (blocked_columns_pay(trans_a, trans_b, M, N))
        sgemm_blocked_columns(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else if (padded_rows_pay(trans_a, trans_b, M, N, lda))
        sgemm_padded_rows(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else
        dnnl_sgemm_or_throw(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    flip_bit_if_injected(C);
}

}  // namespace hlat
