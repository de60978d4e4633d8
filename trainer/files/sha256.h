// SHA-256 (OpenSSL) of bytes and files, as lowercase hex.
#pragma once

#include <string>
#include <string_view>

namespace hlat {

std::string sha256_hex(std::string_view bytes);
// Streams the file; throws std::runtime_error naming it if it cannot be read.
std::string sha256_file(const std::string& path);

}  // namespace hlat
