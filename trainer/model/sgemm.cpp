#include "trainer/model/sgemm.h"

#include <oneapi/dnnl/dnnl.h>

#include <stdexcept>
#include <string>

namespace hlat {

void sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
           int ldb, float beta, float* C, int ldc) {
    dnnl_status_t status =
        dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    if (status != dnnl_success)
        throw std::runtime_error("sgemm: oneDNN refused a " + std::to_string(M) + "x" + std::to_string(N) + "x" +
                                 std::to_string(K) + " product (status " + std::to_string((int)status) + ")");
}

}  // namespace hlat
