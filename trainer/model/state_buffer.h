// One optimizer state buffer (a moment, Kahan's compensation) held at the
// width its precision mode keeps it in: fp32, or bf16 in the pure bf16 modes,
// 2 bytes an element, so the bytes a run allocates are the bytes its format
// says. Checkpoints, ZeRO-1 gathers and tests see fp32 values either way:
// widening a bf16 is exact, and narrowing a bf16 value back is too.
#pragma once

#include "trainer/model/aligned.h"
#include "trainer/model/bf16.h"

#include <vector>

namespace hlat {

class StateBuffer {
  public:
    StateBuffer(long n, bool bf16) : is_bf16_(bf16) {
        if (bf16)
            b16_.assign(n, 0);
        else
            f32_.assign(n, 0.0f);
    }
    bool is_bf16() const { return is_bf16_; }
    long size() const { return is_bf16_ ? (long)b16_.size() : (long)f32_.size(); }
    long bytes() const { return size() * (is_bf16_ ? 2 : 4); }
    float* f32() { return f32_.data(); }
    bf16* b16() { return b16_.data(); }
    const bf16* b16() const { return b16_.data(); }
    const float* f32() const { return f32_.data(); }

    float at(long i) const { return is_bf16_ ? bf16_to_float(b16_[i]) : f32_[i]; }
    // The values as fp32 (a copy).
    std::vector<float> to_float() const {
        if (!is_bf16_) return std::vector<float>(f32_.begin(), f32_.end());
        std::vector<float> out(b16_.size());
        for (size_t i = 0; i < out.size(); i++) out[i] = bf16_to_float(b16_[i]);
        return out;
    }
    // Sets every element from x (size() floats), rounding to nearest in bf16:
    // exact for values that came from a bf16 buffer.
    void assign(const float* x) {
        if (!is_bf16_) {
            f32_.assign(x, x + f32_.size());
            return;
        }
        for (size_t i = 0; i < b16_.size(); i++) b16_[i] = float_to_bf16_rne(x[i]);
    }

  private:
    bool is_bf16_;
    AlignedVector<float> f32_;
    AlignedVector<bf16> b16_;
};

}  // namespace hlat
