#include "telemetry/tensorboard.h"

#include "tensorboard_event.pb.h"

#include <boost/crc.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

namespace hlat::telemetry {
namespace fs = std::filesystem;

uint32_t masked_crc32c(const void* data, size_t size) {
    // CRC-32C (Castagnoli): reflected, init and final xor all ones.
    boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
    crc.process_bytes(data, size);
    uint32_t c = crc.checksum();
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

namespace {

bool is_event_file(const fs::path& p) { return p.filename().string().find("tfevents") != std::string::npos; }

uint32_t read_u32(const char* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);  // little-endian, as the format and this machine are
    return v;
}

// The scalar a summary value holds, if it holds one.
bool scalar_of(const tensorboard::Summary::Value& v, double* out) {
    if (v.value_case() == tensorboard::Summary::Value::kSimpleValue) return *out = v.simple_value(), true;
    if (v.value_case() != tensorboard::Summary::Value::kTensor) return false;
    const std::string& plugin = v.metadata().plugin_data().plugin_name();
    if (!plugin.empty() && plugin != "scalars") return false;
    const tensorboard::TensorProto& t = v.tensor();
    if (t.float_val_size() == 1) return *out = t.float_val(0), true;
    if (t.double_val_size() == 1) return *out = t.double_val(0), true;
    if (t.int_val_size() == 1) return *out = t.int_val(0), true;
    if (t.int64_val_size() == 1) return *out = (double)t.int64_val(0), true;
    const std::string& raw = t.tensor_content();
    if (t.dtype() == 1 && raw.size() == 4) {
        float f;
        std::memcpy(&f, raw.data(), 4);
        return *out = f, true;
    }
    if (t.dtype() == 2 && raw.size() == 8) {
        double d;
        std::memcpy(&d, raw.data(), 8);
        return *out = d, true;
    }
    return false;
}

void read_event_file(const std::string& path, const KeyMap& rename, std::vector<MetricPoint>& out) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw IngestError(fmt::format("cannot open {}", path));
    std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    size_t offset = 0;
    tensorboard::Event event;
    while (offset < data.size()) {
        auto bad = [&](const std::string& why) {
            return IngestError(fmt::format("{}: record at byte offset {}: {}", path, offset, why));
        };
        if (data.size() - offset < 12) throw bad("cut short in its header (a truncated file?)");
        uint64_t length;
        std::memcpy(&length, data.data() + offset, 8);
        if (masked_crc32c(data.data() + offset, 8) != read_u32(data.data() + offset + 8))
            throw bad("the CRC of its length does not match (a corrupt file?)");
        if (length > data.size() - offset - 12 || data.size() - offset - 12 - length < 4)
            throw bad(fmt::format("cut short: {} bytes announced, {} left (a truncated file?)", length,
                                  data.size() - offset - 12));
        const char* record = data.data() + offset + 12;
        if (masked_crc32c(record, length) != read_u32(record + length))
            throw bad("the CRC of its data does not match (a corrupt file?)");
        if (!event.ParseFromArray(record, (int)length)) throw bad("not an Event protobuf");
        if (event.step() < 0) throw bad(fmt::format("negative step {}", event.step()));
        if (event.has_summary())
            for (const auto& v : event.summary().value()) {
                double x;
                if (!scalar_of(v, &x)) continue;
                const std::string& tag = v.tag().empty() ? v.node_name() : v.tag();
                auto it = rename.find(tag);
                out.push_back({it == rename.end() ? tag : it->second, event.step(), x, event.wall_time()});
            }
        offset += 12 + length + 4;
    }
}

}  // namespace

std::vector<TensorBoardRun> read_tensorboard(const std::string& path, const KeyMap& rename) {
    std::map<std::string, std::vector<std::string>> by_folder;
    if (fs::is_directory(path)) {
        for (const auto& e : fs::recursive_directory_iterator(path))
            if (e.is_regular_file() && is_event_file(e.path())) {
                std::string folder = fs::relative(e.path().parent_path(), path).lexically_normal().string();
                by_folder[folder == "." ? "" : folder].push_back(e.path().string());
            }
        if (by_folder.empty()) throw IngestError(fmt::format("{} holds no TensorBoard event files (events.out.tfevents.*)", path));
    } else if (fs::exists(path)) {
        by_folder[""].push_back(path);
    } else {
        throw IngestError(fmt::format("cannot open {}", path));
    }
    std::vector<TensorBoardRun> runs;
    for (auto& [folder, files] : by_folder) {
        std::sort(files.begin(), files.end());  // event file names start with the writer's start time
        TensorBoardRun run{folder, files, {}};
        for (const std::string& f : files) read_event_file(f, rename, run.points);
        // Step order; of a (tag, step) written twice (a restarted writer) the later one wins.
        std::stable_sort(run.points.begin(), run.points.end(), [](const MetricPoint& a, const MetricPoint& b) {
            return a.step != b.step ? a.step < b.step : a.key < b.key;
        });
        std::vector<MetricPoint> unique;
        for (MetricPoint& p : run.points) {
            if (!unique.empty() && unique.back().step == p.step && unique.back().key == p.key) unique.back() = p;
            else unique.push_back(std::move(p));
        }
        run.points = std::move(unique);
        runs.push_back(std::move(run));
    }
    return runs;
}

}  // namespace hlat::telemetry
