#include "trainer/model/paired_blocks.h"

#include "trainer/model/aligned.h"
#include "trainer/model/cache_hints.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

namespace hlat {
namespace {

// A pair of rows' values at one column, as a block holds them: B[k][n] in
// the low half, B[k + 1][n] in the high half.
inline uint32_t paired(float lo, float hi) {
    return (uint32_t)float_to_bf16_rne(lo) | (uint32_t)float_to_bf16_rne(hi) << 16;
}

// The natural copy's block at (k0, n0): B = W, so a block's rows are W's
// rows k0.., its columns W's columns n0...
void natural_block(uint32_t* out, const PairedBlockLayout& l, const float* w, int OC, int IC, long k0, long n0) {
    const int width = (int)std::clamp<long>(IC - n0, 0, l.n_block);  // W's columns in this block
    for (int j = 0; j < l.k_block / 2; j++) {
        const long k = k0 + 2 * j;
        uint32_t* o = out + (long)j * l.n_block;
        const int filled = k < OC ? width : 0;  // the rest is padding
        if (filled > 0 && k + 1 < OC) {
            const float *lo = w + k * IC + n0, *hi = lo + IC;
            for (int nn = 0; nn < width; nn++) o[nn] = paired(lo[nn], hi[nn]);
        } else if (filled > 0) {
            const float* lo = w + k * IC + n0;
            for (int nn = 0; nn < width; nn++) o[nn] = paired(lo[nn], 0.0f);
        }
        std::fill(o + filled, o + l.n_block, 0u);
    }
}

// The transposed copy's block at (k0, n0): B = W^T, so column n of the block
// is W's row n0 + n from column k0 on, whose neighbouring values are already
// the pairs a block wants. Each row is narrowed into `rows` (n_block x
// k_block / 2, in cache), then transposed into the block.
void transposed_block(uint32_t* out, uint32_t* rows, const PairedBlockLayout& l, const float* w, int OC, int IC,
                      long k0, long n0) {
    const int pairs = l.k_block / 2;
    const int depth = (int)std::clamp<long>(IC - k0, 0, l.k_block);  // W's columns in this block
    for (int nn = 0; nn < l.n_block; nn++) {
        uint32_t* r = rows + (long)nn * pairs;
        if (n0 + nn >= OC || depth == 0) {
            std::fill(r, r + pairs, 0u);
            continue;
        }
        const float* v = w + (n0 + nn) * IC + k0;
        if (depth == l.k_block) {
            for (int j = 0; j < pairs; j++) r[j] = paired(v[2 * j], v[2 * j + 1]);
        } else {
            for (int j = 0; j < pairs; j++)
                r[j] = paired(2 * j < depth ? v[2 * j] : 0.0f, 2 * j + 1 < depth ? v[2 * j + 1] : 0.0f);
        }
    }
    for (int j = 0; j < pairs; j++)
        for (int nn = 0; nn < l.n_block; nn++) out[(long)j * l.n_block + nn] = rows[(long)nn * pairs + j];
}

}  // namespace

void pack_weight_pair(bf16* transposed, const PairedBlockLayout& t_layout, bf16* natural,
                      const PairedBlockLayout& n_layout, const float* w, int OC, int IC) {
    // A strip of W's rows holds whole K blocks of the natural copy and whole
    // N blocks of the transposed one.
    const long strip = std::lcm((long)n_layout.k_block, (long)t_layout.n_block);
    const long strips = (std::max(n_layout.padded_k, t_layout.padded_n) + strip - 1) / strip;
    uint32_t* t_out = reinterpret_cast<uint32_t*>(transposed);
    uint32_t* n_out = reinterpret_cast<uint32_t*>(natural);
    const long n_words = (long)n_layout.k_block * n_layout.n_block / 2;  // 32-bit pairs in a block
    const long t_words = (long)t_layout.k_block * t_layout.n_block / 2;
#pragma omp parallel
    {
        // Each block is made in cache, then stored past it: the copies are
        // read by the next step's products, long after, and a plain store
        // would first read every line it overwrites.
        AlignedVector<uint32_t> rows(t_words), block(std::max(n_words, t_words));
#pragma omp for schedule(static)
        for (long s = 0; s < strips; s++) {
            const long row_end = (s + 1) * strip;
            // The strip asked for whole at once: read as two blocks' worth of
            // scattered rows at a time, it came at half the bandwidth.
            const long first_row = std::min(s * strip, (long)OC), end_row = std::min(row_end, (long)OC);
            prefetch_span(w + first_row * IC, (end_row - first_row) * IC * (long)sizeof(float));
            for (long k0 = s * strip; k0 < std::min(row_end, n_layout.padded_k); k0 += n_layout.k_block)
                for (long n0 = 0; n0 < n_layout.padded_n; n0 += n_layout.n_block) {
                    natural_block(block.data(), n_layout, w, OC, IC, k0, n0);
                    stream_copy(n_out + n_layout.offset(k0, n0) / 2, block.data(), n_words);
                }
            for (long n0 = s * strip; n0 < std::min(row_end, t_layout.padded_n); n0 += t_layout.n_block)
                for (long k0 = 0; k0 < t_layout.padded_k; k0 += t_layout.k_block) {
                    transposed_block(block.data(), rows.data(), t_layout, w, OC, IC, k0, n0);
                    stream_copy(t_out + t_layout.offset(k0, n0) / 2, block.data(), t_words);
                }
        }
        stream_fence();
    }
}

}  // namespace hlat
