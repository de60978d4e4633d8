#include "trainer/files/safetensors.h"

#include "trainer/files/file_io.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <stdexcept>

namespace hlat {

using json = nlohmann::json;

static int64_t numel(const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

size_t TensorOut::bytes() const { return numel(shape) * (bf16 ? 2 : 4); }

void save_safetensors(const std::string& path, const std::vector<TensorOut>& tensors,
                      const std::map<std::string, std::string>& metadata) {
    json header = json::object();
    if (!metadata.empty()) header["__metadata__"] = metadata;
    size_t offset = 0;
    for (const TensorOut& t : tensors) {
        size_t bytes = t.bytes();
        header[t.name] = {{"dtype", t.bf16 ? "BF16" : "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
        offset += bytes;
    }
    std::string text = header.dump();
    // Pad the header with spaces so the data starts 8-byte aligned, as the format recommends.
    while ((8 + text.size()) % 8) text += ' ';
    uint64_t len = text.size();
    char len_bytes[8];
    for (int i = 0; i < 8; i++) len_bytes[i] = (char)((len >> (8 * i)) & 0xff);
    std::vector<std::string_view> parts = {{len_bytes, 8}, text};
    for (const TensorOut& t : tensors)
        parts.emplace_back(t.bf16 ? (const char*)t.bf16 : (const char*)t.data, t.bytes());
    write_file_atomic(path, parts);
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path), bytes_(read_file(path)) {
    auto bad = [&](const std::string& why) {
        return std::runtime_error(fmt::format("{} is not a valid safetensors file: {}", path, why));
    };
    if (bytes_.size() < 8) throw bad("shorter than its 8-byte header length");
    uint64_t len = 0;
    for (int i = 0; i < 8; i++) len |= (uint64_t)(unsigned char)bytes_[i] << (8 * i);
    if (len > bytes_.size() - 8) throw bad(fmt::format("header length {} runs past the end", len));
    data_start_ = 8 + len;
    json header;
    try {
        header = json::parse(bytes_.begin() + 8, bytes_.begin() + 8 + len);
    } catch (const json::exception& e) {  // parse_error, or out_of_range for 1e400
        throw bad(fmt::format("header is not JSON ({})", e.what()));
    }
    if (!header.is_object()) throw bad("header is not a JSON object");
    size_t data_size = bytes_.size() - data_start_;
    for (auto it = header.begin(); it != header.end(); ++it) {
        if (it.key() == "__metadata__") {
            if (!it->is_object()) throw bad("__metadata__ is not an object");
            for (auto m = it->begin(); m != it->end(); ++m)
                if (m->is_string()) metadata_[m.key()] = m->get<std::string>();
            continue;
        }
        const json& t = *it;
        try {
            Entry e;
            e.dtype = t.at("dtype").get<std::string>();
            e.shape = t.at("shape").get<std::vector<int64_t>>();
            auto off = t.at("data_offsets").get<std::vector<size_t>>();
            if (off.size() != 2 || off[0] > off[1] || off[1] > data_size)
                throw bad(fmt::format("tensor {} has data offsets outside the file", it.key()));
            e.begin = off[0];
            e.end = off[1];
            size_t width = e.dtype == "F32" ? 4 : e.dtype == "BF16" ? 2 : 0;
            if (width && (size_t)numel(e.shape) * width != e.end - e.begin)
                throw bad(fmt::format("tensor {} has {} bytes for shape [{}]", it.key(),
                                      e.end - e.begin, fmt::join(e.shape, ", ")));
            tensors_[it.key()] = e;
        } catch (const json::exception& ex) {
            throw bad(fmt::format("tensor {} has a malformed entry ({})", it.key(), ex.what()));
        }
    }
}

std::vector<std::string> SafetensorsFile::names() const {
    std::vector<std::string> out;
    for (auto& [name, e] : tensors_) out.push_back(name);
    return out;
}

const SafetensorsFile::Entry& SafetensorsFile::entry(const std::string& name) const {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) throw std::runtime_error(fmt::format("{} has no tensor {}", path_, name));
    return it->second;
}

std::vector<int64_t> SafetensorsFile::shape(const std::string& name) const { return entry(name).shape; }

std::string SafetensorsFile::dtype(const std::string& name) const { return entry(name).dtype; }

void SafetensorsFile::read(const std::string& name, const std::vector<int64_t>& expected_shape,
                           float* out) const {
    const Entry& e = entry(name);
    if (e.shape != expected_shape)
        throw std::runtime_error(fmt::format("{}: tensor {} has shape [{}], expected [{}]", path_, name,
                                             fmt::join(e.shape, ", "), fmt::join(expected_shape, ", ")));
    const char* src = bytes_.data() + data_start_ + e.begin;
    int64_t n = numel(e.shape);
    if (e.dtype == "F32") {
        std::memcpy(out, src, n * sizeof(float));
    } else if (e.dtype == "BF16") {
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            std::memcpy(&h, src + 2 * i, 2);
            uint32_t bits = (uint32_t)h << 16;
            std::memcpy(out + i, &bits, 4);
        }
    } else {
        throw std::runtime_error(fmt::format("{}: tensor {} has dtype {}; F32 or BF16 expected", path_,
                                             name, e.dtype));
    }
}

}  // namespace hlat
