// The safetensors format: an 8-byte little-endian header length, a JSON header
// {name: {dtype, shape, data_offsets}, "__metadata__": {...}}, then raw data.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace hlat {

struct TensorOut {
    std::string name;
    std::vector<int64_t> shape;
    const float* data;              // numel(shape) floats, written as F32
    const uint16_t* bf16 = nullptr;  // or numel(shape) bf16 values, written as BF16
    size_t bytes() const;
};

// Writes tensors (in the given order) and string metadata atomically.
void save_safetensors(const std::string& path, const std::vector<TensorOut>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// A validated safetensors file held in memory. Construction checks the header
// length, the JSON, dtypes and that every tensor's bytes lie inside the file;
// errors name the file and the tensor.
class SafetensorsFile {
  public:
    explicit SafetensorsFile(const std::string& path);
    bool contains(const std::string& name) const { return tensors_.count(name) > 0; }
    std::vector<std::string> names() const;
    std::vector<int64_t> shape(const std::string& name) const;
    std::string dtype(const std::string& name) const;  // "F32", "BF16", ...
    // Copies a tensor into out as fp32 (F32 and BF16 are accepted), after
    // checking its shape equals expected_shape.
    void read(const std::string& name, const std::vector<int64_t>& expected_shape, float* out) const;
    const std::map<std::string, std::string>& metadata() const { return metadata_; }

  private:
    struct Entry {
        std::string dtype;
        std::vector<int64_t> shape;
        size_t begin, end;
    };
    const Entry& entry(const std::string& name) const;  // throws naming the file when absent
    std::string path_;
    std::vector<char> bytes_;
    size_t data_start_ = 0;
    std::map<std::string, Entry> tensors_;
    std::map<std::string, std::string> metadata_;
};

}  // namespace hlat
