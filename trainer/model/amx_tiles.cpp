// AMX tile products (amx_tiles.h). Eight tiles of 16 rows x 64 bytes: four
// hold a 32 x 32 block of fp32 sums, two a 32 x 32 chunk of A (16 rows x 32
// bf16 each), two a 32 x 32 chunk of B in the pair-interleaved layout the
// tile multiply reads (16 rows of 16 column pairs, "VNNI"), packed once per
// call.
#include "trainer/model/amx_tiles.h"

#include "trainer/model/aligned.h"

#include <cpuid.h>
// GCC 12 warns that the AVX-512 intrinsics' own undefined pass-through
// operand "may be used uninitialized" when they are built through a target
// attribute (GCC bug 105593, fixed in GCC 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace hlat {

namespace {

constexpr long kArchRequestXcompPerm = 0x1023;  // arch_prctl: ask for an XSAVE feature
constexpr long kXfeatureTileData = 18;         // AMX's tile data

bool cpu_has_amx_bf16() {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    const unsigned amx_bf16 = 1u << 22, amx_tile = 1u << 24;
    return (d & amx_bf16) && (d & amx_tile);
}

// Sixteen rows of 16 32-bit words, transposed in registers: unpacking
// neighbouring rows' words, then their pairs, then 128-bit lanes twice.
[[gnu::target("avx512f")]] inline void transpose_16x16(__m512i (&r)[16]) {
    __m512i t[16], u[16], v[8], w[8];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    // u[4i + j], lane L: rows 4i..4i+3 of column 4L + j.
    for (int j = 0; j < 4; j++) {
        v[j] = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x88);  // lanes 0, 2 of each
        v[j + 4] = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xdd);  // lanes 1, 3
        w[j] = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x88);
        w[j + 4] = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xdd);
    }
    for (int j = 0; j < 4; j++) {
        r[j] = _mm512_shuffle_i32x4(v[j], w[j], 0x88);
        r[j + 8] = _mm512_shuffle_i32x4(v[j], w[j], 0xdd);
        r[j + 4] = _mm512_shuffle_i32x4(v[j + 4], w[j + 4], 0x88);
        r[j + 12] = _mm512_shuffle_i32x4(v[j + 4], w[j + 4], 0xdd);
    }
}

// B's 16-column panels, each 16 x 2-value pairs per pair of rows of op(B):
// panel p, pair kp, column n holds op(B)[2kp][16p + n], op(B)[2kp + 1][16p + n].
// For trans_b these 32-bit words are B's own, from rows 16p..16p+15,
// transposed 16 x 16 at a time (1 us for config M's k, 9 one word at a time).
[[gnu::target("avx512f")]] void pack_transposed_panels(uint32_t* out, const bf16* B, int ldb, int N, int K) {
    const int pairs = K / 2;
    for (int p = 0; p < N / 16; p++) {
        uint32_t* panel = out + (long)p * pairs * 16;
        for (int kp0 = 0; kp0 < pairs; kp0 += 16) {
            __m512i r[16];
            for (int n = 0; n < 16; n++) r[n] = _mm512_loadu_si512(B + (long)(16 * p + n) * ldb + 2 * kp0);
            transpose_16x16(r);
            for (int c = 0; c < 16; c++) _mm512_storeu_si512(panel + (kp0 + c) * 16, r[c]);
        }
    }
}

// ... and for plain B (K x N): rows 2kp and 2kp + 1 interleaved, 32 values
// (two panels) at a time, each pair of panels from row first_row(p) (even,
// p even) on: rows above it are never read. N a multiple of 32.
template <typename FirstRow>
[[gnu::target("avx512f,avx512bw")]] void pack_plain_panels(uint32_t* out, const bf16* B, int ldb, int N, int K,
                                                           FirstRow first_row) {
    const int pairs = K / 2;
    alignas(64) uint16_t left_words[32], right_words[32];  // 32 + j: word j of the second row
    for (int n = 0; n < 16; n++) {
        left_words[2 * n] = (uint16_t)n, left_words[2 * n + 1] = (uint16_t)(32 + n);
        right_words[2 * n] = (uint16_t)(16 + n), right_words[2 * n + 1] = (uint16_t)(48 + n);
    }
    const __m512i left = _mm512_load_si512(left_words), right = _mm512_load_si512(right_words);
    for (int p = 0; p < N / 16; p += 2) {
        uint32_t* panel = out + (long)p * pairs * 16;
        for (int kp = first_row(p) / 2; kp < pairs; kp++) {
            const bf16* r0 = B + (long)(2 * kp) * ldb + 16 * p;
            const __m512i even_row = _mm512_loadu_si512(r0), odd_row = _mm512_loadu_si512(r0 + ldb);
            _mm512_storeu_si512(panel + kp * 16, _mm512_permutex2var_epi16(even_row, left, odd_row));
            _mm512_storeu_si512(panel + (pairs + kp) * 16, _mm512_permutex2var_epi16(even_row, right, odd_row));
        }
    }
}

// out (N x K, dense) = B^T for bf16 B (K x N, ldb), N and K multiples of 32:
// 32 x 32 blocks as 16 x 16 blocks of 32-bit words (pairs of B's columns)
// transposed in registers, each pair then split into its two rows of out.
[[gnu::target("avx512f,avx512bw")]] void transpose_bf16(bf16* out, const bf16* B, int ldb, int N, int K) {
    alignas(64) uint16_t even_words[32];
    for (int i = 0; i < 32; i++) even_words[i] = (uint16_t)(2 * i);  // 32 + j: word j of the second operand
    const __m512i even = _mm512_load_si512(even_words), odd = _mm512_add_epi16(even, _mm512_set1_epi16(1));
    for (int k0 = 0; k0 < K; k0 += 32)
        for (int n0 = 0; n0 < N; n0 += 32) {
            __m512i top[16], bottom[16];  // rows k0..k0+15 and k0+16..k0+31, 16 column pairs each
            for (int i = 0; i < 16; i++) top[i] = _mm512_loadu_si512(B + (long)(k0 + i) * ldb + n0);
            for (int i = 0; i < 16; i++) bottom[i] = _mm512_loadu_si512(B + (long)(k0 + 16 + i) * ldb + n0);
            transpose_16x16(top);
            transpose_16x16(bottom);
            for (int j = 0; j < 16; j++) {
                _mm512_storeu_si512(out + (long)(n0 + 2 * j) * K + k0,
                                    _mm512_permutex2var_epi16(top[j], even, bottom[j]));
                _mm512_storeu_si512(out + (long)(n0 + 2 * j + 1) * K + k0,
                                    _mm512_permutex2var_epi16(top[j], odd, bottom[j]));
            }
        }
}

// C's 32 x 32 block at (i0, j0) = alpha * the four sum tiles: through a
// block in L1, since tile stores straight into C's rows (2 KB apart at
// config M) measured slower than these vector stores.
[[gnu::target("avx512f")]] void store_block(float* C, int ldc, float alpha, const float (&sums)[4][256]) {
    const __m512 a = _mm512_set1_ps(alpha);
    for (int r = 0; r < 16; r++) {
        float* top = C + (long)r * ldc;
        float* bottom = top + 16L * ldc;
        _mm512_storeu_ps(top, _mm512_mul_ps(a, _mm512_load_ps(sums[0] + r * 16)));
        _mm512_storeu_ps(top + 16, _mm512_mul_ps(a, _mm512_load_ps(sums[1] + r * 16)));
        _mm512_storeu_ps(bottom, _mm512_mul_ps(a, _mm512_load_ps(sums[2] + r * 16)));
        _mm512_storeu_ps(bottom + 16, _mm512_mul_ps(a, _mm512_load_ps(sums[3] + r * 16)));
    }
}

// A 16 x 16 block of C (ldc) = sums^T + C, or sums^T + 0 (sums 16 x 16,
// row-major): for the product whose tiles hold C transposed. Without
// accumulate, the same bits as adding to a C of zeros (-0 comes out +0).
[[gnu::target("avx512f")]] void add_transposed(float* C, int ldc, const float* sums, bool accumulate) {
    __m512i r[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_load_si512(sums + i * 16);
    transpose_16x16(r);
    for (int j = 0; j < 16; j++) {
        float* c = C + (long)j * ldc;
        const __m512 to = accumulate ? _mm512_loadu_ps(c) : _mm512_setzero_ps();
        _mm512_storeu_ps(c, _mm512_add_ps(_mm512_castsi512_ps(r[j]), to));
    }
}

// The 32 x 32 block at (i0, j0) of A @ op(B), summed over K's chunks
// [k_begin, k_end) in order, into `sums`.
[[gnu::target("amx-tile,amx-bf16")]] void block_sums(float (&sums)[4][256], const bf16* A, int lda,
                                                     const uint32_t* panels, long panel_words, int i0, int j0,
                                                     int k_begin, int k_end) {
    // GCC 12's tile loads and stores are asm statements that do not say they
    // touch memory: these barriers keep the packed panels written before the
    // loads read them, and `sums` read only after the stores, once inlined.
    asm volatile("" : : : "memory");
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    const uint32_t* left = panels + (long)(j0 / 16) * panel_words;
    const uint32_t* right = left + panel_words;
    const bf16* top = A + (long)i0 * lda;
    const bf16* bottom = top + 16L * lda;
    for (int k0 = k_begin; k0 < k_end; k0 += 32) {
        _tile_loadd(4, top + k0, lda * (int)sizeof(bf16));
        _tile_loadd(5, bottom + k0, lda * (int)sizeof(bf16));
        _tile_loadd(6, left + k0 / 2 * 16, 64);
        _tile_loadd(7, right + k0 / 2 * 16, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, sums[0], 64);
    _tile_stored(1, sums[1], 64);
    _tile_stored(2, sums[2], 64);
    _tile_stored(3, sums[3], 64);
    asm volatile("" : : : "memory");
}

}  // namespace

// The tile configuration: palette 1, eight tiles of 16 rows x 64 bytes.
struct alignas(64) TileConfig {
    uint8_t palette = 1, start_row = 0, reserved[14] = {};
    uint16_t bytes_per_row[16] = {};
    uint8_t rows[16] = {};
};

[[gnu::target("amx-tile")]] void configure_amx_tiles() {
    TileConfig config;
    for (int t = 0; t < 8; t++) config.rows[t] = 16, config.bytes_per_row[t] = 64;
    // GCC 12 does not see that ldtilecfg reads the configuration and may drop
    // the stores above without this (it did in a bench).
    asm volatile("" : : "r"(&config) : "memory");
    _tile_loadconfig(&config);
}

[[gnu::target("amx-tile")]] void release_amx_tiles() { _tile_release(); }

bool amx_tiles_usable() {
    // The packing and the stores around the tiles are AVX-512.
    static const bool usable = cpu_has_amx_bf16() && __builtin_cpu_supports("avx512f") &&
                               __builtin_cpu_supports("avx512bw") &&
                               syscall(SYS_arch_prctl, kArchRequestXcompPerm, kXfeatureTileData) == 0;
    return usable;
}

void causal_tile_product(bool trans_b, int M, int N, int K, float alpha, const bf16* A, int lda, const bf16* B,
                         int ldb, float* C, int ldc, int lookahead) {
    static thread_local AlignedVector<uint32_t> panels;
    const long panel_words = (long)K / 2 * 16;
    panels.resize((size_t)(N / 16) * panel_words);
    if (trans_b) pack_transposed_panels(panels.data(), B, ldb, N, K);
    else pack_plain_panels(panels.data(), B, ldb, N, K, [](int) { return 0; });
    configure_amx_tiles();
    alignas(64) float sums[4][256];
    for (int i0 = 0; i0 < M; i0 += 32) {
        const int last_seen = i0 + 31 + lookahead;  // by the block's last row
        const int k_end = trans_b ? K : std::min(K, (last_seen + 32) / 32 * 32);
        const int j_end = trans_b ? std::min(N, (last_seen + 32) / 32 * 32) : N;
        for (int j0 = 0; j0 < j_end; j0 += 32) {
            block_sums(sums, A, lda, panels.data(), panel_words, i0, j0, 0, k_end);
            store_block(C + (long)i0 * ldc + j0, ldc, alpha, sums);
        }
    }
    release_amx_tiles();
}

// The tiles hold C^T = B^T A: their left operand is B^T (N x K), transposed
// once, and their right A itself in panels (A's rows are the sums' index),
// each from the chunk of 32 rows where its columns' first visible row lies.
// A sum skips only rows where A is zero: the same sums in the same order as
// oneDNN's A^T B, whose chunks there add zeros to zero (where B is finite:
// there oneDNN's 0 x Inf would give NaN).
void causal_tile_product_transposed(int M, int N, int K, const bf16* A, int lda, const bf16* B, int ldb, float* C,
                                    int ldc, int lookahead, bool accumulate) {
    static thread_local AlignedVector<uint32_t> panels;
    static thread_local AlignedVector<bf16> b_transposed;
    const long panel_words = (long)K / 2 * 16;
    panels.resize((size_t)(M / 16) * panel_words);
    b_transposed.resize((size_t)N * K);
    // Column c of A is seen from row c - lookahead on; a 32-column block from
    // the chunk holding its first column's.
    auto first_chunk = [lookahead](int c0) { return c0 - lookahead <= 0 ? 0 : (c0 - lookahead) / 32 * 32; };
    pack_plain_panels(panels.data(), A, lda, M, K, [&](int p) { return first_chunk(p / 2 * 32); });
    transpose_bf16(b_transposed.data(), B, ldb, N, K);
    configure_amx_tiles();
    alignas(64) float sums[4][256];
    for (int c0 = 0; c0 < M; c0 += 32)
        for (int n0 = 0; n0 < N; n0 += 32) {
            block_sums(sums, b_transposed.data(), K, panels.data(), panel_words, n0, c0, first_chunk(c0), K);
            // sums[2 * top_or_bottom + left_or_right]: rows n0 (+16) of C^T, columns c0 (+16)
            for (int t = 0; t < 4; t++)
                add_transposed(C + (long)(c0 + (t & 1) * 16) * ldc + n0 + (t >> 1) * 16, ldc, sums[t], accumulate);
        }
    release_amx_tiles();
}

}  // namespace hlat
