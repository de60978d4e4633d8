// hlat's AMX tile products (amx_tiles.h) and attention on them: against a
// plain double-precision product of the same bf16 operands, and bit for bit
// against oneDNN's products as attention ran them before (into a dense
// block), with the causal mask's skipped blocks left untouched. The products
// run where the CPU has AMX (Sapphire Rapids and later); elsewhere those
// tests check that the CPU has none, and attention forced onto the tiles
// must fall back to oneDNN's products, with the same bits. Where the kernel
// refuses this process the tile state (seccomp; ASan's small signal stacks)
// they fail: hlat would then not use the tiles on an AMX CPU.
#include "bf16_engines.h"
#include "test_util.h"
#include "trainer/model/amx_tiles.h"
#include "trainer/model/kernels.h"
#include "trainer/model/kernels_bf16.h"

#include <fmt/format.h>
#include <omp.h>

#include <bit>
#include <cmath>
#include <fstream>
#include <random>
#include <string>
#include <utility>

namespace hlat {
namespace {

bool cpuinfo_reports(const std::string& flag) {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("flags", 0) == 0) return (line + " ").find(" " + flag + " ") != std::string::npos;
    return false;
}

std::vector<bf16> random_bf16(long n, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<bf16> v(n);
    for (bf16& x : v) x = float_to_bf16_rne(dist(rng));
    return v;
}

uint32_t bits(float x) { return std::bit_cast<uint32_t>(x); }

using test::EngineScope;
using test::engines_here;

TEST(AmxTiles, UsedExactlyWhereTheCpuHasThem) {
    EXPECT_EQ(amx_tiles_usable(), cpuinfo_reports("amx_bf16") && cpuinfo_reports("amx_tile"));
    EXPECT_TRUE(fits_tiles(64, 512, 32));
    EXPECT_FALSE(fits_tiles(64, 512, 48));
    EXPECT_FALSE(fits_tiles(130, 64, 64));
}

// Scores (trans_b, alpha 1/8) and probabilities times values (plain B, A
// zero past each row's visible keys), lookahead 0, 1 and 33 (past a block
// edge), leading dimensions wider than the rows: every visible entry equals
// oneDNN's product of the whole matrices into a dense block (as attention
// ran it) bit for bit and a double-precision sum of the same products to
// fp32 summation error; entries of blocks the mask hides keep the NaN they
// had. HD 64: two chunks of K in the scores.
TEST(AmxTiles, CausalProductsEqualOneDnnsAndAPlainSum) {
    if (!amx_tiles_usable()) {
        EXPECT_FALSE(cpuinfo_reports("amx_bf16"));
        return;
    }
    EngineScope scope;
    set_bf16_matmul_engine(Bf16MatmulEngine::OneDnn);
    const int T = 96, HD = 64, ld = HD + 32, ldc = T + 16;
    for (bool trans_b : {true, false})
        for (int lookahead : {0, 1, 33}) {
            SCOPED_TRACE(fmt::format("trans_b {} lookahead {}", trans_b, lookahead));
            const int M = T, N = trans_b ? T : HD, K = trans_b ? HD : T;
            const int lda = trans_b ? ld : T, ldb = trans_b ? ld : ld;
            std::vector<bf16> A = random_bf16((long)M * lda, 1), B = random_bf16((long)(trans_b ? N : K) * ldb, 2);
            if (!trans_b)  // probabilities: zero past each row's visible keys
                for (int i = 0; i < M; i++)
                    for (int k = i + lookahead + 1; k < K; k++) A[(long)i * lda + k] = 0;
            const float alpha = trans_b ? 0.125f : 1.0f;
            std::vector<float> tiles((long)M * ldc, NAN), onednn((long)M * N, NAN);
            causal_tile_product(trans_b, M, N, K, alpha, A.data(), lda, B.data(), ldb, tiles.data(), ldc, lookahead);
            gemm_bf16_on_thread(false, trans_b, M, N, K, alpha, A.data(), lda, B.data(), ldb, false, onednn.data(), N);
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++) {
                    const float got = tiles[(long)i * ldc + j];
                    const bool block_seen = !trans_b || j / 32 * 32 <= i / 32 * 32 + 31 + lookahead;
                    if (!block_seen) {
                        ASSERT_TRUE(std::isnan(got)) << "a hidden block was written at " << i << ", " << j;
                        continue;
                    }
                    double sum = 0.0, magnitude = 0.0;
                    for (int k = 0; k < K; k++) {
                        const double b = trans_b ? bf16_to_float(B[(long)j * ldb + k]) : bf16_to_float(B[(long)k * ldb + j]);
                        const double p = bf16_to_float(A[(long)i * lda + k]) * b;
                        sum += p, magnitude += std::fabs(p);
                    }
                    ASSERT_NEAR(got, alpha * sum, alpha * magnitude * K * 0x1p-24 + 1e-30) << i << ", " << j;
                    ASSERT_EQ(bits(got), bits(onednn[(long)i * N + j])) << "against oneDNN at " << i << ", " << j;
                }
            for (int i = 0; i < M; i++)
                for (int j = N; j < ldc; j++) ASSERT_TRUE(std::isnan(tiles[(long)i * ldc + j])) << "past N";
        }
}

// The transposed products of attention's backward (C += A^T B, A's row r
// zero past r + lookahead: dV += P^T dO, dK += dS^T Q), lookahead 0, 1 and 33,
// leading dimensions wider than the rows, C holding values already: every
// entry equals C plus oneDNN's A^T B into a dense block (as attention ran it)
// bit for bit, and C plus a double-precision sum to fp32 summation error;
// C's columns past N are untouched. Not accumulated, into a C of NaNs: zero
// plus oneDNN's product, bit for bit. A 128 x 128 (key blocks whose first
// visible row lies in the first, second and fourth chunk), 160 x 128 (more
// rows than columns) and config M's 512 x 512.
TEST(AmxTiles, TransposedCausalProductEqualsOneDnnsAndAPlainSum) {
    if (!amx_tiles_usable()) {
        EXPECT_FALSE(cpuinfo_reports("amx_bf16"));
        return;
    }
    EngineScope scope;
    set_bf16_matmul_engine(Bf16MatmulEngine::OneDnn);
    const int N = 64, ldb = N + 32, ldc = N + 16;
    for (auto [K, M] : {std::pair{128, 128}, std::pair{160, 128}, std::pair{512, 512}})
        for (int lookahead : {0, 1, 33}) {
            SCOPED_TRACE(fmt::format("A {} x {}, lookahead {}", K, M, lookahead));
            const int lda = M + 32;
            std::vector<bf16> A = random_bf16((long)K * lda, 3), B = random_bf16((long)K * ldb, 4);
            for (int r = 0; r < K; r++)
                for (int c = r + lookahead + 1; c < M; c++) A[(long)r * lda + c] = 0;
            std::vector<float> C((long)M * ldc), onednn((long)M * N);
            std::mt19937 rng(5);
            std::normal_distribution<float> dist(0.0f, 1.0f);
            for (float& x : C) x = dist(rng);
            const std::vector<float> before = C;
            std::vector<float> written((long)M * ldc, NAN);  // not accumulated: never read
            causal_tile_product_transposed(M, N, K, A.data(), lda, B.data(), ldb, C.data(), ldc, lookahead, true);
            causal_tile_product_transposed(M, N, K, A.data(), lda, B.data(), ldb, written.data(), ldc, lookahead,
                                           false);
            gemm_bf16_on_thread(true, false, M, N, K, 1.0f, A.data(), lda, B.data(), ldb, false, onednn.data(), N);
            for (int c = 0; c < M; c++) {
                for (int n = 0; n < N; n++) {
                    double sum = 0.0, magnitude = 0.0;
                    for (int r = 0; r < K; r++) {
                        const double p =
                            (double)bf16_to_float(A[(long)r * lda + c]) * bf16_to_float(B[(long)r * ldb + n]);
                        sum += p, magnitude += std::fabs(p);
                    }
                    const float got = C[(long)c * ldc + n], was = before[(long)c * ldc + n];
                    ASSERT_NEAR(got, was + sum, (magnitude * K + std::fabs(was + sum)) * 0x1p-24) << c << ", " << n;
                    ASSERT_EQ(bits(got), bits(was + onednn[(long)c * N + n])) << "against oneDNN at " << c << ", " << n;
                    ASSERT_EQ(bits(written[(long)c * ldc + n]), bits(0.0f + onednn[(long)c * N + n]))
                        << "written, against oneDNN at " << c << ", " << n;
                }
                for (int n = N; n < ldc; n++) {
                    ASSERT_EQ(bits(C[(long)c * ldc + n]), bits(before[(long)c * ldc + n]));
                    ASSERT_TRUE(std::isnan(written[(long)c * ldc + n]));
                }
            }
        }
}

// Whole-head attention, forward and backward, with its causal products on the
// tiles and on oneDNN: the same bits, with grouped heads, the mask_leak
// lookahead, and stored and recomputed probabilities (HD 64: two chunks of K
// in the scores). On every engine here: where the tiles cannot run, or the
// operands are not bf16 (the emulated engine), forcing them must change
// nothing. The largest lookahead runs first: each thread's scratch operands
// then hold values past the later runs' visible keys, where each run must
// write zeros as far as its products read.
TEST(AmxTiles, AttentionOnTilesGivesOneDnnsBits) {
    EngineScope scope;
    const int B = 2, T = 96, NH = 4, NKV = 2, HD = 64, QKV = (NH + 2 * NKV) * HD, CA = NH * HD;
    std::mt19937 rng(7);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> qkv((long)B * T * QKV), dout((long)B * T * CA);
    for (float& x : qkv) x = 2.0f * dist(rng);
    for (float& x : dout) x = dist(rng);
    std::vector<bf16> heads(qkv.size());
    qkv_heads_bf16(heads.data(), qkv.data(), B, T, NH, NKV, HD);
    std::vector<float> scratch(omp_get_max_threads() * AttentionScratch::floats(T));
    struct Result {
        std::vector<float> out, dqkv;
    };
    auto run = [&](int lookahead, bool stored) {
        // NaN to start: attention must write every element of dqkv (dk and dv
        // by a group's first head, which on the tiles does not add).
        Result r{std::vector<float>((long)B * T * CA), std::vector<float>(qkv.size(), NAN)};
        std::vector<float> att((long)B * NH * T * T, NAN);
        float* probs = stored ? att.data() : nullptr;
        attention_forward(r.out.data(), probs, scratch.data(), heads.data(), B, T, NH, NKV, HD, lookahead);
        attention_backward(r.dqkv.data(), scratch.data(), dout.data(), heads.data(), probs, B, T, NH, NKV, HD,
                           lookahead);
        return r;
    };
    const std::vector<std::pair<int, bool>> settings = {{33, true}, {33, false}, {1, true}, {1, false},
                                                        {0, true},  {0, false}};
    for (Bf16MatmulEngine engine : engines_here()) {
        set_bf16_matmul_engine(engine);
        // Every setting on oneDNN's products first, then every one on the
        // tiles, so that each tiles run follows the last one's, not oneDNN's
        // (which writes its operands' zeros across whole rows).
        set_attention_blocking(AttentionBlocking::WholeHead);
        std::vector<Result> reference;
        for (auto [lookahead, stored] : settings) reference.push_back(run(lookahead, stored));
        set_attention_blocking(AttentionBlocking::WholeHeadOnTiles);
        for (size_t k = 0; k < settings.size(); k++) {
            SCOPED_TRACE(fmt::format("{}, tiles {}, lookahead {}, stored probabilities {}", bf16_matmul_engine_name(),
                                     amx_tiles_usable(), settings[k].first, settings[k].second));
            const Result tiles = run(settings[k].first, settings[k].second);
            for (size_t i = 0; i < tiles.out.size(); i++)
                ASSERT_EQ(bits(tiles.out[i]), bits(reference[k].out[i])) << "output element " << i;
            for (size_t i = 0; i < tiles.dqkv.size(); i++)
                ASSERT_EQ(bits(tiles.dqkv[i]), bits(reference[k].dqkv[i])) << "dqkv element " << i;
            ASSERT_FALSE(std::isnan(tiles.out[0])) << "attention ran";
        }
    }
}

}  // namespace
}  // namespace hlat
