// Each fast kernel against its plain reference loop, and each backward against
// central finite differences of its forward on small shapes.
#include "test_util.h"
#include "trainer/model/kernels.h"
#include "trainer/model/kernels_bf16.h"
#include "trainer/model/kernels_reference.h"
#include "trainer/model/vector_math.h"

#include <fmt/format.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <bit>
#include <cstring>
#include <functional>
#include <tuple>

namespace hlat {
namespace {

using test::random_vector;
using test::relative_error;

// Checks an analytic input gradient against finite differences of
// loss(x) = sum_i dout_i * forward(x)_i, on every element of x. forward must
// not modify its argument.
void expect_matches_finite_differences(
    const std::function<std::vector<float>(const std::vector<float>&)>& forward,
    const std::vector<float>& x, const std::vector<float>& dout, const std::vector<float>& analytic,
    double tolerance = 2e-2, float h = 1e-2f) {
    ASSERT_EQ(x.size(), analytic.size());
    auto loss = [&](const std::vector<float>& at) {
        std::vector<float> y = forward(at);
        double s = 0.0;
        for (size_t i = 0; i < y.size(); i++) s += (double)dout[i] * y[i];
        return s;
    };
    std::vector<float> numeric(x.size());
    std::vector<float> probe = x;
    for (size_t i = 0; i < x.size(); i++) {
        probe[i] = x[i] + h;
        double up = loss(probe);
        probe[i] = x[i] - h;
        double down = loss(probe);
        probe[i] = x[i];
        numeric[i] = (float)((up - down) / (2.0 * h));
    }
    double err = relative_error(analytic, numeric);
    EXPECT_LT(err, tolerance) << "analytic gradient differs from finite differences";
}

TEST(VectorExp, MatchesLibmAndKeepsSpecialValues) {
    double worst = 0.0;
    for (float x = -87.0f; x < 88.0f; x += 0.0137f) {
        double e = std::exp((double)x);
        worst = std::max(worst, std::fabs(vexp(x) - e) / e);
    }
    EXPECT_LT(worst, 2.5e-7) << "within 2 ulp of the exact value";
    EXPECT_EQ(vexp(0.0f), 1.0f);
    EXPECT_EQ(vexp(-INFINITY), 0.0f);
    EXPECT_EQ(vexp(-200.0f), 0.0f);
    EXPECT_EQ(vexp(INFINITY), INFINITY);
    EXPECT_TRUE(std::isnan(vexp(NAN))) << "NaN must reach the detectors, not vanish";
}

TEST(Matmul, ForwardAndBackwardMatchReference) {
    const int N = 37, IC = 29, OC = 23;
    auto inp = random_vector(N * IC, 1), w = random_vector(OC * IC, 2), dout = random_vector(N * OC, 3);
    std::vector<float> out(N * OC), out_ref(N * OC);
    matmul_forward(out.data(), inp.data(), w.data(), N, IC, OC);
    reference::matmul_forward(out_ref.data(), inp.data(), w.data(), N, IC, OC);
    EXPECT_LT(relative_error(out, out_ref), 1e-5);

    std::vector<float> dinp(N * IC, 7.0f), dinp_ref(N * IC), dw(OC * IC, 0.5f), dw_ref(OC * IC, 0.5f);
    matmul_backward(dinp.data(), dw.data(), dout.data(), inp.data(), w.data(), N, IC, OC, true);
    reference::matmul_backward(dinp_ref.data(), dw_ref.data(), dout.data(), inp.data(), w.data(), N, IC, OC);
    EXPECT_LT(relative_error(dinp, dinp_ref), 1e-5) << "dinp must be overwritten";
    EXPECT_LT(relative_error(dw, dw_ref), 1e-5) << "dweight must accumulate";

    // Without accumulate dweight is written over, whatever it held: even NaN.
    std::vector<float> dw_new(OC * IC, NAN), dw_new_ref(OC * IC, 0.0f);
    matmul_backward(dinp.data(), dw_new.data(), dout.data(), inp.data(), w.data(), N, IC, OC, false);
    reference::matmul_backward(dinp_ref.data(), dw_new_ref.data(), dout.data(), inp.data(), w.data(), N, IC, OC);
    EXPECT_LT(relative_error(dw_new, dw_new_ref), 1e-5) << "dweight must be overwritten";
}

// The LM head's weight gradient (many output rows, few columns) takes
// sgemm's path that copies A's columns into blocks first (sgemm.cpp): rows
// past the last whole block, accumulation, overwriting NaN, and calls from
// inside a parallel region (each thread its own product) must all hold.
TEST(Matmul, AWeightGradientWithManyRowsAndFewColumnsMatchesReference) {
    const int N = 67, IC = 40, OC = 1500;
    auto inp = random_vector(N * IC, 7), w = random_vector(OC * IC, 8), dout = random_vector(N * OC, 9);
    std::vector<float> dinp_ref(N * IC), dw_ref(OC * IC, 0.25f);
    reference::matmul_backward(dinp_ref.data(), dw_ref.data(), dout.data(), inp.data(), w.data(), N, IC, OC);
    std::vector<float> dw(OC * IC, 0.25f);
    matmul_dweight(dw.data(), dout.data(), inp.data(), N, IC, OC, true);
    EXPECT_LT(relative_error(dw, dw_ref), 1e-5) << "dweight must accumulate";

    std::vector<float> fresh_ref(OC * IC, 0.0f);
    reference::matmul_backward(dinp_ref.data(), fresh_ref.data(), dout.data(), inp.data(), w.data(), N, IC, OC);
    std::vector<std::vector<float>> per_thread(2, std::vector<float>(OC * IC, NAN));
#pragma omp parallel for num_threads(2)
    for (int t = 0; t < 2; t++) matmul_dweight(per_thread[t].data(), dout.data(), inp.data(), N, IC, OC, false);
    for (int t = 0; t < 2; t++)
        EXPECT_LT(relative_error(per_thread[t], fresh_ref), 1e-5) << "thread " << t << ": dweight must be overwritten";
}

// config M's o_proj weight gradient (512 x 512, dout's rows 512 floats apart)
// takes sgemm's path that copies dout's rows further apart first (sgemm.cpp):
// oneDNN's own product's bits, accumulated and overwriting NaN, from one
// thread and from each thread of a parallel region; and the plain sum's values.
// 256 x 512 takes that path too; 1024 x 512 (too wide for it) goes straight to
// oneDNN, the boundary on its other side.
TEST(Matmul, AWeightGradientWhoseRowsLieTwoKibApartGivesOneDnnsBits) {
    for (auto [N, IC, OC] : {std::tuple{96, 512, 512}, std::tuple{200, 256, 512}, std::tuple{64, 512, 1024}}) {
        SCOPED_TRACE(fmt::format("N {} IC {} OC {}", N, IC, OC));
        auto inp = random_vector(N * IC, 11), w = random_vector(OC * IC, 12), dout = random_vector(N * OC, 13);
        for (bool accumulate : {true, false}) {
            const float start = accumulate ? 0.25f : NAN;
            std::vector<float> dw(OC * IC, start), onednn(OC * IC, 0.25f), dinp(N * IC), dw_ref(OC * IC, 0.0f);
            matmul_dweight(dw.data(), dout.data(), inp.data(), N, IC, OC, accumulate);
            ASSERT_EQ(dnnl_sgemm('T', 'N', OC, IC, N, 1.0f, dout.data(), OC, inp.data(), IC, accumulate ? 1.0f : 0.0f,
                                 onednn.data(), IC),
                      dnnl_success);
            ASSERT_EQ(std::memcmp(dw.data(), onednn.data(), sizeof(float) * dw.size()), 0) << "accumulate " << accumulate;
            reference::matmul_backward(dinp.data(), dw_ref.data(), dout.data(), inp.data(), w.data(), N, IC, OC);
            if (accumulate)
                for (float& x : dw_ref) x += 0.25f;
            EXPECT_LT(relative_error(dw, dw_ref), 1e-5) << "accumulate " << accumulate;
            std::vector<std::vector<float>> per_thread(2, std::vector<float>(OC * IC, start));
#pragma omp parallel for num_threads(2)
            for (int t = 0; t < 2; t++) matmul_dweight(per_thread[t].data(), dout.data(), inp.data(), N, IC, OC, accumulate);
            for (int t = 0; t < 2; t++)
                EXPECT_LT(relative_error(per_thread[t], dw_ref), 1e-5) << "thread " << t << ", accumulate " << accumulate;
        }
    }
}

TEST(Matmul, BackwardMatchesFiniteDifferences) {
    const int N = 5, IC = 6, OC = 4;
    auto inp = random_vector(N * IC, 4), w = random_vector(OC * IC, 5), dout = random_vector(N * OC, 6);
    std::vector<float> dinp(N * IC), dw(OC * IC, 0.0f);
    matmul_backward(dinp.data(), dw.data(), dout.data(), inp.data(), w.data(), N, IC, OC, false);
    auto forward_x = [&](const std::vector<float>& x) {
        std::vector<float> y(N * OC);
        matmul_forward(y.data(), x.data(), w.data(), N, IC, OC);
        return y;
    };
    auto forward_w = [&](const std::vector<float>& ww) {
        std::vector<float> y(N * OC);
        matmul_forward(y.data(), inp.data(), ww.data(), N, IC, OC);
        return y;
    };
    expect_matches_finite_differences(forward_x, inp, dout, dinp);
    expect_matches_finite_differences(forward_w, w, dout, dw);
}

struct AttentionShape {
    int B, T, NH, NKV, HD;
};

class AttentionTest : public ::testing::TestWithParam<AttentionShape> {};

// T values that are not multiples of the 64-row block exercise the blocking.
INSTANTIATE_TEST_SUITE_P(Shapes, AttentionTest,
                         ::testing::Values(AttentionShape{2, 7, 2, 2, 4}, AttentionShape{1, 70, 4, 2, 8},
                                           AttentionShape{2, 130, 4, 1, 6}, AttentionShape{1, 64, 2, 2, 16}),
                         [](const auto& info) {
                             const AttentionShape& s = info.param;
                             return fmt::format("B{}_T{}_NH{}_NKV{}_HD{}", s.B, s.T, s.NH, s.NKV, s.HD);
                         });

TEST_P(AttentionTest, ForwardAndBackwardMatchReference) {
    auto [B, T, NH, NKV, HD] = GetParam();
    const int QKV = (NH + 2 * NKV) * HD, CA = NH * HD;
    auto qkv = random_vector((long)B * T * QKV, 11);
    auto dout = random_vector((long)B * T * CA, 12);
    std::vector<float> out((long)B * T * CA), out_ref(out.size());
    // att starts as NaN: the entries the forward leaves unwritten (above each
    // row block's columns) must be ones the backward never reads.
    std::vector<float> att((long)B * NH * T * T, NAN), att_ref(att.size());
    std::vector<float> scratch(omp_get_max_threads() * AttentionScratch::floats(T));
    attention_forward(out.data(), att.data(), scratch.data(), qkv.data(), B, T, NH, NKV, HD);
    reference::attention_forward(out_ref.data(), att_ref.data(), qkv.data(), B, T, NH, NKV, HD);
    EXPECT_LT(relative_error(out, out_ref), 1e-5);
    std::vector<float> seen, seen_ref;  // the causal triangle, diagonal included
    for (long m = 0; m < (long)B * NH; m++)
        for (int i = 0; i < T; i++)
            for (int j = 0; j <= i; j++) {
                seen.push_back(att[(m * T + i) * T + j]);
                seen_ref.push_back(att_ref[(m * T + i) * T + j]);
            }
    EXPECT_LT(relative_error(seen, seen_ref), 1e-5);

    // Without stored probabilities (activation checkpointing) the output is the same.
    std::vector<float> out_ckpt(out.size());
    attention_forward(out_ckpt.data(), nullptr, scratch.data(), qkv.data(), B, T, NH, NKV, HD);
    EXPECT_EQ(out_ckpt, out);

    std::vector<float> dqkv(qkv.size(), 3.0f), dqkv_ref(qkv.size()), dqkv_ckpt(qkv.size(), -1.0f);
    attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T, NH, NKV, HD);
    reference::attention_backward(dqkv_ref.data(), dout.data(), qkv.data(), att_ref.data(), B, T, NH, NKV, HD);
    EXPECT_LT(relative_error(dqkv, dqkv_ref), 1e-5);
    attention_backward(dqkv_ckpt.data(), scratch.data(), dout.data(), qkv.data(), nullptr, B, T, NH, NKV, HD);
    EXPECT_EQ(dqkv_ckpt, dqkv) << "recomputed probabilities must give the same gradient";
}

TEST(Attention, IsCausal) {
    // Changing a token's q, k and v at position t must not change outputs before t.
    const int B = 1, T = 20, NH = 2, NKV = 1, HD = 4, QKV = (NH + 2 * NKV) * HD, CA = NH * HD;
    auto qkv = random_vector(B * T * QKV, 13);
    std::vector<float> scratch(omp_get_max_threads() * AttentionScratch::floats(T));
    std::vector<float> out(B * T * CA), out2(B * T * CA);
    attention_forward(out.data(), nullptr, scratch.data(), qkv.data(), B, T, NH, NKV, HD);
    const int t = 12;
    for (int i = t * QKV; i < T * QKV; i++) qkv[i] += 1.0f;
    attention_forward(out2.data(), nullptr, scratch.data(), qkv.data(), B, T, NH, NKV, HD);
    for (int i = 0; i < t * CA; i++) ASSERT_EQ(out[i], out2[i]) << "output at row " << i / CA << " saw the future";
    bool later_changed = false;
    for (int i = t * CA; i < T * CA; i++) later_changed |= out[i] != out2[i];
    EXPECT_TRUE(later_changed);
}

TEST(Attention, BackwardMatchesFiniteDifferences) {
    const int B = 1, T = 5, NH = 2, NKV = 1, HD = 4, QKV = (NH + 2 * NKV) * HD, CA = NH * HD;
    auto qkv = random_vector(B * T * QKV, 14);
    auto dout = random_vector(B * T * CA, 15);
    std::vector<float> scratch(omp_get_max_threads() * AttentionScratch::floats(T));
    std::vector<float> dqkv(qkv.size());
    attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), nullptr, B, T, NH, NKV, HD);
    auto forward = [&](const std::vector<float>& x) {
        std::vector<float> y(B * T * CA);
        attention_forward(y.data(), nullptr, scratch.data(), x.data(), B, T, NH, NKV, HD);
        return y;
    };
    expect_matches_finite_differences(forward, qkv, dout, dqkv);
}

TEST(Attention, InjectedLeakSeesTheNextTokenAndStaysDifferentiable) {
    const int B = 1, T = 70, NH = 2, NKV = 1, HD = 4, QKV = (NH + 2 * NKV) * HD, CA = NH * HD;
    auto qkv = random_vector(B * T * QKV, 16);
    std::vector<float> scratch(omp_get_max_threads() * AttentionScratch::floats(T));
    std::vector<float> out(B * T * CA), out2(B * T * CA);
    attention_forward(out.data(), nullptr, scratch.data(), qkv.data(), B, T, NH, NKV, HD, 1);
    const int t = 65;  // across the 64-row block boundary
    for (int i = t * QKV; i < (t + 1) * QKV; i++) qkv[i] += 1.0f;
    attention_forward(out2.data(), nullptr, scratch.data(), qkv.data(), B, T, NH, NKV, HD, 1);
    bool previous_changed = false;
    for (int i = (t - 1) * CA; i < t * CA; i++) previous_changed |= out[i] != out2[i];
    EXPECT_TRUE(previous_changed) << "with the leak, position t-1 sees token t";
    for (int i = 0; i < (t - 1) * CA; i++) ASSERT_EQ(out[i], out2[i]) << "but nothing earlier does";

    const int Ts = 6;
    auto small = random_vector(Ts * QKV, 17), dout = random_vector(Ts * CA, 18);
    std::vector<float> dqkv(small.size()), stored(NH * Ts * Ts), dqkv_stored(small.size());
    attention_backward(dqkv.data(), scratch.data(), dout.data(), small.data(), nullptr, 1, Ts, NH, NKV, HD, 1);
    std::vector<float> o(Ts * CA);
    attention_forward(o.data(), stored.data(), scratch.data(), small.data(), 1, Ts, NH, NKV, HD, 1);
    attention_backward(dqkv_stored.data(), scratch.data(), dout.data(), small.data(), stored.data(), 1, Ts, NH, NKV,
                       HD, 1);
    EXPECT_EQ(dqkv, dqkv_stored);
    auto forward = [&](const std::vector<float>& x) {
        std::vector<float> y(Ts * CA);
        attention_forward(y.data(), nullptr, scratch.data(), x.data(), 1, Ts, NH, NKV, HD, 1);
        return y;
    };
    expect_matches_finite_differences(forward, small, dout, dqkv);
}

TEST(RMSNorm, ForwardMatchesDefinition) {
    const int N = 3, C = 8;
    auto x = random_vector(N * C, 20), w = random_vector(C, 21);
    std::vector<float> y(N * C), rstd(N);
    rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
    for (int n = 0; n < N; n++) {
        double ms = 0.0;
        for (int c = 0; c < C; c++) ms += (double)x[n * C + c] * x[n * C + c] / C;
        for (int c = 0; c < C; c++)
            EXPECT_NEAR(y[n * C + c], x[n * C + c] / std::sqrt(ms + 1e-5) * w[c], 1e-5);
    }
}

TEST(RMSNorm, BackwardMatchesFiniteDifferences) {
    const int N = 4, C = 6;
    auto x = random_vector(N * C, 22), w = random_vector(C, 23), dout = random_vector(N * C, 24);
    std::vector<float> y(N * C), rstd(N), dx(N * C, 0.0f), dw(C, 0.0f);
    rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
    rmsnorm_backward_accumulate(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
    auto forward_x = [&](const std::vector<float>& xx) {
        std::vector<float> yy(N * C), r(N);
        rmsnorm_forward(yy.data(), r.data(), xx.data(), w.data(), N, C, 1e-5f);
        return yy;
    };
    auto forward_w = [&](const std::vector<float>& ww) {
        std::vector<float> yy(N * C), r(N);
        rmsnorm_forward(yy.data(), r.data(), x.data(), ww.data(), N, C, 1e-5f);
        return yy;
    };
    expect_matches_finite_differences(forward_x, x, dout, dx);
    expect_matches_finite_differences(forward_w, w, dout, dw);
}

// The gains' gradients are split over the threads by columns, each column
// summed over the rows in row order: the same bits on any thread count, in
// fp32 and in the bf16 modes (whose dy is rounded first). C is odd and not a
// whole number of cache lines, so some threads get none and one a ragged end.
TEST(RMSNorm, BackwardGivesTheSameBitsOnAnyThreadCount) {
    const int N = 33, C = 77;
    auto x = random_vector(N * C, 25), w = random_vector(C, 26), dout = random_vector(N * C, 27);
    std::vector<float> y(N * C), rstd(N);
    rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
    const int saved = omp_get_max_threads();
    for (bool bf16 : {false, true}) {
        std::vector<float> dx1, dw1;
        for (int threads : {1, 2, 3, 7}) {
            omp_set_num_threads(threads);
            std::vector<float> dx(N * C, 0.5f), dw(C, 0.25f);
            if (bf16)
                rmsnorm_backward_accumulate_bf16(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(),
                                                 N, C);
            else
                rmsnorm_backward_accumulate(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
            if (threads == 1) {
                dx1 = dx, dw1 = dw;
                continue;
            }
            for (int c = 0; c < C; c++)
                ASSERT_EQ(std::bit_cast<uint32_t>(dw[c]), std::bit_cast<uint32_t>(dw1[c]))
                    << "bf16 " << bf16 << ", " << threads << " threads, column " << c;
            for (int i = 0; i < N * C; i++)
                ASSERT_EQ(std::bit_cast<uint32_t>(dx[i]), std::bit_cast<uint32_t>(dx1[i]))
                    << "bf16 " << bf16 << ", " << threads << " threads, element " << i;
        }
    }
    omp_set_num_threads(saved);
}

// In the bf16 modes the stream's gradient is rounded to bf16 values and
// narrowed for the next matmul in RMSNorm backward's own pass: the same bits
// as bf16_round_inplace and bf16_narrow after it, each on or off, with dx
// accumulated onto (a bf16 value's neighbourhood, where rounding matters).
TEST(RMSNorm, BackwardRoundsAndNarrowsTheStreamGradientAsTheSeparatePassesDo) {
    const int N = 33, C = 77;
    auto x = random_vector(N * C, 41), w = random_vector(C, 42), dout = random_vector(N * C, 43);
    auto dx0 = random_vector(N * C, 44);
    std::vector<float> y(N * C), rstd(N);
    rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
    for (bool round : {false, true})
        for (bool narrow : {false, true}) {
            SCOPED_TRACE(fmt::format("round {} narrow {}", round, narrow));
            std::vector<float> dx = dx0, dw(C, 0.25f), dx_ref = dx0, dw_ref(C, 0.25f);
            std::vector<bf16> dx16(N * C, bf16(0x7fc1)), dx16_ref(N * C, bf16(0x7fc1));
            rmsnorm_backward_accumulate_bf16(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C,
                                             {round, narrow ? dx16.data() : nullptr});
            rmsnorm_backward_accumulate_bf16(dx_ref.data(), dw_ref.data(), dout.data(), x.data(), w.data(),
                                             rstd.data(), N, C);
            if (round) bf16_round_inplace(dx_ref.data(), N * C);
            if (narrow) bf16_narrow(dx16_ref.data(), dx_ref.data(), N * C);
            for (int i = 0; i < N * C; i++)
                ASSERT_EQ(std::bit_cast<uint32_t>(dx[i]), std::bit_cast<uint32_t>(dx_ref[i])) << "dx element " << i;
            for (int c = 0; c < C; c++)
                ASSERT_EQ(std::bit_cast<uint32_t>(dw[c]), std::bit_cast<uint32_t>(dw_ref[c])) << "dweight " << c;
            EXPECT_EQ(dx16, dx16_ref);
        }
}

TEST(RoPE, RotatesHalvesByPositionAngle) {
    const int B = 1, T = 3, NH = 1, NKV = 1, HD = 4, QKV = 3 * HD;
    std::vector<float> cos_t(T * HD / 2), sin_t(T * HD / 2);
    rope_tables(cos_t.data(), sin_t.data(), T, HD, 10000.0f);
    auto qkv = random_vector(B * T * QKV, 30);
    auto orig = qkv;
    rope_forward(qkv.data(), cos_t.data(), sin_t.data(), B, T, NH, NKV, HD);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < HD / 2; i++) {
            double angle = t * std::pow(10000.0, -2.0 * i / HD);
            const float* x = orig.data() + t * QKV;  // query head
            EXPECT_NEAR(qkv[t * QKV + i], x[i] * std::cos(angle) - x[i + 2] * std::sin(angle), 1e-6);
            EXPECT_NEAR(qkv[t * QKV + i + 2], x[i + 2] * std::cos(angle) + x[i] * std::sin(angle), 1e-6);
        }
    for (int t = 0; t < T; t++)  // value heads are not rotated
        for (int d = 2 * HD; d < QKV; d++) EXPECT_EQ(qkv[t * QKV + d], orig[t * QKV + d]);
}

TEST(RoPE, BackwardMatchesFiniteDifferences) {
    const int B = 2, T = 4, NH = 2, NKV = 1, HD = 6, QKV = (NH + 2 * NKV) * HD;
    std::vector<float> cos_t(T * HD / 2), sin_t(T * HD / 2);
    rope_tables(cos_t.data(), sin_t.data(), T, HD, 500.0f);
    auto qkv = random_vector(B * T * QKV, 31), dout = random_vector(B * T * QKV, 32);
    auto dqkv = dout;
    rope_backward(dqkv.data(), cos_t.data(), sin_t.data(), B, T, NH, NKV, HD);
    auto forward = [&](const std::vector<float>& x) {
        auto y = x;
        rope_forward(y.data(), cos_t.data(), sin_t.data(), B, T, NH, NKV, HD);
        return y;
    };
    expect_matches_finite_differences(forward, qkv, dout, dqkv);
}

TEST(SwiGLU, ForwardAndBackward) {
    const int N = 3, H = 5;
    auto gu = random_vector(N * 2 * H, 40), dout = random_vector(N * H, 41);
    std::vector<float> y(N * H), dgu(N * 2 * H);
    swiglu_forward(y.data(), gu.data(), N, H);
    for (int n = 0; n < N; n++)
        for (int i = 0; i < H; i++) {
            double g = gu[n * 2 * H + i], u = gu[n * 2 * H + H + i];
            EXPECT_NEAR(y[n * H + i], g / (1.0 + std::exp(-g)) * u, 1e-6);
        }
    swiglu_backward(dgu.data(), dout.data(), gu.data(), N, H);
    auto forward = [&](const std::vector<float>& x) {
        std::vector<float> yy(N * H);
        swiglu_forward(yy.data(), x.data(), N, H);
        return yy;
    };
    expect_matches_finite_differences(forward, gu, dout, dgu);
}

TEST(CrossEntropy, ForwardAndBackward) {
    const int N = 4, V = 9;
    auto logits = random_vector(N * V, 50, 3.0f);
    std::vector<int32_t> targets = {0, 8, 3, 3};
    auto probs = logits;
    std::vector<float> losses(N);
    crossentropy_forward(probs.data(), losses.data(), nullptr, targets.data(), N, V);
    for (int n = 0; n < N; n++) {
        double lse = 0.0;
        for (int v = 0; v < V; v++) lse += std::exp((double)logits[n * V + v]);
        EXPECT_NEAR(losses[n], std::log(lse) - logits[n * V + targets[n]], 1e-5);
    }
    const float dloss = 0.25f;
    crossentropy_backward(probs.data(), targets.data(), nullptr, 0.0f, dloss, N, V);
    auto forward = [&](const std::vector<float>& x) {
        auto p = x;
        std::vector<float> l(N);
        crossentropy_forward(p.data(), l.data(), nullptr, targets.data(), N, V);
        return l;
    };
    expect_matches_finite_differences(forward, logits, std::vector<float>(N, dloss), probs);
}

TEST(CrossEntropy, StableForHugeLogits) {
    std::vector<float> logits = {1000.0f, 0.0f, -1000.0f};
    std::vector<int32_t> target = {0};
    float loss;
    crossentropy_forward(logits.data(), &loss, nullptr, target.data(), 1, 3);
    EXPECT_TRUE(std::isfinite(loss));
    EXPECT_NEAR(loss, 0.0f, 1e-6);
}

TEST(Embedding, BackwardAccumulatesRepeatedTokens) {
    const int N = 4, C = 3, V = 5;
    auto embed = random_vector(V * C, 60), dout = random_vector(N * C, 61);
    std::vector<int32_t> tokens = {2, 4, 2, 0};
    std::vector<float> out(N * C), dembed(V * C, 0.0f);
    embedding_forward(out.data(), tokens.data(), embed.data(), N, C);
    for (int c = 0; c < C; c++) EXPECT_EQ(out[1 * C + c], embed[4 * C + c]);
    embedding_backward(dembed.data(), dout.data(), tokens.data(), N, C);
    for (int c = 0; c < C; c++) {
        EXPECT_FLOAT_EQ(dembed[2 * C + c], dout[0 * C + c] + dout[2 * C + c]);
        EXPECT_EQ(dembed[1 * C + c], 0.0f);
    }
}

}  // namespace
}  // namespace hlat
