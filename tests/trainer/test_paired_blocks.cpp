// hlat's packing of a weight into oneDNN's paired-block layout, against the
// layout's definition element by element: every value of W^T and of W lands
// where PairedBlockLayout::offset says, rounded to nearest even as
// bf16_narrow rounds it, and every padding element is zero. Odd shapes, both
// orders of blocks, blocks smaller and larger than the matrix, values that
// round at a tie, denormals, Inf and NaN, on several thread counts (the
// strips are shared among threads).
#include "test_util.h"
#include "trainer/model/paired_blocks.h"

#include <fmt/format.h>
#include <omp.h>

#include <bit>
#include <cmath>
#include <limits>
#include <vector>

namespace hlat {
namespace {

// The dense layout of B (K, N) in k_block x n_block blocks, K blocks next to
// each other (k_inner) or N blocks, as oneDNN lays them out.
PairedBlockLayout dense_layout(long K, long N, int k_block, int n_block, bool k_inner) {
    PairedBlockLayout l;
    l.k_block = k_block;
    l.n_block = n_block;
    l.padded_k = (K + k_block - 1) / k_block * k_block;
    l.padded_n = (N + n_block - 1) / n_block * n_block;
    const long block = (long)k_block * n_block;
    l.k_stride = k_inner ? block : l.padded_n / n_block * block;
    l.n_stride = k_inner ? l.padded_k / k_block * block : block;
    return l;
}

// B (K, N) given by element, written where the layout says; NaN-patterned
// elsewhere, so that a packer leaving any element unwritten shows.
template <typename Element>
std::vector<bf16> expected_packing(const PairedBlockLayout& l, long K, long N, Element b) {
    std::vector<bf16> out(l.padded_k * l.padded_n, bf16(0x7fc1));
    for (long k = 0; k < l.padded_k; k++)
        for (long n = 0; n < l.padded_n; n++)
            out[l.offset(k, n)] = k < K && n < N ? float_to_bf16_rne(b(k, n)) : bf16(0);
    return out;
}

// Random weights with the values rounding must get right put among them.
std::vector<float> weights_with_specials(int OC, int IC, unsigned seed) {
    std::vector<float> w = test::random_vector((long)OC * IC, seed);
    const float specials[] = {1.0f + std::ldexp(1.0f, -8),  // a tie, rounds down to even
                              1.0f + 3 * std::ldexp(1.0f, -8),  // a tie, rounds up to even
                              std::ldexp(1.0f, -130),  // denormal
                              -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::infinity(),
                              std::numeric_limits<float>::quiet_NaN(),
                              std::bit_cast<float>(0x7f800001u),  // signalling NaN: quieted
                              std::bit_cast<float>(0xffc00000u),  // negative NaN: the sign kept
                              std::bit_cast<float>(0x7fffffffu),  // every payload bit: no carry into the sign
                              std::numeric_limits<float>::max(), -0.0f};
    // Spread over the whole matrix, so that every kind of block (inside, on
    // an edge, in the padding's rows) rounds some of them.
    for (size_t i = 0; i * 7 < w.size(); i++) w[i * 7] = specials[i % std::size(specials)];
    return w;
}

TEST(PairedBlocks, EveryValueLandsWhereTheLayoutSaysAndThePaddingIsZero) {
    struct Blocks {
        int t_k, t_n, n_k, n_n;
        bool k_inner;
    };
    // oneDNN's on AMX (32 x 64, K blocks inner); 32 x 16 and 32 x 48, which
    // the AVX-512 forms take too; and shapes they do not, whose strips (the
    // least common multiple) differ.
    const Blocks blockings[] = {
        {32, 64, 32, 64, true}, {32, 16, 32, 48, false}, {4, 16, 8, 48, false}, {2, 3, 6, 5, true}};
    const std::pair<int, int> shapes[] = {{1, 1}, {45, 130}, {70, 33}, {64, 64}, {130, 67}, {8, 200}, {200, 160}};
    const int saved_threads = omp_get_max_threads();
    for (const Blocks& bl : blockings)
        for (auto [OC, IC] : shapes)
            for (int threads : {1, 3}) {
                SCOPED_TRACE(fmt::format("blocks {}x{} and {}x{}, OC {} IC {}, {} threads", bl.t_k, bl.t_n, bl.n_k,
                                         bl.n_n, OC, IC, threads));
                const std::vector<float> w = weights_with_specials(OC, IC, OC * 1000 + IC);
                const PairedBlockLayout t = dense_layout(IC, OC, bl.t_k, bl.t_n, bl.k_inner);
                const PairedBlockLayout n = dense_layout(OC, IC, bl.n_k, bl.n_n, !bl.k_inner);
                std::vector<bf16> transposed(t.padded_k * t.padded_n, bf16(0x7fc1));
                std::vector<bf16> natural(n.padded_k * n.padded_n, bf16(0x7fc1));
                omp_set_num_threads(threads);
                pack_weight_pair(transposed.data(), t, natural.data(), n, w.data(), OC, IC);
                omp_set_num_threads(saved_threads);
                const auto w_t = [&](long k, long c) { return w[c * IC + k]; };  // W^T (IC, OC)
                const auto w_n = [&](long k, long c) { return w[k * IC + c]; };  // W (OC, IC)
                EXPECT_EQ(transposed, expected_packing(t, IC, OC, w_t)) << "W^T";
                EXPECT_EQ(natural, expected_packing(n, OC, IC, w_n)) << "W";
            }
}

// The one worked case: a 3 x 2 W, blocks of 2 x 2, so every pair and every
// padding element can be named.
TEST(PairedBlocks, ASmallWeightPacksAsWrittenOut) {
    const std::vector<float> w = {1, 2,  //
                                  3, 4,  //
                                  5, 6};
    const PairedBlockLayout t = dense_layout(2, 3, 2, 2, true), n = dense_layout(3, 2, 2, 2, true);
    std::vector<bf16> transposed(t.padded_k * t.padded_n), natural(n.padded_k * n.padded_n);
    pack_weight_pair(transposed.data(), t, natural.data(), n, w.data(), 3, 2);
    const auto b = [](float x) { return float_to_bf16_rne(x); };
    // W^T = [[1 3 5] [2 4 6]], padded to 2 x 4: block (0, 0) holds columns 0-1
    // as pairs (1 2) (3 4), block (0, 1) holds (5 6) and the padding (0 0).
    EXPECT_EQ(transposed, (std::vector<bf16>{b(1), b(2), b(3), b(4), b(5), b(6), 0, 0}));
    // W = [[1 2] [3 4] [5 6]], padded to 4 x 2: block (0, 0) pairs rows 0-1,
    // block (1, 0) row 2 with the padding row.
    EXPECT_EQ(natural, (std::vector<bf16>{b(1), b(3), b(2), b(4), b(5), 0, b(6), 0}));
}

}  // namespace
}  // namespace hlat
