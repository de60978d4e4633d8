// Causal softmax attention, forward and backward (kernels.h), for every
// precision: fp32 products on fp32 qkv, or bf16 products on the head-major
// bf16 copy of qkv.
//
// One (batch, head) pair at a time, one block of query rows at a time
// (kAttBlock of them): block rows [r0, r1) only see keys [0, r1 + lookahead)
// (lookahead is 0 except when the mask_leak fault is injected), which skips
// most of the masked upper triangle, and each block's scores, softmax and
// products run while the block is still in cache (a whole head's T x T
// probabilities are not). The products are small (64 query rows by up to T
// keys by HD): each runs on the calling thread (sgemm or oneDNN inside a
// parallel region), the heads spread over the threads. Where oneDNN runs bf16
// on AMX the block is the whole head (query_block_rows says why), and the
// four products that the causal mask cuts run on hlat's own tile products
// (amx_tiles.h) where the shapes fit.
#include "trainer/model/aligned.h"
#include "trainer/model/amx_tiles.h"
#include "trainer/model/bf16.h"
#include "trainer/model/cache_hints.h"
#include "trainer/model/kernels.h"
#include "trainer/model/kernels_bf16.h"
#include "trainer/model/qkv_layout.h"
#include "trainer/model/sgemm.h"
#include "trainer/model/vector_math.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

namespace hlat {

namespace {

// How the four products read their operands, and the values they hold. The
// softmax and its backward are fp32 under every one.
//  - Fp32Operands: fp32 values, sgemm; q, k, v read in place from qkv.
//  - Bf16Operands: bf16 values, oneDNN's bf16 products (a CPU with
//    avx512_bf16); qkv's head-major bf16 copy read in place, dout narrowed per
//    head, the probabilities and score gradients narrowed as produced.
//  - Bf16ValuesInFp32: the same bf16 values, held in fp32 for sgemm (the
//    emulated engine, kernels_bf16.h): q, k and v are widened once per query
//    head in forward (k and v once per kv group in backward), and the
//    probabilities and score gradients are rounded to bf16 values in fp32 as
//    produced (the score gradients in place of dP, as in fp32). Computing
//    through gemm_bf16_on_thread instead would widen k and v again for every
//    block of query rows, and narrow the probabilities only to widen them
//    back. Same values, same products, same sums as that: bit for bit
//    (measured on AVX2; the products' leading dimensions differ, which
//    oneDNN's sgemm may weigh on other CPUs).
struct Fp32Operands {
    using Op = float;
    static constexpr bool kBf16 = false;
};
struct Bf16Operands {
    using Op = bf16;
    static constexpr bool kBf16 = true;
};
struct Bf16ValuesInFp32 {
    using Op = float;
    static constexpr bool kBf16 = true;
};

// x as an operand of the products: itself, narrowed, or its bf16 value.
template <typename Ops>
inline typename Ops::Op to_operand(float x) {
    if constexpr (!Ops::kBf16) return x;
    else if constexpr (std::is_same_v<typename Ops::Op, bf16>) return float_to_bf16_rne(x);
    else return bf16_value(x);
}

constexpr int kAttBlock = 64;

// Query rows per block. oneDNN 2.6 runs small bf16 products on AMX CPUs
// (Sapphire Rapids) through its generic bf16 gemm, not its AMX kernels, at
// 25-60 GFLOP/s a core: one head's per-block products at config M's shapes
// (T 512, HD 64) took 0.70 ms forward, against 0.15 ms for the same head's
// two products over all T x T scores, which take the AMX kernels (a bench of
// gemm_bf16_on_thread on one core of a Xeon with AMX). There the products
// computing the masked half too cost less than skipping it: the block is the
// whole head.
AttentionBlocking& blocking_choice() {
    static AttentionBlocking blocking = AttentionBlocking::Auto;
    return blocking;
}

bool bf16_whole_heads() {
    const AttentionBlocking b = blocking_choice();
    return b == AttentionBlocking::WholeHead || b == AttentionBlocking::WholeHeadOnTiles ||
           (b == AttentionBlocking::Auto && bf16_engine_uses_amx());
}

// Whole heads with the causal products on hlat's tiles: what Auto picks where
// oneDNN runs on AMX, and what WholeHeadOnTiles asks for; either only where
// this process may use the tiles (elsewhere WholeHeadOnTiles is WholeHead).
bool bf16_on_tiles() {
    const AttentionBlocking b = blocking_choice();
    return (b == AttentionBlocking::WholeHeadOnTiles || (b == AttentionBlocking::Auto && bf16_engine_uses_amx())) &&
           amx_tiles_usable();
}

template <typename Ops>
int query_block_rows(int T) {
    if constexpr (std::is_same_v<typename Ops::Op, bf16>)
        if (bf16_whole_heads()) return T;
    return kAttBlock;
}

inline int block_end(int r0, int T, int rows) { return r0 + rows < T ? r0 + rows : T; }
inline int visible_keys(int r1, int T, int lookahead) { return r1 + lookahead < T ? r1 + lookahead : T; }
inline int last_key(int i, int T, int lookahead) { return i + lookahead < T ? i + lookahead : T - 1; }

void gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
          float beta, float* C, int ldc) {
    sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
// On AMX, oneDNN 2.6 takes its AMX kernels for these products only when C is
// dense (ldc == N): a head's output lies HD floats wide in a row of all heads,
// and into that the same whole-head product ran 2-3x slower (its generic
// gemm). With whole heads the product goes to a dense scratch, then is copied
// or added into C: the same products, one more pass over a T x HD block in
// cache.
void gemm(bool ta, bool tb, int M, int N, int K, float alpha, const bf16* A, int lda, const bf16* B, int ldb,
          float beta, float* C, int ldc) {
    if (ldc == N || !bf16_whole_heads())
        return gemm_bf16_on_thread(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta != 0.0f, C, ldc);
    static thread_local AlignedVector<float> dense;
    dense.resize((size_t)M * N);
    gemm_bf16_on_thread(ta, tb, M, N, K, alpha, A, lda, B, ldb, false, dense.data(), N);
    for (int i = 0; i < M; i++) {
        float* c = C + (long)i * ldc;
        const float* d = dense.data() + (long)i * N;
        if (beta != 0.0f)
            for (int j = 0; j < N; j++) c[j] += d[j];
        else
            std::copy(d, d + N, c);
    }
}

// C (M x N) = alpha * A @ op(B) for the products the causal mask cuts: the
// scores (q k^T, dO v^T; trans_b) and the probabilities or score gradients
// times v or k (A zero past each row's visible keys). On hlat's tiles for
// whole heads (row0 0: row i of A is query i) where the shapes fit, which
// skip what the mask hides (amx_tiles.h: the same sums, the same bits as
// oneDNN's); else gemm(). C's entries past a row's visible keys are then
// either left as they were or computed: no reader looks at them.
template <typename Op>
void causal_gemm(bool tb, int M, int N, int K, float alpha, const Op* A, int lda, const Op* B, int ldb, float* C,
                 int ldc, int lookahead, int row0) {
    if constexpr (std::is_same_v<Op, bf16>)
        if (row0 == 0 && bf16_on_tiles() && fits_tiles(M, N, K))
            return causal_tile_product(tb, M, N, K, alpha, A, lda, B, ldb, C, ldc, lookahead);
    gemm(false, tb, M, N, K, alpha, A, lda, B, ldb, 0.0f, C, ldc);
}

// A T x HD slice of qkv or dout (leading dimension ld) as the products read it.
template <typename E>
struct Slice {
    const E* data;
    int ld;
};

// Per thread: the operands the products read that are not qkv itself. Grows
// to the largest T and stays.
template <typename Op>
struct HeadScratch {
    AlignedVector<Op> dout;            // one head's output gradient (bf16 modes)
    AlignedVector<Op> probs;           // T x T probabilities (bf16 modes)
    AlignedVector<Op> dscores;         // T x T score gradients (Bf16Operands)
    AlignedVector<float> q, k, v;      // one head's widened q, k, v (Bf16ValuesInFp32)
    AlignedVector<float> columns;      // a block of columns, packed (causal_matmul_transposed)
    AlignedVector<float> scores;       // T x T scores before the softmax (AMX: scores_buffer)
    static HeadScratch& mine(int T) {
        static thread_local HeadScratch s;
        if (s.probs.size() < (size_t)T * T) {
            s.probs.resize((size_t)T * T);
            if constexpr (!std::is_same_v<Op, float>) s.dscores.resize((size_t)T * T);
        }
        return s;
    }
};

// Head h (q heads, then k, then v) of batch element b of qkv: row-major fp32
// or head-major bf16 (kernels.h).
template <typename E>
Slice<E> head_of(const E* qkv, int b, int h, int T, int NH, int NKV, int HD) {
    const int QKV = (NH + 2 * NKV) * HD;
    const QkvLayout layout = std::is_same_v<E, float> ? QkvLayout::row_major(QKV, HD) : QkvLayout::head_major(T, HD);
    return {qkv + (long)b * T * QKV + h * layout.head, (int)layout.row};
}

// That head as the products read it: in place, or widened into `widened`
// (Bf16ValuesInFp32, whose qkv is bf16 and whose products read fp32).
template <typename Ops, typename E>
Slice<typename Ops::Op> head_operand(const E* qkv, int b, int h, int T, int NH, int NKV, int HD,
                                     AlignedVector<float>& widened) {
    const Slice<E> head = head_of(qkv, b, h, T, NH, NKV, HD);
    if constexpr (std::is_same_v<E, typename Ops::Op>) {
        return head;
    } else {
        widened.resize((size_t)T * HD);
        bf16_widen(widened.data(), head.data, (long)T * HD);  // a head-major slice is contiguous: ld == HD
        return {widened.data(), HD};
    }
}

// dout's head (leading dimension ld) as the products read it: in place for
// fp32, a contiguous per-thread copy of its bf16 values otherwise. Its rows
// (HD floats, a row of all heads apart) are asked for kDoutRowsAhead ahead:
// read one at a time from memory, they came at its latency (config M's bf16
// attention backward, a Xeon with AMX: 78.4 -> 71.1 and 76.2 -> 70.4 ms a step
// in two sets of three profiles in turns; 16 rows ahead no better).
constexpr int kDoutRowsAhead = 8;
template <typename Ops>
Slice<typename Ops::Op> dout_operand(const float* x, int ld, int T, int HD, AlignedVector<typename Ops::Op>& copy) {
    if constexpr (!Ops::kBf16) {
        return {x, ld};
    } else {
        copy.resize((size_t)T * HD);
        for (int i = 0; i < T; i++) {
            if (i + kDoutRowsAhead < T) prefetch_span(x + (long)(i + kDoutRowsAhead) * ld, HD * (long)sizeof(float));
            for (int j = 0; j < HD; j++) copy[(size_t)i * HD + j] = to_operand<Ops>(x[(long)i * ld + j]);
        }
        return {copy.data(), HD};
    }
}

// The operand the products read for the T x T probabilities: P itself in
// fp32, else the given scratch (backward needs P unrounded).
template <typename Ops>
typename Ops::Op* probs_operand(float* P, AlignedVector<typename Ops::Op>& scratch) {
    if constexpr (!Ops::kBf16) return P;
    else return scratch.data();
}
// ... and for the score gradients: dP itself wherever the operand is fp32,
// rounded in place where it is bf16 values (each dP is read before its dS is
// written), else the given scratch.
template <typename Ops>
typename Ops::Op* scores_grad_operand(float* dP, AlignedVector<typename Ops::Op>& scratch) {
    if constexpr (std::is_same_v<typename Ops::Op, float>) return dP;
    else return scratch.data();
}

// Rows [r0, r1) of the T x T probabilities into their product operand: each
// row's visible keys from P, zeros after them to `columns` (P holds only the
// visible keys in the bf16 modes); for fp32 the operand is P itself.
template <typename Ops>
void narrow_rows(typename Ops::Op* out, const float* P, int r0, int r1, int T, int columns, int lookahead) {
    if constexpr (Ops::kBf16) {
        for (long i = r0; i < r1; i++) {
            const int last = last_key((int)i, T, lookahead);
#pragma omp simd
            for (int j = 0; j <= last; j++) out[i * T + j] = to_operand<Ops>(P[i * T + j]);
            std::fill(out + i * T + last + 1, out + i * T + columns, typename Ops::Op(0));
        }
    }
}

// The largest of row[0, n), NaNs passed over. 32 running maxima (four
// vectors at the 256-bit width GCC 12 picks for -march=native here),
// combined at the end: with one vector, each waited on the last one's max (a
// dependency chain at the instruction's latency, on every row of every head;
// config M's bf16 attention forward 53.8-54.5 -> 48.8-49.4 ms a step, a Xeon
// with AMX). max is exact, so the order gives the same value.
inline float row_max(const float* row, int n) {
    constexpr int kWays = 4, kLanes = 8;
    float m[kWays * kLanes];
    std::fill(m, m + kWays * kLanes, -INFINITY);
    int j = 0;
    for (; j + kWays * kLanes <= n; j += kWays * kLanes)
#pragma omp simd
        for (int k = 0; k < kWays * kLanes; k++) m[k] = row[j + k] > m[k] ? row[j + k] : m[k];
    float maxv = -INFINITY;
    for (; j < n; j++) maxv = row[j] > maxv ? row[j] : maxv;
    for (int k = 0; k < kWays * kLanes; k++) maxv = m[k] > maxv ? m[k] : maxv;
    return maxv;
}

// exp(row[j] - maxv) over j <= last, in place; returns their sum. With
// kMeasure, *weighted gets sum_j exp(d_j) d_j, d_j = row[j] - maxv, for the
// row's entropy log(sum) - weighted / sum (= logsumexp(s) - sum p s, with the
// shift by maxv keeping it free of cancellation): one FMA more per element.
// The sums are vector reductions: in index order they cost a dependent add per
// key (bf16 forward at config M's shapes, Zen 4: 8.3 ms a layer with the
// in-order sums and the separate passes below, 6.0 without). The order is
// fixed by the build, so a run repeats: GCC 12 does not peel these loops for
// alignment (the same sum at 16 offsets of a row, -march native, znver2 and
// znver3), and the tests hold stored and recomputed probabilities, which lie
// at different offsets, to the same bits.
template <bool kMeasure>
inline float exp_row(float* row, int last, float maxv, float* weighted) {
    float sum = 0.0f, ws = 0.0f;
#pragma omp simd reduction(+ : sum, ws)
    for (int j = 0; j <= last; j++) {
        const float d = row[j] - maxv;
        const float e = vexp(d);
        row[j] = e;
        sum += e;
        if constexpr (kMeasure) ws += e * d;
    }
    if constexpr (kMeasure) *weighted = ws;
    return sum;
}

// The columns of rows [r0, r1) that the products read, to the end of the
// column block (`rows` wide) holding their last visible key: the transposed
// products (causal_matmul_transposed) read whole column blocks. Past the last
// visible key these hold zeros.
inline int operand_columns(int r1, int T, int lookahead, int rows) {
    const int keys = visible_keys(r1, T, lookahead);
    const int blocked = (keys + rows - 1) / rows * rows;
    return blocked < T ? blocked : T;
}

// Where the scores go before the softmax: into P itself, or, where a block
// is the whole head (AMX), into a per-thread T x T scratch that stays in
// cache: P (the stored probabilities, T x T per head, in memory) is then
// written once, by the softmax, and only on its visible keys.
template <typename Ops>
float* scores_buffer(float* P, int T) {
    if (query_block_rows<Ops>(T) != T || T <= kAttBlock) return P;
    AlignedVector<float>& scores = HeadScratch<typename Ops::Op>::mine(T).scores;
    scores.resize((size_t)T * T);
    return scores.data();
}

// Rows [r0, r1) of P = softmax(scale * Q K^T) under the causal mask (query i
// sees keys j <= i + lookahead), in fp32, and of P_op, the operand the products
// read (P itself for fp32), written in the same pass; masked entries zero up
// to operand_columns in the operand, and the rest of each row left unwritten
// (in the bf16 modes, P's masked entries too). With logit_max (forward only),
// the rows' largest logit is max-ed into *logit_max and their entropy added to
// *entropy_sum. p_stored: P is the stored probabilities, read in backward
// (not a scratch read right away, or never).
template <typename Ops, typename Op = typename Ops::Op>
void probs_block(float* P, Op* P_op, Slice<Op> q, Slice<Op> k, int T, int HD, float scale, int lookahead,
                 bool probs_bf16, bool p_stored, int r0, int r1, float* logit_max = nullptr,
                 float* entropy_sum = nullptr) {
    float* S = scores_buffer<Ops>(P, T);
    causal_gemm(true, r1 - r0, visible_keys(r1, T, lookahead), HD, scale, q.data + (long)r0 * q.ld, q.ld, k.data,
                k.ld, S + (long)r0 * T, T, lookahead, r0);
    const int columns = operand_columns(r1, T, lookahead, query_block_rows<Ops>(T));
    for (int i = r0; i < r1; i++) {
        float* row = S + (long)i * T;
        float* p_row = P + (long)i * T;
        Op* row_op = P_op + (long)i * T;
        const int last = last_key(i, T, lookahead);
        const float maxv = row_max(row, last + 1);
        float sum, weighted;
        if (logit_max) {
            sum = exp_row<true>(row, last, maxv, &weighted);
            *logit_max = maxv > *logit_max ? maxv : *logit_max;
            *entropy_sum += std::log(sum) - weighted / sum;
        } else {
            sum = exp_row<false>(row, last, maxv, &weighted);
        }
        const float inv = 1.0f / sum;
#pragma omp simd
        for (int j = 0; j <= last; j++) {
            const float p = probs_bf16 ? bf16_value(row[j] * inv) : row[j] * inv;
            row[j] = p;
            if constexpr (Ops::kBf16) row_op[j] = to_operand<Ops>(p);
        }
        // From the scratch in cache to P: the stored P past the cache (config
        // M's bf16 attention forward 50.7-54.0 -> 47.9-51.5 ms a step, a Xeon
        // with AMX), a scratch P, which backward reads back at once, through it.
        if (row != p_row && p_stored) stream_copy(p_row, row, last + 1);
        else if (row != p_row) std::memcpy(p_row, row, sizeof(float) * (last + 1));
        if constexpr (Ops::kBf16) std::fill(row_op + last + 1, row_op + columns, Op(0));
        else std::fill(p_row + last + 1, p_row + columns, 0.0f);
    }
    if (S != P && p_stored) stream_fence();
}

// Y rows [r0, r1) (ld ldy) = P rows [r0, r1) @ X, using that P is zero past
// each row's visible keys.
template <typename Op>
void causal_matmul_block(float* Y, int ldy, const Op* P, Slice<Op> X, int T, int HD, int lookahead, int r0, int r1) {
    causal_gemm(false, r1 - r0, HD, visible_keys(r1, T, lookahead), 1.0f, P + (long)r0 * T, T, X.data, X.ld,
                Y + (long)r0 * ldy, ldy, lookahead, r0);
}

// Rows [first_row, T) of P's columns [c0, c1), packed (leading dimension
// c1 - c0) into `packed`. sgemm reads a transposed left operand whose rows
// lie T floats apart at ~45 GFLOP/s on one Zen 3 core, packed at ~58, with
// the same sums (measured on attention's shapes).
const float* packed_columns(AlignedVector<float>& packed, const float* P, int T, int first_row, int c0, int c1) {
    const int width = c1 - c0;
    packed.resize((size_t)(T - first_row) * width);
    for (int i = first_row; i < T; i++)
        std::memcpy(packed.data() + (long)(i - first_row) * width, P + (long)i * T + c0, sizeof(float) * width);
    return packed.data();
}

// Y (T, HD, ld ldy) += P^T (T, T) @ X, or = with `first` (the first query
// head of a kv group): key block [c0, c1) is seen by query rows [c0 -
// lookahead, T) only. Where a block is the whole head on the tiles, one tile
// product that skips the chunks of rows each key block does not see (half of
// them) and, for the first head, writes Y without reading it (Y's rows lie
// HD floats a row apart in the (B, T, QKV) gradient: not zeroing them first
// took config M's bf16 attention backward 80.2 -> 78.0 ms a step over seven
// profiles each, a Xeon with AMX); elsewhere Y is zeroed first. The same
// bits either way.
template <typename Op>
void causal_matmul_transposed(float* Y, int ldy, const Op* P, Slice<Op> X, int T, int HD, int lookahead, int rows,
                              AlignedVector<float>& packed, bool first) {
    if constexpr (std::is_same_v<Op, bf16>)
        if (rows == T && bf16_on_tiles() && fits_tiles(T, HD, T))
            return causal_tile_product_transposed(T, HD, T, P, T, X.data, X.ld, Y, ldy, lookahead, !first);
    if (first)
        for (int i = 0; i < T; i++) std::memset(Y + (long)i * ldy, 0, sizeof(float) * HD);
    for (int c0 = 0; c0 < T; c0 += rows) {
        int c1 = block_end(c0, T, rows);
        int first_row = c0 - lookahead > 0 ? c0 - lookahead : 0;
        const Op* A = P + (long)first_row * T + c0;
        int lda = T;
        if constexpr (std::is_same_v<Op, float>) {
            A = packed_columns(packed, P, T, first_row, c0, c1);
            lda = c1 - c0;
        }
        gemm(true, false, c1 - c0, HD, T - first_row, 1.0f, A, lda, X.data + (long)first_row * X.ld, X.ld, 1.0f,
             Y + (long)c0 * ldy, ldy);
    }
}

template <typename Ops, typename E>
void attention_forward_heads(float* out, float* att, float* scratch, const E* qkv, int B, int T, int NH, int NKV,
                             int HD, int lookahead, bool probs_bf16, const AttentionStats* stats) {
    using Op = typename Ops::Op;
    int CA = NH * HD;
    int group = NH / NKV;
    float scale = 1.0f / std::sqrt((float)HD);
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            HeadScratch<Op>& s = HeadScratch<Op>::mine(Ops::kBf16 ? T : 0);
            Slice<Op> q = head_operand<Ops>(qkv, b, h, T, NH, NKV, HD, s.q);
            Slice<Op> k = head_operand<Ops>(qkv, b, NH + h / group, T, NH, NKV, HD, s.k);
            Slice<Op> v = head_operand<Ops>(qkv, b, NH + NKV + h / group, T, NH, NKV, HD, s.v);
            float* P = att ? att + ((long)b * NH + h) * T * T
                           : scratch + omp_get_thread_num() * AttentionScratch::floats(T);
            Op* P_op = probs_operand<Ops>(P, s.probs);
            // Each (b, h) pair is one thread's: its slots need no atomics.
            float* logit_max = stats ? stats->logit_max + (long)b * NH + h : nullptr;
            float* entropy_sum = stats ? stats->entropy_sum + (long)b * NH + h : nullptr;
            if (stats) {
                *logit_max = -INFINITY;
                *entropy_sum = 0.0f;
            }
            const int rows = query_block_rows<Ops>(T);
            for (int r0 = 0; r0 < T; r0 += rows) {
                int r1 = block_end(r0, T, rows);
                probs_block<Ops>(P, P_op, q, k, T, HD, scale, lookahead, probs_bf16, att != nullptr, r0, r1,
                                 logit_max, entropy_sum);
                causal_matmul_block(out + (long)b * T * CA + h * HD, CA, static_cast<const Op*>(P_op), v, T, HD,
                                    lookahead, r0, r1);
            }
        }
    }
}

// Asks for row i of the stored probabilities, its visible keys, ahead of its
// use: they come from memory one row at a time, and the row loop below ran at
// the latency of those loads. Two rows ahead measured best (config M's bf16
// attention backward, a Xeon with AMX: 112 -> 83-92 ms a step; one row 89,
// four 86).
constexpr int kPrefetchRowsAhead = 2;
[[gnu::always_inline]] inline void prefetch_visible_keys(const float* P, int i, int T, int lookahead) {
    prefetch_span(P + (long)i * T, (last_key(i, T, lookahead) + 1) * (long)sizeof(float));
}

// Rows [r0, r1) of one head's backward through softmax and the scores:
// dP = dO V^T on the visible keys, then dS = P * (dP - rowsum(P * dP)) * scale
// into dS_op (zero past the visible keys; dP itself where the operands are
// fp32), and
// dQ = dS K.
// With P_op (the stored P's operand: P itself in fp32), each row of the
// stored P is also narrowed into it there (the operand of dV's product, which
// runs after the block): one read of P, from memory where a whole head is a
// block (AMX), instead of two; and P's rows are asked for ahead.
template <typename Ops, typename Op = typename Ops::Op>
void scores_backward_block(float* dq, int ldq, float* dP, Op* dS_op, const float* P, Op* P_op, Slice<Op> dO,
                           Slice<Op> k, Slice<Op> v, int T, int HD, float scale, int lookahead, int r0, int r1) {
    causal_gemm(true, r1 - r0, visible_keys(r1, T, lookahead), HD, 1.0f, dO.data + (long)r0 * dO.ld, dO.ld, v.data,
                v.ld, dP + (long)r0 * T, T, lookahead, r0);
    const int columns = operand_columns(r1, T, lookahead, query_block_rows<Ops>(T));
    for (int i = r0; i < r1; i++) {
        if (P_op && i + kPrefetchRowsAhead < T) prefetch_visible_keys(P, i + kPrefetchRowsAhead, T, lookahead);
        if (P_op) narrow_rows<Ops>(P_op, P, i, i + 1, T, columns, lookahead);
        const float* p = P + (long)i * T;
        const float* d = dP + (long)i * T;
        Op* ds = dS_op + (long)i * T;
        const int last = last_key(i, T, lookahead);
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int j = 0; j <= last; j++) dot += p[j] * d[j];
#pragma omp simd
        for (int j = 0; j <= last; j++) ds[j] = to_operand<Ops>(p[j] * (d[j] - dot) * scale);
        std::fill(ds + last + 1, ds + columns, Op(0));
    }
    causal_matmul_block(dq, ldq, static_cast<const Op*>(dS_op), k, T, HD, lookahead, r0, r1);
}

// One (batch, kv head) task of the backward: the query heads of a group all
// add into the same dk and dv, so they run in order here.
template <typename Ops, typename E>
void attention_backward_group(float* dqkv, float* thread_scratch, const float* dout, const E* qkv, const float* att,
                              int b, int g, int T, int NH, int NKV, int HD, int lookahead, bool probs_bf16) {
    using Op = typename Ops::Op;
    int QKV = (NH + 2 * NKV) * HD;
    int CA = NH * HD;
    int group = NH / NKV;
    float scale = 1.0f / std::sqrt((float)HD);
    HeadScratch<Op>& s = HeadScratch<Op>::mine(Ops::kBf16 ? T : 0);
    float* dbase = dqkv + (long)b * T * QKV;
    float* dP = thread_scratch + (long)T * T;
    Op* dS_op = scores_grad_operand<Ops>(dP, s.dscores);
    Slice<Op> k = head_operand<Ops>(qkv, b, NH + g, T, NH, NKV, HD, s.k);
    Slice<Op> v = head_operand<Ops>(qkv, b, NH + NKV + g, T, NH, NKV, HD, s.v);
    float* dk = dbase + (NH + g) * HD;
    float* dv = dbase + (NH + NKV + g) * HD;
    const int rows = query_block_rows<Ops>(T);
    for (int h = g * group; h < (g + 1) * group; h++) {
        Slice<Op> q = head_operand<Ops>(qkv, b, h, T, NH, NKV, HD, s.q);
        Slice<Op> dO = dout_operand<Ops>(dout + (long)b * T * CA + h * HD, CA, T, HD, s.dout);
        // Without stored probabilities each block's are recomputed just before use.
        float* P = att ? const_cast<float*>(att) + ((long)b * NH + h) * T * T : thread_scratch;
        Op* P_op = probs_operand<Ops>(P, s.probs);
        for (int r0 = 0; r0 < T; r0 += rows) {
            int r1 = block_end(r0, T, rows);
            if (!att) probs_block<Ops>(P, P_op, q, k, T, HD, scale, lookahead, probs_bf16, false, r0, r1);
            scores_backward_block<Ops>(dbase + h * HD, QKV, dP, dS_op, P, att ? P_op : nullptr, dO, k, v, T, HD,
                                       scale, lookahead, r0, r1);
        }
        // dV += P^T dO, dK += dS^T Q (= for the group's first head)
        const bool first = h == g * group;
        causal_matmul_transposed(dv, QKV, static_cast<const Op*>(P_op), dO, T, HD, lookahead, rows, s.columns, first);
        causal_matmul_transposed(dk, QKV, static_cast<const Op*>(dS_op), q, T, HD, lookahead, rows, s.columns, first);
    }
}

template <typename Ops, typename E>
void attention_backward_groups(float* dqkv, float* scratch, const float* dout, const E* qkv, const float* att, int B,
                               int T, int NH, int NKV, int HD, int lookahead, bool probs_bf16) {
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int g = 0; g < NKV; g++)
            attention_backward_group<Ops>(dqkv, scratch + omp_get_thread_num() * AttentionScratch::floats(T), dout,
                                          qkv, att, b, g, T, NH, NKV, HD, lookahead, probs_bf16);
}

bool bf16_products_on_sgemm() { return bf16_matmul_engine() == Bf16MatmulEngine::Emulated; }

}  // namespace

void set_attention_blocking(AttentionBlocking blocking) { blocking_choice() = blocking; }

void attention_forward(float* out, float* att, float* scratch, const float* qkv, int B, int T, int NH, int NKV,
                       int HD, int lookahead, bool probs_bf16, const AttentionStats* stats) {
    attention_forward_heads<Fp32Operands>(out, att, scratch, qkv, B, T, NH, NKV, HD, lookahead, probs_bf16, stats);
}

void attention_forward(float* out, float* att, float* scratch, const bf16* qkv_heads, int B, int T, int NH, int NKV,
                       int HD, int lookahead, bool probs_bf16, const AttentionStats* stats) {
    if (bf16_products_on_sgemm())
        attention_forward_heads<Bf16ValuesInFp32>(out, att, scratch, qkv_heads, B, T, NH, NKV, HD, lookahead,
                                                  probs_bf16, stats);
    else
        attention_forward_heads<Bf16Operands>(out, att, scratch, qkv_heads, B, T, NH, NKV, HD, lookahead, probs_bf16,
                                              stats);
}

void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv, const float* att, int B,
                        int T, int NH, int NKV, int HD, int lookahead, bool probs_bf16) {
    attention_backward_groups<Fp32Operands>(dqkv, scratch, dout, qkv, att, B, T, NH, NKV, HD, lookahead, probs_bf16);
}

void attention_backward(float* dqkv, float* scratch, const float* dout, const bf16* qkv_heads, const float* att,
                        int B, int T, int NH, int NKV, int HD, int lookahead, bool probs_bf16) {
    if (bf16_products_on_sgemm())
        attention_backward_groups<Bf16ValuesInFp32>(dqkv, scratch, dout, qkv_heads, att, B, T, NH, NKV, HD, lookahead,
                                                    probs_bf16);
    else
        attention_backward_groups<Bf16Operands>(dqkv, scratch, dout, qkv_heads, att, B, T, NH, NKV, HD, lookahead,
                                                probs_bf16);
}

}  // namespace hlat
