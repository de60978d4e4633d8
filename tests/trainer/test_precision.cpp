// The precision modes below the whole model: bf16 matmuls against fp32 ones
// and the two matmul engines against each other, what the bf16 optimizer does
// with updates smaller than half a bf16 step, rank-keyed rounding, and the
// precision section of the config.
#include "bf16_engines.h"
#include "test_util.h"
#include "trainer/config/config.h"
#include "trainer/model/kernels.h"
#include "trainer/model/kernels_bf16.h"
#include "trainer/model/optimizer.h"
#include "trainer/trainer.h"

#include <fmt/format.h>
#include <omp.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <tuple>
#include <random>

namespace hlat {
namespace {

std::vector<float> random_vector(long n, unsigned seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}

std::vector<bf16> narrow(const std::vector<float>& x) {
    std::vector<bf16> out(x.size());
    bf16_narrow(out.data(), x.data(), (long)x.size());
    return out;
}

std::vector<float> rounded(std::vector<float> x) {
    bf16_round_inplace(x.data(), (long)x.size());
    return x;
}

// a and b hold the same floats, bit for bit (NaNs included).
void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); i++)
        ASSERT_EQ(std::bit_cast<uint32_t>(a[i]), std::bit_cast<uint32_t>(b[i])) << what << " element " << i;
}

using test::EngineScope;
using test::engines_here;

// Each engine here, and oneDNN's with both ways attention walks a head.
std::vector<std::pair<Bf16MatmulEngine, AttentionBlocking>> engines_and_blockings() {
    std::vector<std::pair<Bf16MatmulEngine, AttentionBlocking>> out;
    for (Bf16MatmulEngine engine : engines_here()) {
        out.emplace_back(engine, AttentionBlocking::RowBlocks);
        if (engine == Bf16MatmulEngine::OneDnn) out.emplace_back(engine, AttentionBlocking::WholeHead);
    }
    return out;
}

// Odd sizes on purpose: no engine may rely on multiples of its vector width.
constexpr int N = 67, IC = 130, OC = 45;

TEST(Bf16Matmul, EngineFollowsTheCpu) {
    const char* forced = std::getenv("HLAT_BF16_MATMUL");
    bool emulated = (forced && std::strcmp(forced, "emulated") == 0) || !__builtin_cpu_supports("avx512bf16");
    EXPECT_EQ(bf16_matmul_engine(), emulated ? Bf16MatmulEngine::Emulated : Bf16MatmulEngine::OneDnn)
        << bf16_matmul_engine_name();
}

TEST(Bf16Matmul, ForwardAndBackwardAgreeWithFp32WithinBf16Tolerance) {
    EngineScope scope;
    auto inp = random_vector((long)N * IC, 1), w = random_vector((long)OC * IC, 2, 0.05f);
    auto dout = random_vector((long)N * OC, 3);
    // fp32 on the bf16-rounded operands: the same products, summed in another order.
    auto inp_r = rounded(inp), w_r = rounded(w), dout_r = rounded(dout);
    std::vector<float> out_r((long)N * OC), dinp_r((long)N * IC), dw_r((long)OC * IC, 0.0f);
    matmul_forward(out_r.data(), inp_r.data(), w_r.data(), N, IC, OC);
    matmul_backward(dinp_r.data(), dw_r.data(), dout_r.data(), inp_r.data(), w_r.data(), N, IC, OC, true);
    // fp32 on the unrounded operands: what bf16 costs.
    std::vector<float> out32((long)N * OC), dinp32((long)N * IC), dw32((long)OC * IC, 0.0f);
    matmul_forward(out32.data(), inp.data(), w.data(), N, IC, OC);
    matmul_backward(dinp32.data(), dw32.data(), dout.data(), inp.data(), w.data(), N, IC, OC, true);

    for (Bf16MatmulEngine engine : engines_here()) {
        set_bf16_matmul_engine(engine);
        SCOPED_TRACE(bf16_matmul_engine_name());
        std::vector<float> out((long)N * OC), dinp((long)N * IC), dw((long)OC * IC, 1.0f);
        auto inp16 = narrow(inp), dout16 = narrow(dout);
        Bf16Weight w16(OC, IC);
        w16.assign(w.data());
        matmul_forward_bf16(out.data(), inp16.data(), w16, N);
        Bf16OutputGrad dout_grad;
        dout_grad.assign(dout16.data(), (long)dout16.size());
        matmul_dinput_bf16(dinp.data(), dout_grad, w16, N);
        matmul_dweight_bf16(dw.data(), dout_grad, inp16.data(), N, IC, OC, true);
        for (float& x : dw) x -= 1.0f;  // dweight accumulates onto what was there
        // Outputs and input gradients are bf16 tensors, rounded by their reader
        // (half an ulp: 2^-9 relative); the weight gradient is kept in fp32.
        bf16_round_inplace(out.data(), (long)out.size());
        bf16_round_inplace(dinp.data(), (long)dinp.size());
        double e_out = test::relative_error(out, out_r), e_dinp = test::relative_error(dinp, dinp_r);
        double e_dw = test::relative_error(dw, dw_r);
        std::printf("vs fp32 on rounded inputs: out %.2e dinp %.2e dweight %.2e\n", e_out, e_dinp, e_dw);
        EXPECT_LT(e_out, 1.0 / 256);
        EXPECT_LT(e_dinp, 1.0 / 256);
        EXPECT_LT(e_dw, 1e-5);
        for (long i = 0; i < (long)out.size(); i++)
            ASSERT_EQ(out[i], bf16_to_float(float_to_bf16_rne(out[i]))) << "output " << i << " is not a bf16 value";
        double c_out = test::relative_error(out, out32), c_dw = test::relative_error(dw, dw32);
        std::printf("vs fp32 on exact inputs: out %.2e dweight %.2e\n", c_out, c_dw);
        EXPECT_LT(c_out, 2e-2);
        EXPECT_LT(c_dw, 2e-2);
        EXPECT_GT(c_out, 1e-4) << "no sign of bf16 rounding";
    }
}

// A linear layer's output gradient is made once for both backward products,
// from bf16 values or from fp32 sums (mixed precision's, rounded to nearest
// even): on every engine the weight's gradient is gemm_bf16's product of the
// narrowed values to the bit, written over what was there or added to it,
// and the input's gradient is the same from either; on the emulated engine
// it is also the plain product's (the same sgemm).
TEST(Bf16Matmul, TheOutputGradientIsMadeOnceForBothProducts) {
    EngineScope scope;
    auto inp = random_vector((long)N * IC, 4), w = random_vector((long)OC * IC, 5, 0.05f);
    auto dout = random_vector((long)N * OC, 6);
    auto inp16 = narrow(inp), dout16 = narrow(dout), w16_plain = narrow(w);
    for (Bf16MatmulEngine engine : engines_here()) {
        set_bf16_matmul_engine(engine);
        SCOPED_TRACE(bf16_matmul_engine_name());
        Bf16Weight w16(OC, IC);
        w16.assign(w.data());
        std::vector<bf16> narrowed(dout.size());
        Bf16OutputGrad from_sums, from_values;
        from_sums.assign(dout.data(), narrowed.data(), (long)dout.size());
        from_values.assign(dout16.data(), (long)dout16.size());
        for (bool accumulate : {false, true}) {
            const float before = accumulate ? 0.25f : NAN;  // NaN: must be written over
            std::vector<float> reference((long)OC * IC, before), sums(reference), values(reference);
            gemm_bf16(reference.data(), dout16.data(), inp16.data(), OC, IC, N, true, false, accumulate);
            matmul_dweight_bf16(sums.data(), from_sums, inp16.data(), N, IC, OC, accumulate);
            matmul_dweight_bf16(values.data(), from_values, inp16.data(), N, IC, OC, accumulate);
            expect_same_bits(sums, reference, "weight gradient from fp32 sums");
            expect_same_bits(values, reference, "weight gradient from bf16 values");
        }
        std::vector<float> dinp_sums((long)N * IC, NAN), dinp_values(dinp_sums), plain(dinp_sums);
        matmul_dinput_bf16(dinp_sums.data(), from_sums, w16, N);
        matmul_dinput_bf16(dinp_values.data(), from_values, w16, N);
        expect_same_bits(dinp_sums, dinp_values, "input gradient");
        gemm_bf16(plain.data(), dout16.data(), w16_plain.data(), N, IC, OC, false, false, false);
        if (engine == Bf16MatmulEngine::Emulated) expect_same_bits(dinp_sums, plain, "input gradient, plain product");
        EXPECT_LT(test::relative_error(dinp_sums, plain), 1e-5);
    }
}

// C (M x N) = A (M x K) B (K x N) over bf16 operands, each stored plain or
// transposed, overwriting C or adding to it, on every engine this CPU has:
// each result within fp32 summation-order error of the exact product of the
// same bf16 values (computed in double), so the engines agree with each other
// to that error too. Returns the largest error seen.
double check_gemm_bf16(int M, int Ncols, int K) {
    SCOPED_TRACE(fmt::format("M {} N {} K {}", M, Ncols, K));
    auto a = rounded(random_vector((long)M * K, 4)), b = rounded(random_vector((long)K * Ncols, 5));
    std::vector<double> ref((long)M * Ncols, 0.0), scale((long)M * Ncols, 0.0);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < Ncols; j++)
            for (int k = 0; k < K; k++) {
                double p = (double)a[(long)i * K + k] * b[(long)k * Ncols + j];
                ref[(long)i * Ncols + j] += p;
                scale[(long)i * Ncols + j] += std::fabs(p);
            }
    // The same operands stored transposed.
    std::vector<float> at((long)K * M), bt((long)Ncols * K);
    for (int i = 0; i < M; i++)
        for (int k = 0; k < K; k++) at[(long)k * M + i] = a[(long)i * K + k];
    for (int k = 0; k < K; k++)
        for (int j = 0; j < Ncols; j++) bt[(long)j * K + k] = b[(long)k * Ncols + j];
    auto a16 = narrow(a), b16 = narrow(b), at16 = narrow(at), bt16 = narrow(bt);
    double worst = 0.0;
    for (Bf16MatmulEngine engine : engines_here()) {
        set_bf16_matmul_engine(engine);
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int acc = 0; acc < 2; acc++) {
                    SCOPED_TRACE(fmt::format("{} ta {} tb {} accumulate {}", bf16_matmul_engine_name(), ta, tb, acc));
                    std::vector<float> c((long)M * Ncols, 2.0f);
                    gemm_bf16(c.data(), ta ? at16.data() : a16.data(), tb ? bt16.data() : b16.data(), M, Ncols, K,
                              ta, tb, acc);
                    for (long i = 0; i < (long)c.size(); i++) {
                        // fp32 products are exact here; each of K sums rounds by at most 2^-24 of the running
                        // total, and the accumulate adds one more rounding of the 2.0 already there.
                        double bound = (K + 2) * std::ldexp(1.0, -24) * (scale[i] + (acc ? 2.0 : 0.0)) + 1e-30;
                        double error = std::fabs(c[i] - (acc ? 2.0 : 0.0) - ref[i]);
                        EXPECT_LE(error, bound) << "element " << i;
                        worst = std::max(worst, error);
                    }
                }
    }
    return worst;
}

TEST(Bf16Matmul, GemmHonoursTransposesAndAccumulation) {
    EngineScope scope;
    EXPECT_LT(check_gemm_bf16(33, 21, 70), 1e-4);
}

// Shapes that no kernel's blocking divides: one element, primes, K below,
// at and above a 32-wide dot-product block.
TEST(Bf16Matmul, GemmMatchesOnOddShapes) {
    EngineScope scope;
    for (auto [M, N, K] : std::vector<std::tuple<int, int, int>>{
             {1, 1, 1}, {17, 33, 5}, {7, 9, 31}, {5, 3, 32}, {13, 11, 33}, {1, 64, 97}, {64, 1, 130}})
        check_gemm_bf16(M, N, K);
}

// A weight packed for the matmuls (Bf16Weight) gives the products of the
// plain one, out = inp @ W^T and dinp = dout @ W, within fp32 summation-order
// error, on odd shapes and on a shape it was not packed for (every N).
TEST(Bf16Matmul, PackedWeightsGiveThePlainProducts) {
    EngineScope scope;
    for (auto [N, IC, OC] : std::vector<std::tuple<int, int, int>>{
             {1, 1, 1}, {17, 33, 5}, {7, 31, 9}, {300, 130, 67}, {2, 64, 97}}) {
        SCOPED_TRACE(fmt::format("N {} IC {} OC {}", N, IC, OC));
        auto w = rounded(random_vector((long)OC * IC, 6)), inp = rounded(random_vector((long)N * IC, 7));
        auto dout = rounded(random_vector((long)N * OC, 8));
        auto w16 = narrow(w), inp16 = narrow(inp), dout16 = narrow(dout);
        for (Bf16MatmulEngine engine : engines_here()) {
            set_bf16_matmul_engine(engine);
            SCOPED_TRACE(bf16_matmul_engine_name());
            Bf16Weight packed(OC, IC);
            packed.assign(w.data());
            std::vector<float> out((long)N * OC), out_plain(out.size()), dinp((long)N * IC), dinp_plain(dinp.size());
            matmul_forward_bf16(out.data(), inp16.data(), packed, N);
            Bf16OutputGrad dout_grad;
            dout_grad.assign(dout16.data(), (long)dout16.size());
            matmul_dinput_bf16(dinp.data(), dout_grad, packed, N);
            gemm_bf16(out_plain.data(), inp16.data(), w16.data(), N, OC, IC, false, true, false);
            gemm_bf16(dinp_plain.data(), dout16.data(), w16.data(), N, IC, OC, false, false, false);
            // |x| <= 4 sigma for these normals: (K + 2) roundings of sums below K * 16.
            for (long i = 0; i < (long)out.size(); i++)
                ASSERT_NEAR(out[i], out_plain[i], (IC + 2) * IC * 16 * std::ldexp(1.0, -24)) << "output " << i;
            for (long i = 0; i < (long)dinp.size(); i++)
                ASSERT_NEAR(dinp[i], dinp_plain[i], (OC + 2) * OC * 16 * std::ldexp(1.0, -24)) << "dinput " << i;
            const long plain_bytes = 2L * OC * IC;
            EXPECT_GE(packed.bytes(), engine == Bf16MatmulEngine::OneDnn ? 2 * plain_bytes : plain_bytes);
        }
    }
}

// hlat's one-pass packing (paired_blocks.h) gives oneDNN's packed weights:
// a weight packed each way gives the same forward and input-gradient products
// to the bit, on odd shapes, config M's, and the vocabulary's. Where this
// CPU's layout is not one hlat knows, both are oneDNN's and agree trivially.
TEST(Bf16Matmul, HlatPacksWeightsAsOneDnnsReordersDo) {
    EngineScope scope;
    for (auto [N, IC, OC] : std::vector<std::tuple<int, int, int>>{
             {1, 1, 1}, {17, 33, 5}, {300, 130, 67}, {64, 512, 1376}, {64, 1376, 512}, {8, 512, 8192}}) {
        SCOPED_TRACE(fmt::format("N {} IC {} OC {}", N, IC, OC));
        auto w = random_vector((long)OC * IC, 31, 0.05f);
        auto inp16 = narrow(random_vector((long)N * IC, 32)), dout16 = narrow(random_vector((long)N * OC, 33));
        for (Bf16MatmulEngine engine : engines_here()) {
            set_bf16_matmul_engine(engine);
            SCOPED_TRACE(bf16_matmul_engine_name());
            Bf16OutputGrad dout;
            dout.assign(dout16.data(), (long)dout16.size());
            std::vector<float> out[2], dinp[2];
            for (int i : {0, 1}) {
                set_weight_packer(i == 0 ? WeightPacker::Hlat : WeightPacker::OneDnn);
                Bf16Weight packed(OC, IC);
                packed.assign(w.data());
                out[i].assign((long)N * OC, NAN);
                dinp[i].assign((long)N * IC, NAN);
                matmul_forward_bf16(out[i].data(), inp16.data(), packed, N);
                matmul_dinput_bf16(dinp[i].data(), dout, packed, N);
            }
            set_weight_packer(WeightPacker::Hlat);
            expect_same_bits(out[0], out[1], "forward");
            expect_same_bits(dinp[0], dinp[1], "input gradient");
        }
    }
}

// The forward product stored in bf16 (SwiGLU's input) is the fp32 product
// rounded to nearest even, bit for bit, on every engine: oneDNN sums in the
// same order whichever type it stores, and its conversion differs from ours
// only on denormals, which these sums never are. Shapes: odd ones, and config
// M's gate_up (K 512, OC 2752), down_proj's K on fewer rows, and a long K on
// a small output (where a product might split K between threads).
TEST(Bf16Matmul, ForwardStoredInBf16IsTheFp32ProductRounded) {
    EngineScope scope;
    for (auto [N, IC, OC] : std::vector<std::tuple<int, int, int>>{
             {1, 1, 1}, {17, 33, 5}, {300, 130, 67}, {512, 512, 2752}, {96, 1376, 512}, {4, 4096, 64}}) {
        SCOPED_TRACE(fmt::format("N {} IC {} OC {}", N, IC, OC));
        auto w = random_vector((long)OC * IC, 21);
        auto inp16 = narrow(random_vector((long)N * IC, 22));
        for (Bf16MatmulEngine engine : engines_here()) {
            set_bf16_matmul_engine(engine);
            SCOPED_TRACE(bf16_matmul_engine_name());
            Bf16Weight w16(OC, IC);
            w16.assign(w.data());
            std::vector<float> sums((long)N * OC);
            std::vector<bf16> stored(sums.size(), bf16(0x7fc0));  // NaN until written
            matmul_forward_bf16(sums.data(), inp16.data(), w16, N);
            matmul_forward_bf16(stored.data(), inp16.data(), w16, N);
            for (long i = 0; i < (long)sums.size(); i++)
                ASSERT_EQ(stored[i], float_to_bf16_rne(sums[i])) << "output " << i << ": sum " << sums[i];
        }
    }
}

// `stored` is `sum` (the same product into fp32) rounded to nearest even;
// or, where oneDNN summed the K terms in another order for the bf16 output,
// its neighbour across a rounding tie that `sum` lies within that order's
// error of: K * 2^-24 * sum_k |a_k b_k| (`magnitude`, computed only then). A
// wrong product lands nowhere near a tie.
template <typename Magnitude>
void expect_rounded_sum(bf16 stored, float sum, int K, const Magnitude& magnitude, const char* what, long i) {
    const bf16 rounded = float_to_bf16_rne(sum);
    if (stored == rounded) return;
    ASSERT_EQ(std::abs((int)stored - (int)rounded), 1) << what << " " << i << ": " << bf16_to_float(stored)
                                                        << " for " << sum;
    const double tie = 0.5 * ((double)bf16_to_float(stored) + bf16_to_float(rounded));
    ASSERT_LE(std::fabs(sum - tie), K * std::ldexp(1.0, -24) * magnitude()) << what << " " << i << ": " << sum;
}

// The products hlat stores in bf16 as they come out of oneDNN, read only as
// bf16 values after: qkv's and o_proj's outputs (RoPE's and the residual
// add's input) and down_proj's input gradient (SwiGLU's output gradient), at
// configs M's and S's shapes and bench/precision_verdict's model's, and odd
// ones, on 1 and 2 threads, on every engine. Each value is the fp32 product
// rounded (on the AMX Xeon every one, bit for bit); the test allows the other
// side of a rounding tie within summation-order error, for a CPU whose
// kernels sum in another order when they store bf16 (the AMX Xeon's did at
// down_proj's forward shape, N 2048, IC 1376, OC 512, which hlat therefore
// keeps in fp32).
TEST(Bf16Matmul, ProductsStoredInBf16AreTheFp32ProductsRounded) {
    EngineScope scope;
    const int saved_threads = omp_get_max_threads();
    struct Shape {
        int N, IC, OC;
        bool forward, dinput;  // which of its products is stored in bf16
    };
    for (const Shape& sh : std::vector<Shape>{{1, 1, 1, true, true},
                                              {17, 33, 5, true, true},
                                              {300, 130, 67, true, true},
                                              {2048, 512, 1536, true, false},  // qkv: M, S, the verdict's
                                              {2048, 256, 768, true, false},
                                              {2048, 128, 384, true, false},
                                              {2048, 512, 512, true, false},  // o_proj
                                              {2048, 256, 256, true, false},
                                              {2048, 128, 128, true, false},
                                              {2048, 1376, 512, false, true},  // down_proj
                                              {2048, 704, 256, false, true},
                                              {2048, 352, 128, false, true}}) {
        const int N = sh.N, IC = sh.IC, OC = sh.OC;
        auto w = random_vector((long)OC * IC, 24, 0.05f);
        auto inp16 = narrow(random_vector((long)N * IC, 25)), dout16 = narrow(random_vector((long)N * OC, 26));
        for (Bf16MatmulEngine engine : engines_here())
            for (int threads : {1, 2}) {
                set_bf16_matmul_engine(engine);
                const std::string where = fmt::format("N {} IC {} OC {}, {} threads, {}", N, IC, OC, threads,
                                                      bf16_matmul_engine_name());
                omp_set_num_threads(threads);
                Bf16Weight w16(OC, IC);
                w16.assign(w.data());
                Bf16OutputGrad dout;
                dout.assign(dout16.data(), (long)dout16.size());
                std::vector<float> out((long)N * OC), dinp((long)N * IC);
                std::vector<bf16> out16(out.size(), bf16(0x7fc0)), dinp16(dinp.size(), bf16(0x7fc0));
                if (sh.forward) {
                    matmul_forward_bf16(out.data(), inp16.data(), w16, N);
                    matmul_forward_bf16(out16.data(), inp16.data(), w16, N);
                }
                if (sh.dinput) {
                    matmul_dinput_bf16(dinp.data(), dout, w16, N);
                    matmul_dinput_bf16(dinp16.data(), dout, w16, N);
                }
                omp_set_num_threads(saved_threads);
                SCOPED_TRACE(where);
                // sum_k |a_k b_k| of output (n, o) = inp (n, :) . W (o, :), and of
                // input gradient (n, c) = dout (n, :) . W (:, c).
                for (long i = 0; sh.forward && i < (long)out.size(); i++)
                    expect_rounded_sum(out16[i], out[i], IC, [&] {
                        double m = 0;
                        for (int k = 0; k < IC; k++)
                            m += std::fabs(bf16_to_float(inp16[i / OC * IC + k]) * bf16_value(w[i % OC * IC + k]));
                        return m;
                    }, "output", i);
                for (long i = 0; sh.dinput && i < (long)dinp.size(); i++)
                    expect_rounded_sum(dinp16[i], dinp[i], OC, [&] {
                        double m = 0;
                        for (int k = 0; k < OC; k++)
                            m += std::fabs(bf16_to_float(dout16[i / IC * OC + k]) *
                                           bf16_value(w[(long)k * IC + i % IC]));
                        return m;
                    }, "input gradient", i);
            }
    }
}

// Attention in the bf16 modes: its four products take bf16 operands (q, k,
// v, the output gradient, and the probabilities and score gradients rounded
// as they enter), on each engine. Against fp32 attention on the same bf16
// q, k, v it is off by bf16 rounding and no more; the two engines agree to
// fp32 summation order; stored and recomputed probabilities give the same
// bits. T = 130 ends mid-block, and the mask_leak lookahead reaches across a
// block edge, where a stale probability from another head would show. The
// stored probabilities start as NaN: the entries the forward leaves unwritten
// (past each row's visible keys) must be ones the backward never reads. Both
// ways of walking a head run on every CPU: blocks of 64 query rows, and the
// whole head at once (what AMX CPUs run).
TEST(Bf16Attention, ProductsInBf16AgreeWithFp32AndAcrossEngines) {
    EngineScope scope;
    const int B = 2, T = 130, NH = 4, NKV = 2, HD = 16, QKV = (NH + 2 * NKV) * HD, CA = NH * HD;
    auto qkv = rounded(random_vector((long)B * T * QKV, 21)), dout = random_vector((long)B * T * CA, 22);
    auto dout_rounded = rounded(dout);
    std::vector<float> scratch(omp_get_max_threads() * AttentionScratch::floats(T));
    std::vector<float> att((long)B * NH * T * T);
    for (int lookahead : {0, 1}) {
        SCOPED_TRACE(fmt::format("lookahead {}", lookahead));
        // Gradients start as NaN: attention must write every element of dqkv.
        std::vector<float> out32((long)B * T * CA), dqkv32(qkv.size(), NAN);
        std::fill(att.begin(), att.end(), NAN);
        attention_forward(out32.data(), att.data(), scratch.data(), qkv.data(), B, T, NH, NKV, HD, lookahead);
        attention_backward(dqkv32.data(), scratch.data(), dout_rounded.data(), qkv.data(), att.data(), B, T, NH, NKV,
                           HD, lookahead);
        std::vector<std::vector<float>> outs, dqkvs;
        std::vector<bf16> heads(qkv.size());
        qkv_heads_bf16(heads.data(), qkv.data(), B, T, NH, NKV, HD);
        for (auto [engine, blocking] : engines_and_blockings()) {
            set_bf16_matmul_engine(engine);
            set_attention_blocking(blocking);
            SCOPED_TRACE(fmt::format("{}, {}", bf16_matmul_engine_name(),
                                     blocking == AttentionBlocking::WholeHead ? "whole head" : "row blocks"));
            std::vector<float> out(out32.size()), out_ckpt(out32.size()), dqkv(qkv.size(), NAN),
                dqkv_ckpt(qkv.size(), NAN);
            std::fill(att.begin(), att.end(), NAN);
            attention_forward(out.data(), att.data(), scratch.data(), heads.data(), B, T, NH, NKV, HD, lookahead);
            attention_forward(out_ckpt.data(), nullptr, scratch.data(), heads.data(), B, T, NH, NKV, HD, lookahead);
            attention_backward(dqkv.data(), scratch.data(), dout.data(), heads.data(), att.data(), B, T, NH, NKV, HD,
                               lookahead);
            attention_backward(dqkv_ckpt.data(), scratch.data(), dout.data(), heads.data(), nullptr, B, T, NH, NKV,
                               HD, lookahead);
            EXPECT_EQ(out_ckpt, out);
            EXPECT_EQ(dqkv_ckpt, dqkv) << "recomputed probabilities must give the same gradient";
            double e_out = test::relative_error(out, out32), e_dqkv = test::relative_error(dqkv, dqkv32);
            std::printf("bf16 attention vs fp32: out %.2e dqkv %.2e\n", e_out, e_dqkv);
            EXPECT_LT(e_out, 1.0 / 256);
            EXPECT_LT(e_dqkv, 1.0 / 256);
            EXPECT_GT(e_out, 1e-5) << "no sign of the probabilities' rounding";
            outs.push_back(out);
            dqkvs.push_back(dqkv);
        }
        for (size_t i = 1; i < outs.size(); i++) {
            EXPECT_LT(test::relative_error(outs[i], outs[0]), 1e-5) << "the engines (or blockings) disagree";
            EXPECT_LT(test::relative_error(dqkvs[i], dqkvs[0]), 1e-5) << "the engines (or blockings) disagree";
        }
    }
}

// A one-tensor "model" for optimizer tests: every weight 1.0, every gradient g.
struct FlatModel {
    Model model;
    explicit FlatModel(const PrecisionConfig& p) : model(tiny_config(), 1, 4, false, p) {
        std::fill(model.params(), model.params() + model.num_parameters(), 1.0f);
        std::fill(model.grads(), model.grads() + model.num_parameters(), 0.5f);
    }
    static ModelConfig tiny_config() {
        ModelConfig m;
        m.vocab_size = 64, m.dim = 32, m.n_layers = 2, m.n_heads = 2, m.n_kv_heads = 2, m.hidden_dim = 64,
        m.max_seq_len = 4;
        return m;
    }
    double mean_param() const {
        double s = 0.0;
        for (long i = 0; i < model.num_parameters(); i++) s += model.params()[i];
        return s / model.num_parameters();
    }
};

// Ten AdamW steps of lr 1e-3 on a FlatModel (no weight decay): Adam's first
// steps move each weight by ~lr, a quarter of 2^-9, below half a bf16 step at
// 1.0. Returns the mean weight, and the share of the last step's updates lost.
std::pair<double, double> flat_adamw(PrecisionMode mode, double lr, int steps) {
    OptimizerConfig oc;
    oc.weight_decay = 0.0;
    PrecisionConfig p;
    p.mode = mode;
    FlatModel f(p);
    AdamW opt(oc, f.model.num_parameters(), p, 42);
    for (int s = 0; s < steps; s++) opt.step(f.model, lr);
    long lost = 0;
    for (long x : opt.lost_updates()) lost += x;
    std::printf("%-10s mean weight after %d steps: %.6f\n", precision_mode_name(mode), steps, f.mean_param());
    return {f.mean_param(), (double)lost / f.model.num_parameters()};
}

std::vector<float> widened(const std::vector<bf16>& x) {
    std::vector<float> out(x.size());
    for (size_t i = 0; i < x.size(); i++) out[i] = bf16_to_float(x[i]);
    return out;
}

// The fused bf16 kernels against the fp32 kernel with the roundings around it
// done as separate passes: bit for bit, on odd sizes, with inputs that are
// not bf16 values (a matmul's fp32 sums).
TEST(Bf16FusedKernels, RmsnormSwigluResidualAndCrossEntropyEqualTheUnfusedPasses) {
    const int rows = 37, C = 70, H = 53, V = 91;
    auto x = random_vector((long)rows * C, 11), w = random_vector(C, 12), dy = random_vector((long)rows * C, 13);
    std::vector<float> y((long)rows * C), r1(rows), r2(rows);
    rmsnorm_forward(y.data(), r1.data(), x.data(), w.data(), rows, C, 1e-5f);
    std::vector<bf16> y16((long)rows * C);
    rmsnorm_forward_bf16(y16.data(), r2.data(), x.data(), w.data(), rows, C, 1e-5f);
    expect_same_bits(widened(y16), rounded(y), "rmsnorm forward");
    expect_same_bits(r1, r2, "rmsnorm rstd");
    std::vector<float> dx1((long)rows * C, 0.5f), dx2 = dx1, dw1(C, 0.25f), dw2 = dw1;
    rmsnorm_backward_accumulate(dx1.data(), dw1.data(), rounded(dy).data(), x.data(), w.data(), r1.data(), rows, C);
    rmsnorm_backward_accumulate_bf16(dx2.data(), dw2.data(), dy.data(), x.data(), w.data(), r1.data(), rows, C);
    expect_same_bits(dx1, dx2, "rmsnorm dinp");
    expect_same_bits(dw1, dw2, "rmsnorm dweight");

    auto gu = random_vector((long)rows * 2 * H, 14), ds = random_vector((long)rows * H, 15);
    auto gu_r = rounded(gu);
    std::vector<float> s((long)rows * H), dgu((long)rows * 2 * H);
    std::vector<bf16> s16((long)rows * H), dgu16((long)rows * 2 * H), gu16((long)rows * 2 * H);
    swiglu_forward(s.data(), gu_r.data(), rows, H);
    gu16 = narrow(gu);
    swiglu_forward_bf16(s16.data(), gu16.data(), rows, H);
    expect_same_bits(widened(s16), rounded(s), "swiglu forward");
    swiglu_backward(dgu.data(), rounded(ds).data(), gu_r.data(), rows, H);
    swiglu_backward_bf16(dgu16.data(), narrow(ds).data(), gu16.data(), rows, H);
    expect_same_bits(widened(dgu16), rounded(dgu), "swiglu backward");

    auto a = random_vector(1001, 16), b = rounded(random_vector(1001, 17));
    for (bool round_sum : {false, true}) {
        std::vector<float> sum(1001), fused(1001);
        residual_forward(sum.data(), rounded(a).data(), b.data(), 1001);
        if (round_sum) bf16_round_inplace(sum.data(), 1001);
        residual_forward_bf16(fused.data(), a.data(), b.data(), 1001, round_sum);
        expect_same_bits(sum, fused, round_sum ? "residual, rounded sum" : "residual");
        residual_forward_bf16(fused.data(), narrow(a).data(), b.data(), 1001, round_sum);
        expect_same_bits(sum, fused, round_sum ? "residual from bf16, rounded sum" : "residual from bf16");
    }

    auto logits = random_vector((long)rows * V, 18, 3.0f), probs = rounded(logits), fused = logits;
    std::vector<int32_t> targets(rows);
    for (int n = 0; n < rows; n++) targets[n] = (n * 7) % V;
    std::vector<float> l1(rows), l2(rows);
    crossentropy_forward(probs.data(), l1.data(), nullptr, targets.data(), rows, V);
    crossentropy_forward_bf16(fused.data(), l2.data(), nullptr, targets.data(), rows, V);
    expect_same_bits(probs, fused, "cross-entropy probabilities");
    expect_same_bits(l1, l2, "cross-entropy losses");
    std::vector<bf16> d16((long)rows * V);
    crossentropy_backward_bf16(d16.data(), fused.data(), targets.data(), nullptr, 0.0f, 0.125f, rows, V);
    crossentropy_backward(probs.data(), targets.data(), nullptr, 0.0f, 0.125f, rows, V);
    expect_same_bits(widened(d16), rounded(probs), "cross-entropy backward");
}

TEST(Bf16FusedKernels, RopeEqualsTheUnfusedPassesWithGroupedHeads) {
    const int B = 2, T = 9, NH = 4, NKV = 2, HD = 6, QKV = (NH + 2 * NKV) * HD;
    std::vector<float> cs(T * HD / 2), sn(T * HD / 2);
    rope_tables(cs.data(), sn.data(), T, HD, 10000.0f);
    auto qkv = random_vector((long)B * T * QKV, 19), qkv_before = qkv;
    auto unfused = rounded(qkv);
    rope_forward(unfused.data(), cs.data(), sn.data(), B, T, NH, NKV, HD);
    std::vector<bf16> heads(qkv.size()), unfused_heads(qkv.size());
    qkv_heads_bf16(unfused_heads.data(), unfused.data(), B, T, NH, NKV, HD);
    rope_forward_bf16(heads.data(), qkv.data(), cs.data(), sn.data(), B, T, NH, NKV, HD);
    expect_same_bits(widened(heads), widened(unfused_heads), "rope forward (v heads included)");
    expect_same_bits(qkv, qkv_before, "rope forward's input, left as it was");
    // From the qkv product stored in bf16: the same heads.
    std::vector<bf16> heads_from16(qkv.size());
    rope_forward_bf16(heads_from16.data(), narrow(qkv).data(), cs.data(), sn.data(), B, T, NH, NKV, HD);
    expect_same_bits(widened(heads_from16), widened(unfused_heads), "rope forward from bf16 (v heads included)");
    // The head-major layout, element by element: head h of (b, t) at ((b * heads + h) * T + t) * HD.
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH + 2 * NKV; h++)
                for (int i = 0; i < HD; i++)
                    ASSERT_EQ(unfused_heads[(((long)b * (NH + 2 * NKV) + h) * T + t) * HD + i],
                              float_to_bf16_rne(unfused[((long)b * T + t) * QKV + h * HD + i]))
                        << "b " << b << " t " << t << " head " << h << " i " << i;

    auto d = random_vector((long)B * T * QKV, 20), d_before = d;
    std::vector<bf16> d16(d.size());
    rope_backward_bf16(d16.data(), d.data(), cs.data(), sn.data(), B, T, NH, NKV, HD);
    expect_same_bits(d, d_before, "rope backward's input, left as it was");
    rope_backward(d.data(), cs.data(), sn.data(), B, T, NH, NKV, HD);
    expect_same_bits(widened(d16), rounded(d), "rope backward (v heads included)");
}

// Clipping is applied as AdamW reads each gradient: in every mode the
// update (weights, moments, compensation, the measured sums) equals, to the
// bit, the update of gradients clipped in a pass of their own beforehand
// (rounded to bf16 in the pure bf16 modes, where the gradients are bf16
// values), and the gradients themselves are left as they were; measured or
// not, over every parameter or over a ZeRO-1 range that splits tensors.
TEST(AdamWClipping, ClippingInTheUpdateEqualsClippingTheGradientsFirst) {
    const float factor = 0.3f;
    for (PrecisionMode mode : {PrecisionMode::Fp32, PrecisionMode::Mixed, PrecisionMode::Bf16, PrecisionMode::Bf16Sr,
                               PrecisionMode::Bf16Kahan})
        for (bool measured : {true, false})
            for (bool sharded : {false, true}) {
                SCOPED_TRACE(fmt::format("{}, measured {}, sharded {}", precision_mode_name(mode), measured, sharded));
                PrecisionConfig p;
                p.mode = mode;
                FlatModel first(p), fused(p);
                const long n = first.model.num_parameters();
                std::vector<float> grads = random_vector(n, 7, 0.1f);
                if (p.bf16_state()) bf16_round_inplace(grads.data(), n);
                OptimizerConfig oc;
                const long begin = sharded ? n / 3 : 0, end = sharded ? 2 * n / 3 : -1;
                AdamW clipped_first(oc, n, p, 42, 0, begin, end), clipped_in_update(oc, n, p, 42, 0, begin, end);
                std::vector<UpdateSums> sums_first, sums_fused;
                for (int step = 0; step < 3; step++) {
                    for (long i = 0; i < n; i++) {
                        const float g = grads[i] * factor;
                        first.model.grads()[i] = p.bf16_state() ? bf16_to_float(float_to_bf16_rne(g)) : g;
                    }
                    std::copy(grads.begin(), grads.end(), fused.model.grads());
                    // lr large enough to move bf16 weights at 1.0
                    clipped_first.step(first.model, 1e-2, measured ? &sums_first : nullptr);
                    clipped_in_update.step(fused.model, 1e-2, measured ? &sums_fused : nullptr, factor);
                }
                expect_same_bits(std::vector<float>(first.model.params(), first.model.params() + n),
                                 std::vector<float>(fused.model.params(), fused.model.params() + n), "weights");
                const auto state_first = clipped_first.state(), state_fused = clipped_in_update.state();
                for (size_t b = 0; b < state_first.size(); b++)
                    expect_same_bits(state_first[b].second->to_float(), state_fused[b].second->to_float(),
                                     state_first[b].first.c_str());
                ASSERT_EQ(sums_first.size(), sums_fused.size());
                for (size_t k = 0; k < sums_first.size(); k++) {
                    EXPECT_EQ(sums_first[k].grad_squares, sums_fused[k].grad_squares) << "slice " << k;
                    EXPECT_EQ(sums_first[k].update_squares, sums_fused[k].update_squares) << "slice " << k;
                }
                EXPECT_TRUE(std::equal(grads.begin(), grads.end(), fused.model.grads())) << "the gradients were scaled";
                EXPECT_NE(first.mean_param(), 1.0) << "nothing was updated";
            }
}

// The update runs in blocks that the threads share out: the weights and the
// optimizer state come out the same, bit for bit, on any thread count, in
// every mode (stochastic rounding of the moments too), measured or not, over
// a range whose ends split tensors at odd places.
TEST(AdamW, TheUpdateGivesTheSameBitsOnAnyThreadCount) {
    const int saved = omp_get_max_threads();
    for (PrecisionMode mode : {PrecisionMode::Fp32, PrecisionMode::Mixed, PrecisionMode::Bf16, PrecisionMode::Bf16Sr,
                               PrecisionMode::Bf16Kahan})
        for (bool measured : {true, false}) {
            SCOPED_TRACE(fmt::format("{}, measured {}", precision_mode_name(mode), measured));
            PrecisionConfig p;
            p.mode = mode;
            p.sr_moments = mode == PrecisionMode::Bf16Sr;
            std::vector<float> weights1, state1, initial;
            for (int threads : {1, 3, 7}) {
                omp_set_num_threads(threads);
                FlatModel f(p);
                const long n = f.model.num_parameters();
                std::vector<float> w = random_vector(n, 8, 0.5f), g = random_vector(n, 9, 0.1f);
                if (p.bf16_state()) bf16_round_inplace(w.data(), n), bf16_round_inplace(g.data(), n);
                std::copy(w.begin(), w.end(), f.model.params());
                AdamW opt(OptimizerConfig{}, n, p, 42, 0, n / 3 + 1, 2 * n / 3 + 5);
                std::vector<UpdateSums> sums;
                for (int step = 0; step < 3; step++) {
                    std::copy(g.begin(), g.end(), f.model.grads());
                    opt.step(f.model, 1e-2, measured ? &sums : nullptr);
                }
                std::vector<float> weights(f.model.params(), f.model.params() + n), state;
                for (const auto& [name, buffer] : opt.state()) {
                    std::vector<float> b = buffer->to_float();
                    state.insert(state.end(), b.begin(), b.end());
                }
                if (threads == 1) {
                    weights1 = weights, state1 = state, initial = w;
                    continue;
                }
                SCOPED_TRACE(fmt::format("{} threads against 1", threads));
                expect_same_bits(weights, weights1, "weights");
                expect_same_bits(state, state1, "optimizer state");
            }
            EXPECT_NE(weights1[weights1.size() / 2], initial[initial.size() / 2]) << "the range was not updated";
        }
    omp_set_num_threads(saved);
}

// The paper's point about pure bf16, in one test: an update below half a bf16
// step (at 1.0 a step is 2^-7) is lost to round-to-nearest every time, while
// stochastic rounding keeps it in expectation.
TEST(Bf16Optimizer, SmallUpdatesStallUnderNearestRoundingAndSurviveStochasticRounding) {
    const double lr = 1e-3;
    const int steps = 10;
    std::map<PrecisionMode, double> mean;
    for (PrecisionMode mode : {PrecisionMode::Fp32, PrecisionMode::Bf16, PrecisionMode::Bf16Sr})
        mean[mode] = flat_adamw(mode, lr, steps).first;
    EXPECT_NEAR(mean[PrecisionMode::Fp32], 1.0 - steps * lr, 1e-4);
    EXPECT_EQ(mean[PrecisionMode::Bf16], 1.0) << "round-to-nearest should lose every update";
    // Each weight is a sum of 10 independent roundings one ulp (2^-8 below 1)
    // apart: the mean over n weights has a standard error below
    // sqrt(10) * 2^-8 / 2 / sqrt(n); allow 5 of them.
    PrecisionConfig p;
    long n = FlatModel(p).model.num_parameters();
    double bound = 5 * std::sqrt(10.0) * std::ldexp(1.0, -8) / 2 / std::sqrt((double)n);
    EXPECT_NEAR(mean[PrecisionMode::Bf16Sr], mean[PrecisionMode::Fp32], bound);
}

// Kahan summation (bf16_kahan) carries what each rounding lost into the next
// update: the updates round-to-nearest drops all add up, to within a bf16 step.
TEST(Bf16Optimizer, KahanKeepsTheUpdatesNearestRoundingLoses) {
    auto [fp32, fp32_lost] = flat_adamw(PrecisionMode::Fp32, 1e-3, 10);
    auto [bf16, bf16_lost] = flat_adamw(PrecisionMode::Bf16, 1e-3, 10);
    auto [kahan, kahan_lost] = flat_adamw(PrecisionMode::Bf16Kahan, 1e-3, 10);
    EXPECT_EQ(bf16, 1.0) << "round-to-nearest should lose every update";
    EXPECT_EQ(bf16_lost, 1.0) << "and count every one as lost";
    EXPECT_NEAR(kahan, fp32, std::ldexp(1.0, -8));
    EXPECT_NE(kahan, 1.0);
}

// The lost-update count is exactly the number of weights whose stored value
// did not change although their update was not zero (every gradient here is
// non-zero, and so is every update), per tensor kind.
TEST(Bf16Optimizer, LostUpdatesEqualABruteForceCount) {
    for (PrecisionMode mode : {PrecisionMode::Bf16, PrecisionMode::Bf16Sr}) {
        PrecisionConfig p;
        p.mode = mode;
        FlatModel f(p);
        const long n = f.model.num_parameters();
        auto w = random_vector(n, 5, 1.0f), g = random_vector(n, 6, 0.1f);
        for (long i = 0; i < n; i++) {
            f.model.params()[i] = bf16_to_float(float_to_bf16_rne(w[i] * (i % 3 == 0 ? 1e-3f : 1.0f)));
            f.model.grads()[i] = g[i] == 0.0f ? 1e-3f : g[i];
        }
        OptimizerConfig oc;
        AdamW opt(oc, n, p, 42);
        opt.step(f.model, 1e-4);  // small enough to lose some updates, large enough to keep others
        std::vector<float> before(f.model.params(), f.model.params() + n);
        opt.step(f.model, 1e-4);
        const auto& kinds = f.model.tensor_kinds();
        ASSERT_EQ(opt.lost_updates().size(), kinds.size());
        long total = 0;
        for (size_t k = 0; k < kinds.size(); k++) {
            long unchanged = 0;
            for (long i = kinds[k].offset; i < kinds[k].offset + kinds[k].numel(); i++)
                unchanged += f.model.params()[i] == before[i];
            EXPECT_EQ(opt.lost_updates()[k], unchanged) << precision_mode_name(mode) << " " << kinds[k].name;
            total += unchanged;
        }
        std::printf("%s: %ld of %ld updates lost\n", precision_mode_name(mode), total, n);
        EXPECT_GT(total, 0);
        EXPECT_LT(total, n);
    }
}

TEST(Bf16Optimizer, StateStaysBf16AndStochasticRoundingIsDeterministic) {
    PrecisionConfig p;
    p.mode = PrecisionMode::Bf16Sr;
    p.sr_moments = true;
    OptimizerConfig oc;
    auto run = [&](int rank, bool key_rank) {
        PrecisionConfig q = p;
        q.sr_key_rank = key_rank;
        FlatModel f(q);
        auto g = random_vector(f.model.num_parameters(), 9, 0.1f);
        std::copy(g.begin(), g.end(), f.model.grads());
        AdamW opt(oc, f.model.num_parameters(), q, 42, rank);
        for (int s = 0; s < 3; s++) opt.step(f.model, 3e-3);
        std::vector<float> out(f.model.params(), f.model.params() + f.model.num_parameters());
        for (float x : out) EXPECT_EQ(x, bf16_to_float(float_to_bf16_rne(x))) << "not a bf16 value";
        EXPECT_TRUE(opt.first_moment().is_bf16() && opt.second_moment().is_bf16());
        EXPECT_EQ(opt.state_bytes(), 4 * f.model.num_parameters()) << "two moments of 2 bytes an element";
        return out;
    };
    EXPECT_EQ(run(0, false), run(0, false)) << "same key, same rounding";
    EXPECT_EQ(run(0, false), run(1, false)) << "without rank keying, replicas round identically";
    auto r0 = run(0, true), r1 = run(1, true);
    long differ = 0;
    for (size_t i = 0; i < r0.size(); i++) differ += r0[i] != r1[i];
    std::printf("rank-keyed: %ld of %zu weights differ between rank 0 and rank 1\n", differ, r0.size());
    EXPECT_GT(differ, (long)r0.size() / 100) << "rank-keyed rounding should make replicas drift apart";
}

bool all_bf16_values(const float* x, long n) {
    for (long i = 0; i < n; i++)
        if (x[i] != bf16_to_float(float_to_bf16_rne(x[i]))) return false;
    return true;
}

// The same over stored attention probabilities, (count, T, T): only their
// causal triangle, the entries attention writes in the bf16 modes (kernels.h).
bool all_bf16_probabilities(const float* att, long count, int T) {
    for (long m = 0; m < count; m++)
        for (int t = 0; t < T; t++)
            if (!all_bf16_values(att + (m * T + t) * T, t + 1)) return false;
    return true;
}

// Random tokens: the knobs' tests look at where values are rounded, not at learning.
class RandomBatches : public BatchSource {
  public:
    void next_batch(int32_t* inputs, int32_t* targets, int B, int T) override {
        for (long i = 0; i < (long)B * T; i++) inputs[i] = rng_() % 64, targets[i] = rng_() % 64;
    }

  private:
    std::mt19937 rng_{3};
};

TrainConfig knob_config(bool softmax_bf16, bool grad_accum_bf16) {
    TrainConfig c;
    c.model = FlatModel::tiny_config();
    c.model.max_seq_len = 16;
    c.run.batch_size = 2, c.run.seq_len = 16, c.run.grad_accum = 2;
    c.optimizer.grad_clip = 0.0;  // the gradients after a step are the accumulation's, however clipping is applied
    c.precision.mode = PrecisionMode::Mixed;
    c.precision.softmax_bf16 = softmax_bf16;
    c.precision.grad_accum_bf16 = grad_accum_bf16;
    return c;
}

TEST(PrecisionKnobs, Bf16SoftmaxRoundsTheProbabilitiesBackwardUses) {
    for (bool knob : {false, true}) {
        TrainConfig c = knob_config(knob, false);
        Model model(c.model, c.run.batch_size, c.run.seq_len, false, c.precision);
        model.init_weights(1);
        RandomBatches data;
        std::vector<int32_t> x(32), y(32);
        data.next_batch(x.data(), y.data(), 2, 16);
        model.forward(x.data(), y.data());
        const ActivationTensors& a = model.activations();
        long heads = (long)c.model.n_layers * 2 * c.model.n_heads, probs = 32L * c.model.vocab_size;
        EXPECT_EQ(all_bf16_probabilities(a.att, heads, 16), knob) << "attention probabilities, softmax bf16 = " << knob;
        EXPECT_EQ(all_bf16_values(a.logits, probs), knob) << "cross-entropy probabilities, softmax bf16 = " << knob;
    }
}

TEST(PrecisionKnobs, Bf16GradientAccumulationKeepsABf16Sum) {
    for (bool knob : {false, true}) {
        TrainConfig c = knob_config(false, knob);
        RandomBatches data;
        Trainer trainer(c, data, 0.0);
        trainer.model().init_weights(1);
        trainer.step();
        // mixed keeps fp32 gradients: only the bf16 accumulation makes them bf16 values.
        EXPECT_EQ(all_bf16_values(trainer.model().grads(), trainer.model().num_parameters()), knob)
            << "grad_accum bf16 = " << knob;
    }
}

// The last layer's attention output recomputed from its stored probabilities
// P (their causal triangle: kernels.h) and values v, in double: P @ v, with P
// rounded to bf16 first when asked.
// value(b, j, h, d): element d of head h's v at position j of sequence b.
std::vector<double> probs_times_values(const float* P, int B, int T, int NH, int HD, bool round_probs,
                                       const std::function<float(int, int, int, int)>& value) {
    const int CA = NH * HD;
    std::vector<double> out((long)B * T * CA, 0.0);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++)
                for (int j = 0; j <= t; j++) {
                    float p = P[(((long)b * NH + h) * T + t) * T + j];
                    if (round_probs) p = bf16_to_float(float_to_bf16_rne(p));
                    for (int d = 0; d < HD; d++)
                        out[((long)b * T + t) * CA + h * HD + d] += (double)p * value(b, j, h, d);
                }
    return out;
}

double max_relative_difference(const float* a, const std::vector<double>& b) {
    double diff = 0.0, scale = 0.0;
    for (size_t i = 0; i < b.size(); i++) {
        diff = std::max(diff, std::abs(a[i] - b[i]));
        scale = std::max(scale, std::abs(b[i]));
    }
    return diff / scale;
}

TEST(PrecisionKnobs, Fp32AttentionMultipliesTheProbabilitiesUnrounded) {
    for (bool fp32_products : {false, true}) {
        TrainConfig c = knob_config(false, false);
        c.precision.attention_fp32 = fp32_products;
        const int B = 2, T = 16, L = c.model.n_layers, NH = c.model.n_heads, HD = c.model.head_dim();
        ASSERT_EQ(c.model.n_kv_heads, NH);
        Model model(c.model, B, T, false, c.precision);
        model.init_weights(1);
        RandomBatches data;
        std::vector<int32_t> x(B * T), y(B * T);
        data.next_batch(x.data(), y.data(), B, T);
        model.forward(x.data(), y.data());
        const ActivationTensors& a = model.activations();
        // The bf16 modes keep the last layer's attention output. Its v: with
        // fp32 products, every layer's qkv rows (bf16 values); with bf16
        // products, the bf16 heads attention reads (head-major, v after q, k).
        const float* P = a.att + (long)(L - 1) * B * NH * T * T;
        const float* qkv = fp32_products ? a.qkv + (long)(L - 1) * B * T * 3 * NH * HD : nullptr;
        const bf16* heads = model.bf16_activations().qkv_heads;
        const auto value = [&](int b, int j, int h, int d) {
            if (fp32_products) return bf16_value(qkv[((long)b * T + j) * 3 * NH * HD + 2 * NH * HD + h * HD + d]);
            const long head = ((long)(L - 1) * B + b) * 3 * NH + 2 * NH + h;
            return bf16_to_float(heads[(head * T + j) * HD + d]);
        };
        double vs_exact = max_relative_difference(a.att_out, probs_times_values(P, B, T, NH, HD, false, value));
        double vs_rounded = max_relative_difference(a.att_out, probs_times_values(P, B, T, NH, HD, true, value));
        std::printf("attention %s: output against P v %.2e, against bf16(P) v %.2e\n",
                    fp32_products ? "fp32" : "bf16", vs_exact, vs_rounded);
        const double near = 1e-6, far = 1e-4;  // fp32 summation order; bf16's rounding of P
        EXPECT_LT(fp32_products ? vs_exact : vs_rounded, near);
        EXPECT_GT(fp32_products ? vs_rounded : vs_exact, far);
    }
}

TEST(PrecisionConfig, ParsesValidatesAndRoundTrips) {
    nlohmann::json j = {
        {"precision", {{"mode", "bf16_sr"}, {"softmax", "bf16"}, {"attention", "fp32"}, {"sr_moments", true}}}};
    TrainConfig c = config_from_json(j);
    EXPECT_EQ(c.precision.mode, PrecisionMode::Bf16Sr);
    EXPECT_TRUE(c.precision.softmax_bf16);
    EXPECT_TRUE(c.precision.attention_fp32);
    EXPECT_FALSE(config_from_json({{"precision", {{"mode", "bf16"}}}}).precision.attention_fp32) << "default: matmul";
    EXPECT_FALSE(c.precision.grad_accum_bf16);
    EXPECT_TRUE(c.precision.sr_moments);
    TrainConfig back = config_from_json(config_to_json(c));
    EXPECT_EQ(config_to_json(back), config_to_json(c));

    auto error_of = [](const nlohmann::json& bad) {
        try {
            config_from_json(bad);
        } catch (const ConfigError& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    EXPECT_NE(error_of({{"precision", {{"mode", "fp16"}}}}).find("precision.mode"), std::string::npos);
    EXPECT_NE(error_of({{"precision", {{"softmax", "fp8"}}}}).find("precision.softmax"), std::string::npos);
    EXPECT_NE(error_of({{"precision", {{"attention", "bf16"}}}}).find("precision.attention"), std::string::npos);
    EXPECT_NE(error_of({{"precision", {{"rounding", "sr"}}}}).find("precision.rounding"), std::string::npos);
    EXPECT_NE(error_of({{"precision", {{"grad_accum", "bf16"}}}}).find("bf16 precision.mode"), std::string::npos);
    EXPECT_NE(error_of({{"precision", {{"mode", "bf16"}, {"sr_moments", true}}}}).find("bf16_sr"), std::string::npos);
}

}  // namespace
}  // namespace hlat
