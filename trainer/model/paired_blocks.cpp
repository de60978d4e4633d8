#include "trainer/model/paired_blocks.h"

// GCC 12 warns on the AVX-512 intrinsics' own undefined pass-through
// operands (GCC bug 105593, fixed in GCC 13), as in peak_probe.cpp.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

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

#if defined(__AVX512BW__)
// AVX-512 forms of the two blocks, for blocks of 32 rows (16 pairs; oneDNN's
// on AMX, and on avx512_bf16 without it, are 32 x 64) and a multiple of 16
// columns, away from the matrix's edges. The scalar forms left the pack
// bound by their arithmetic: config M's weights, packed after 1 GB of other
// writes, took 22-25 ms with them and 16-20 with these (AMX Xeon; the
// transposed copy, transposed one element at a time, was the slower half).

// Each lane's bits with its bf16 value, rounded as float_to_bf16_rne rounds,
// in the high 16 bits; the low 16 bits are left as they fall.
inline __m512i rounded_high_halves(__m512 x) {
    const __m512i bits = _mm512_castps_si512(x);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    return _mm512_mask_or_epi32(rounded, nan, bits, _mm512_set1_epi32(0x00400000));  // NaN: quiet, sign kept
}

// 32 consecutive floats as 16 pairs: word j holds v[2j] low, v[2j + 1] high.
inline __m512i paired_words(const float* v) {
    const __m512i lo = rounded_high_halves(_mm512_loadu_ps(v)), hi = rounded_high_halves(_mm512_loadu_ps(v + 16));
    // The high half of every lane of lo, then of hi: 16-bit elements 1, 3, ..., 63.
    const __m512i odd_halves = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31,
                                                29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    return _mm512_permutex2var_epi16(lo, odd_halves, hi);
}

// r[i] holds row i of a 16 x 16 matrix of 32-bit words; afterwards column i.
inline void transpose_16x16(__m512i r[16]) {
    __m512i t[16];
    for (int i = 0; i < 8; i++) {  // per 128-bit lane: (r0[0] r1[0] r0[1] r1[1]), (r0[2] r1[2] r0[3] r1[3])
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {  // r[4i + e], lane L: rows 4i..4i+3 of column 4L + e
        r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int e = 0; e < 4; e++) {  // lane L of r[e], r[4 + e], r[8 + e], r[12 + e] side by side: column 4L + e
        const __m512i ab_lo = _mm512_shuffle_i32x4(r[e], r[4 + e], 0x44);
        const __m512i ab_hi = _mm512_shuffle_i32x4(r[e], r[4 + e], 0xee);
        const __m512i cd_lo = _mm512_shuffle_i32x4(r[8 + e], r[12 + e], 0x44);
        const __m512i cd_hi = _mm512_shuffle_i32x4(r[8 + e], r[12 + e], 0xee);
        t[e] = _mm512_shuffle_i32x4(ab_lo, cd_lo, 0x88);
        t[4 + e] = _mm512_shuffle_i32x4(ab_lo, cd_lo, 0xdd);
        t[8 + e] = _mm512_shuffle_i32x4(ab_hi, cd_hi, 0x88);
        t[12 + e] = _mm512_shuffle_i32x4(ab_hi, cd_hi, 0xdd);
    }
    for (int i = 0; i < 16; i++) r[i] = t[i];
}

// The transposed copy's whole block into out (64-byte aligned): W's rows
// n0.. n0 + n_block - 1 from column k0, 32 columns each, 16 rows transposed
// at a time.
void transposed_block_avx512(uint32_t* out, int n_block, const float* w, int IC, long k0, long n0) {
    for (int g = 0; g < n_block; g += 16) {
        __m512i r[16];
        for (int i = 0; i < 16; i++) r[i] = paired_words(w + (n0 + g + i) * IC + k0);
        transpose_16x16(r);
        for (int j = 0; j < 16; j++) _mm512_store_si512(out + j * n_block + g, r[j]);
    }
}

// The natural copy's whole block into out (64-byte aligned): 16 pairs of W's
// rows from row k0, n_block columns from n0, each word one column of a pair.
void natural_block_avx512(uint32_t* out, int n_block, const float* w, int IC, long k0, long n0) {
    for (int j = 0; j < 16; j++) {
        const float *lo = w + (k0 + 2 * j) * IC + n0, *hi = lo + IC;
        for (int c = 0; c < n_block; c += 16) {
            const __m512i l = rounded_high_halves(_mm512_loadu_ps(lo + c));
            const __m512i h = rounded_high_halves(_mm512_loadu_ps(hi + c));
            _mm512_store_si512(out + j * n_block + c, _mm512_mask_blend_epi16(0x55555555, h, _mm512_srli_epi32(l, 16)));
        }
    }
}
#endif

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

// Either copy's block at (k0, n0), made in `block` (and `rows`: scratch kept
// in cache, 64-byte aligned), by the AVX-512 forms where they apply, then
// stored past the cache into dst. Stored by the AVX-512 forms straight into
// dst, the pack was no faster.
void write_natural_block(uint32_t* dst, uint32_t* block, const PairedBlockLayout& l, const float* w, int OC, int IC,
                         long k0, long n0) {
#if defined(__AVX512BW__)
    if (l.k_block == 32 && l.n_block % 16 == 0 && k0 + 32 <= OC && n0 + l.n_block <= IC)
        natural_block_avx512(block, l.n_block, w, IC, k0, n0);
    else
#endif
        natural_block(block, l, w, OC, IC, k0, n0);
    stream_copy(dst, block, (long)l.k_block * l.n_block / 2);
}

void write_transposed_block(uint32_t* dst, uint32_t* block, uint32_t* rows, const PairedBlockLayout& l,
                            const float* w, int OC, int IC, long k0, long n0) {
#if defined(__AVX512BW__)
    if (l.k_block == 32 && l.n_block % 16 == 0 && k0 + 32 <= IC && n0 + l.n_block <= OC)
        transposed_block_avx512(block, l.n_block, w, IC, k0, n0);
    else
#endif
        transposed_block(block, rows, l, w, OC, IC, k0, n0);
    stream_copy(dst, block, (long)l.k_block * l.n_block / 2);
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
        // Each block is stored past the cache: the copies are read by the
        // next step's products, long after, and a plain store would first
        // read every line it overwrites.
        AlignedVector<uint32_t> rows(t_words), block(std::max(n_words, t_words));
#pragma omp for schedule(static)
        for (long s = 0; s < strips; s++) {
            const long row_end = (s + 1) * strip;
            // The strip asked for whole at once: read as two blocks' worth of
            // scattered rows at a time, it came at half the bandwidth.
            const long first_row = std::min(s * strip, (long)OC), end_row = std::min(row_end, (long)OC);
            prefetch_span(w + first_row * IC, (end_row - first_row) * IC * (long)sizeof(float));
            for (long k0 = s * strip; k0 < std::min(row_end, n_layout.padded_k); k0 += n_layout.k_block)
                for (long n0 = 0; n0 < n_layout.padded_n; n0 += n_layout.n_block)
                    write_natural_block(n_out + n_layout.offset(k0, n0) / 2, block.data(), n_layout, w, OC, IC, k0,
                                        n0);
            for (long n0 = s * strip; n0 < std::min(row_end, t_layout.padded_n); n0 += t_layout.n_block)
                for (long k0 = 0; k0 < t_layout.padded_k; k0 += t_layout.k_block)
                    write_transposed_block(t_out + t_layout.offset(k0, n0) / 2, block.data(), rows.data(), t_layout, w,
                                           OC, IC, k0, n0);
        }
        stream_fence();
    }
}

}  // namespace hlat
