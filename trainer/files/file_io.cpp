#include "trainer/files/file_io.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string_view>

namespace hlat {

static std::runtime_error io_error(const char* what, const std::string& path) {
    return std::runtime_error(fmt::format("cannot {} {}: {}", what, path, std::strerror(errno)));
}

long file_size(const std::string& path) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) throw io_error("open", path);
    if (!S_ISREG(st.st_mode)) throw std::runtime_error(fmt::format("{} is not a regular file", path));
    return (long)st.st_size;
}

std::vector<char> read_file(const std::string& path) {
    long size = file_size(path);
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) throw io_error("open", path);
    std::vector<char> data(size);
    size_t got = size ? std::fread(data.data(), 1, size, f) : 0;
    bool failed = got != (size_t)size;
    std::fclose(f);
    if (failed) throw io_error("read", path);
    return data;
}

void write_file_atomic(const std::string& path, const std::vector<std::string_view>& parts) {
    std::string tmp = fmt::format("{}.tmp.{}", path, getpid());
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f) throw io_error("create", tmp);
    bool ok = true;
    for (std::string_view part : parts) {
        if (!part.empty() && std::fwrite(part.data(), 1, part.size(), f) != part.size()) ok = false;
    }
    ok = ok && std::fflush(f) == 0 && fsync(fileno(f)) == 0;
    int saved = errno;
    ok = (std::fclose(f) == 0) && ok;
    if (!ok) {
        errno = saved;
        std::remove(tmp.c_str());
        throw io_error("write", tmp);
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        std::remove(tmp.c_str());
        throw io_error("rename into place", path);
    }
}

}  // namespace hlat
