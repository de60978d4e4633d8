// Where head h of row t of a batch element lies in a qkv-shaped array: in the
// row-major (T, QKV) layout, or head-major (NH + 2 NKV, T, HD). Both put batch
// element b at b * T * QKV. Shared by RoPE (kernels.cpp), which writes the
// head-major bf16 copy, and attention (attention.cpp), which reads it.
#pragma once

namespace hlat {

struct QkvLayout {
    long row, head;  // strides of t and h
    static QkvLayout row_major(int QKV, int HD) { return {QKV, HD}; }
    static QkvLayout head_major(int T, int HD) { return {HD, (long)T * HD}; }
};

}  // namespace hlat
