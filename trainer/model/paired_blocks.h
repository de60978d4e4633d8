// A linear layer's weight narrowed to bf16 straight into the blocked layout
// oneDNN's bf16 matmuls read fastest, both copies in one pass over the fp32
// weight. oneDNN's own reorders (narrow, then reorder twice) moved the bytes
// at a third of memory bandwidth (AMX Xeon, config M: 28 ms a step for 236 MB).
//
// The layout is the one oneDNN names "BA16a64b2a" on AMX: B (K, N) in blocks of
// k_block x n_block, and inside a block the rows interleaved in pairs, B[k][n]
// beside B[k + 1][n], so that one 32-bit load feeds a two-term dot product.
#pragma once

#include "trainer/model/bf16.h"

namespace hlat {

struct PairedBlockLayout {
    int k_block = 0, n_block = 0;  // k_block even: rows come in pairs
    long k_stride = 0, n_stride = 0;  // elements from one block to the next along K, along N
    long padded_k = 0, padded_n = 0;  // K and N rounded up to whole blocks; the padding holds zeros

    // Where B[k][n] lies, in elements: the definition the packer is tested against.
    long offset(long k, long n) const {
        const long kk = k % k_block, nn = n % n_block;
        return (k / k_block) * k_stride + (n / n_block) * n_stride + (kk / 2) * 2 * n_block + 2 * nn + kk % 2;
    }
};

// W (OC, IC, fp32) rounded to nearest even into both copies the products
// read: W^T (K = IC, N = OC) laid out as `t_layout` into `transposed`, and W
// (K = OC, N = IC) as `n_layout` into `natural`. The padding is written with
// zeros. W is read once, in strips of rows that stay in cache while both
// copies are written from them; strips are shared among OpenMP's threads.
void pack_weight_pair(bf16* transposed, const PairedBlockLayout& t_layout, bf16* natural,
                      const PairedBlockLayout& n_layout, const float* w, int OC, int IC);

}  // namespace hlat
