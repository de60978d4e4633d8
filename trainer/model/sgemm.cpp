#include "trainer/model/sgemm.h"

#include <oneapi/dnnl/dnnl.h>

#include <atomic>
#include <bit>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace hlat {

static std::atomic<bool> gemm_bit_flip{false};

void set_gemm_bit_flip(bool on) { gemm_bit_flip = on; }

void flip_bit_if_injected(float* C) {
    if (gemm_bit_flip) C[0] = std::bit_cast<float>(std::bit_cast<uint32_t>(C[0]) ^ (1u << 22));
}

void sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
           int ldb, float beta, float* C, int ldc) {
    dnnl_status_t status =
        dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    if (status != dnnl_success)
        throw std::runtime_error("sgemm: oneDNN refused a " + std::to_string(M) + "x" + std::to_string(N) + "x" +
                                 std::to_string(K) + " product (status " + std::to_string((int)status) + ")");
    flip_bit_if_injected(C);
}

}  // namespace hlat
