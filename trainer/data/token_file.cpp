#include "trainer/data/token_file.h"

#include "trainer/files/file_io.h"

#include <fmt/format.h>

#include <cstring>
#include <stdexcept>

namespace hlat {

TokenFile::TokenFile(const std::string& path, const std::string& dtype, int vocab_size, long min_tokens, int rank,
                     int world)
    : rank_(rank), world_(world) {
    int width = dtype == "uint16" ? 2 : dtype == "uint32" ? 4 : 0;
    if (!width) throw std::runtime_error(fmt::format("token dtype {} is not uint16 or uint32", dtype));
    long bytes = file_size(path);
    if (bytes % width != 0)
        throw std::runtime_error(fmt::format(
            "token file {} has {} bytes, not a multiple of {} ({}); truncated or wrong dtype?", path,
            bytes, width, dtype));
    long n = bytes / width;
    if (n < min_tokens)
        throw std::runtime_error(fmt::format("token file {} holds {} tokens; at least {} are needed",
                                             path, n, min_tokens));
    std::vector<char> raw = read_file(path);
    tokens_.resize(n);
    for (long i = 0; i < n; i++) {
        uint32_t id;
        if (width == 2) {
            uint16_t v;
            std::memcpy(&v, raw.data() + 2 * i, 2);
            id = v;
        } else {
            std::memcpy(&id, raw.data() + 4 * i, 4);
        }
        if (id >= (uint32_t)vocab_size)
            throw std::runtime_error(fmt::format(
                "token file {}: token {} at position {} is outside the vocabulary (size {})", path, id,
                i, vocab_size));
        tokens_[i] = (int32_t)id;
    }
}

void TokenFile::next_batch(int32_t* inputs, int32_t* targets, int B, int T) {
    const long windows = (size() - 1) / T;  // whole windows of T+1 tokens in one pass
    for (int b = 0; b < B; b++) {
        long k = next_window_ + (long)rank_ * B + b;
        const int32_t* window = tokens_.data() + (k % windows) * T;
        std::memcpy(inputs + (long)b * T, window, sizeof(int32_t) * T);
        std::memcpy(targets + (long)b * T, window + 1, sizeof(int32_t) * T);
    }
    next_window_ += (long)world_ * B;
}

}  // namespace hlat
