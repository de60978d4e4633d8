#include "trainer/files/sha256.h"

#include <fmt/format.h>
#include <openssl/evp.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>

namespace hlat {

namespace {

struct Digest {
    std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx{EVP_MD_CTX_new(), EVP_MD_CTX_free};
    Digest() { EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr); }
    void update(const void* data, size_t n) { EVP_DigestUpdate(ctx.get(), data, n); }
    std::string hex() {
        unsigned char out[EVP_MAX_MD_SIZE];
        unsigned int len = 0;
        EVP_DigestFinal_ex(ctx.get(), out, &len);
        std::string s;
        for (unsigned int i = 0; i < len; i++) s += fmt::format("{:02x}", out[i]);
        return s;
    }
};

}  // namespace

std::string sha256_hex(std::string_view bytes) {
    Digest d;
    d.update(bytes.data(), bytes.size());
    return d.hex();
}

std::string sha256_file(const std::string& path) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) throw std::runtime_error(fmt::format("cannot open {}: {}", path, std::strerror(errno)));
    Digest d;
    char buf[1 << 16];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) d.update(buf, n);
    bool failed = std::ferror(f);
    std::fclose(f);
    if (failed) throw std::runtime_error(fmt::format("cannot read {}", path));
    return d.hex();
}

}  // namespace hlat
