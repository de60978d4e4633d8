// Checked file helpers: every failure throws std::runtime_error naming the file,
// what was being done, and the system's reason.
#pragma once

#include <cstdio>
#include <string_view>
#include <string>
#include <vector>

namespace hlat {

// Whole file into memory.
std::vector<char> read_file(const std::string& path);
// Size in bytes; throws if the file is missing or unreadable.
long file_size(const std::string& path);
// Writes bytes to path atomically: a temporary file in the same folder, fsync,
// then rename, so a crash never leaves a half-written file under the name.
void write_file_atomic(const std::string& path, const std::vector<std::string_view>& parts);

}  // namespace hlat
