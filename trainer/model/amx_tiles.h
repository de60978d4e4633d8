// hlat's own products on AMX tiles (Sapphire Rapids and later), for
// attention's per-head products in the bf16 modes.
//
// Why not oneDNN's: Debian 12's oneDNN (2.6) runs a head's q k^T (512 x 64 by
// 64 x 512, config M) at 100-150 us on one core of a Xeon with AMX, 230-330
// GFLOP/s of the tiles' ~3,700; this kernel takes 32 us for the visible half
// (the causal mask skips the key blocks no query of a block sees), and the
// same bits: both sum each 32-wide chunk of K in one tile multiply, chunks in
// order from the first, and scale the sums once at the end (measured against
// oneDNN over every shape the tests run).
#pragma once

#include "trainer/model/bf16.h"

namespace hlat {

// Whether this CPU has AMX's bf16 tile multiply and the kernel lets this
// process use it (Linux asks each process to request the tile state once;
// this does, the first time it is asked).
bool amx_tiles_usable();

// Eight tiles of 16 rows x 64 bytes (palette 1) on the calling thread, and
// the tiles handed back: around every use, since oneDNN configures its own.
void configure_amx_tiles();
void release_amx_tiles();

// The shapes causal_tile_product takes: every dimension a multiple of 32.
inline bool fits_tiles(int M, int N, int K) { return M % 32 == 0 && N % 32 == 0 && K % 32 == 0; }

// C (M x N, leading dimension ldc) = alpha * A (M x K, lda) @ op(B), fp32 sums
// of bf16 products, under the causal mask with `lookahead` (row i of A sees
// index j <= i + lookahead of the other dimension):
//  - trans_b: op(B) = B^T, B N x K (ldb): the scores, q k^T. Column blocks of
//    32 that no row of a 32-row block sees are not computed, and C's entries
//    there are left as they were.
//  - !trans_b: op(B) = B, B K x N (ldb): p v. A's entries past each row's
//    visible keys must be zero (they are probabilities there); the sums for a
//    block of 32 rows stop after the chunk of 32 holding its last visible key.
// M, N, K multiples of 32 (fits_tiles). Runs on the calling thread; needs
// amx_tiles_usable().
void causal_tile_product(bool trans_b, int M, int N, int K, float alpha, const bf16* A, int lda, const bf16* B,
                         int ldb, float* C, int ldc, int lookahead);

// C (M x N, ldc) += A^T @ B, fp32 sums of bf16 products: A K x M (lda), B
// K x N (ldb), A zero past each row's visible index (row r sees j <= r +
// lookahead, as above): the transposed products of attention's backward, dV
// += P^T dO and dK += dS^T Q. The sums for a block of 32 columns of A start
// at the chunk of 32 rows holding its first visible row: the same bits as
// oneDNN's A^T B into a dense block, then added to C, where B is finite (the
// rows skipped hold no 0 x Inf; one core, 512 x 512 by 512 x 64: 32-37 us,
// oneDNN's 58-81 over the whole matrix). Without accumulate C is
// not read: the bits of adding to a C of zeros. M, N, K multiples of 32; on
// the calling thread; needs amx_tiles_usable().
void causal_tile_product_transposed(int M, int N, int K, const bf16* A, int lda, const bf16* B, int ldb, float* C,
                                    int ldc, int lookahead, bool accumulate);

}  // namespace hlat
