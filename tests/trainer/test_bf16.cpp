// BF16 rounding against an independent definition: the nearest of the two
// bf16 neighbours, computed in double, ties to the even one.
#include "test_util.h"
#include "trainer/model/bf16.h"

#include <cfloat>
#include <cstring>
#include <random>

namespace hlat {
namespace {

// The reference: enumerate the two bf16 values around f and pick by distance.
bf16 reference_rne(float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    bf16 down = (bf16)(bits >> 16);  // truncation: toward zero in magnitude
    bf16 up = (bf16)(down + 1);      // the next bf16 away from zero (may be Inf)
    double x = f, a = bf16_to_float(down), b = bf16_to_float(up);
    if ((up & 0x7fff) == 0x7f80 && (down & 0x7fff) == 0x7f7f) {
        // Rounding past the largest finite bf16: IEEE overflows to Inf when the
        // value is at least halfway to the next (unrepresentable) power.
        b = std::ldexp(1.0, 128) * (std::signbit(f) ? -1 : 1);
    }
    double da = std::fabs(x - a), db = std::fabs(x - b);
    if (da < db) return down;
    if (db < da) return up;
    return (down & 1) ? up : down;  // a tie: the even one
}

TEST(BF16, RoundToNearestEvenOnEdgeCases) {
    std::vector<float> edge = {0.0f, -0.0f, 1.0f, -1.0f, 1.00390625f /* 1 + 2^-8: a tie */, 1.01171875f /* tie, odd */,
                               3.14159265f, FLT_MIN, -FLT_MIN, FLT_MIN / 3 /* subnormal */, 1e-40f, -1e-45f,
                               FLT_MAX, -FLT_MAX, 3.3961776e38f /* rounds to Inf */, 65504.0f, 1e-30f};
    for (float f : edge) {
        EXPECT_EQ(float_to_bf16_rne(f), reference_rne(f)) << f;
    }
    EXPECT_EQ(float_to_bf16_rne(1.00390625f), 0x3f80) << "tie goes to the even mantissa (down)";
    EXPECT_EQ(float_to_bf16_rne(1.01171875f), 0x3f82) << "tie goes to the even mantissa (up)";
    EXPECT_EQ(float_to_bf16_rne(INFINITY), 0x7f80);
    EXPECT_EQ(float_to_bf16_rne(-INFINITY), 0xff80);
    EXPECT_EQ(float_to_bf16_rne(FLT_MAX), 0x7f80) << "the largest floats overflow to Inf";
    bf16 nan = float_to_bf16_rne(NAN);
    EXPECT_TRUE(std::isnan(bf16_to_float(nan)));
    uint32_t signalling = 0x7f800001u;  // a NaN whose payload sits only in the dropped bits
    float snan;
    std::memcpy(&snan, &signalling, 4);
    EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16_rne(snan)))) << "must not become Inf";
}

TEST(BF16, RoundToNearestEvenOnRandomBitPatterns) {
    std::mt19937 rng(1);
    for (int i = 0; i < 2000000; i++) {
        uint32_t bits = rng();
        float f;
        std::memcpy(&f, &bits, 4);
        if (std::isnan(f)) continue;
        ASSERT_EQ(float_to_bf16_rne(f), reference_rne(f)) << std::hex << bits;
    }
}

TEST(BF16, StochasticRoundingIsUnbiasedAndDeterministic) {
    for (float x : {1.0f + 1.0f / 3.0f, -2.7182817f, 1e-3f, 3e-39f /* subnormal */, 123456.7f}) {
        double sum = 0.0;
        const int n = 200000;
        for (int i = 0; i < n; i++) sum += bf16_to_float(float_to_bf16_stochastic(x, rounding_bits(7, 3, 1, i)));
        double mean = sum / n;
        // Each draw is one of two neighbours one bf16 ulp apart: the standard
        // error of the mean is at most ulp / (2 sqrt(n)); allow 5 of them.
        double ulp = std::fabs(bf16_to_float((bf16)(float_to_bf16_rne(x) | 1)) - bf16_to_float((bf16)(float_to_bf16_rne(x) & ~1)));
        EXPECT_NEAR(mean, x, 5 * ulp / (2 * std::sqrt((double)n))) << x;
    }
    EXPECT_EQ(float_to_bf16_stochastic(0.3f, rounding_bits(1, 2, 3, 4)), float_to_bf16_stochastic(0.3f, rounding_bits(1, 2, 3, 4)));
    EXPECT_NE(rounding_bits(1, 2, 3, 4), rounding_bits(1, 2, 3, 5));
    EXPECT_NE(rounding_bits(1, 2, 3, 4), rounding_bits(1, 3, 3, 4));
    EXPECT_NE(rounding_bits(1, 2, 3, 4), rounding_bits(2, 2, 3, 4));
    EXPECT_EQ(float_to_bf16_stochastic(INFINITY, 0xffff), 0x7f80);
    EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16_stochastic(NAN, 0x1234))));
    EXPECT_EQ(float_to_bf16_stochastic(1.5f, 0xffff), float_to_bf16_rne(1.5f)) << "exact values never move";
}

TEST(BF16, RoundingBitsAreUniform) {
    // 16 buckets of the low 16 bits over consecutive elements: a chi-square
    // far below what a broken mix would give.
    std::vector<long> counts(16, 0);
    const int n = 160000;
    for (int i = 0; i < n; i++) counts[(rounding_bits(99, 5, 2, i) & 0xffff) >> 12]++;
    double chi2 = 0.0;
    for (long c : counts) chi2 += (c - n / 16.0) * (c - n / 16.0) / (n / 16.0);
    EXPECT_LT(chi2, 40.0) << "15 degrees of freedom: 40 is beyond the 99.9th percentile";
}

}  // namespace
}  // namespace hlat
