#include "telemetry/tensorboard.h"

#include "telemetry/tensorboard_event.h"
#include "telemetry/untrusted_text.h"

#include <boost/crc.hpp>
#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
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

// The Event decoder, loaded once. RTLD_DEEPBIND makes the module and the
// libprotobuf-lite it pulls in resolve their symbols among themselves first,
// never against the copy inside libsentencepiece (tensorboard_event.h). A
// build without SentencePiece (the fuzz targets: sanitizers refuse
// RTLD_DEEPBIND) links the decoder in and defines no module.
decltype(&hlat_tb_decode_event) event_decoder() {
#ifndef HLAT_TENSORBOARD_MODULE
    return &hlat_tb_decode_event;
#else
    static decltype(&hlat_tb_decode_event) decode = [] {
        void* module = dlopen(HLAT_TENSORBOARD_MODULE, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
        if (!module)
            throw IngestError(fmt::format("cannot read TensorBoard files: the decoder module did not load ({})",
                                          dlerror()));
        return reinterpret_cast<decltype(&hlat_tb_decode_event)>(dlsym(module, "hlat_tb_decode_event"));
    }();
    return decode;
#endif
}

using EventScalars = std::vector<std::pair<std::string, double>>;  // (tag, value) of one event

void collect_scalar(void* ctx, const char* tag, size_t tag_size, double value) {
    static_cast<EventScalars*>(ctx)->emplace_back(std::string(tag, tag_size), value);
}

// The records of `data` from `offset` on, their scalars into `out`; returns
// where the records read end. With `partial_ok` (a file still being written)
// a record not yet whole ends the reading there; otherwise it is an error, as
// is a bad CRC or protobuf anywhere.
size_t read_records(const std::string& data, size_t offset, const std::string& path, size_t file_offset,
                    const KeyMap& rename, std::vector<MetricPoint>& out, bool partial_ok) {
    auto decode = event_decoder();
    EventScalars scalars;
    while (offset < data.size()) {
        auto bad = [&](const std::string& why) {
            return IngestError(fmt::format("{}: record at byte offset {}: {}", path, file_offset + offset, why));
        };
        if (data.size() - offset < 12) {
            if (partial_ok) break;
            throw bad("cut short in its header (a truncated file?)");
        }
        uint64_t length;
        std::memcpy(&length, data.data() + offset, 8);
        if (masked_crc32c(data.data() + offset, 8) != read_u32(data.data() + offset + 8))
            throw bad("the CRC of its length does not match (a corrupt file?)");
        if (length > data.size() - offset - 12 || data.size() - offset - 12 - length < 4) {
            if (partial_ok) break;
            throw bad(fmt::format("cut short: {} bytes announced, {} left (a truncated file?)", length,
                                  data.size() - offset - 12));
        }
        const char* record = data.data() + offset + 12;
        if (masked_crc32c(record, length) != read_u32(record + length))
            throw bad("the CRC of its data does not match (a corrupt file?)");
        int64_t step;
        double wall_time;
        scalars.clear();
        if (decode(record, length, &step, &wall_time, collect_scalar, &scalars) != 0) throw bad("not an Event protobuf");
        if (!valid_step((double)step)) throw bad(fmt::format("step {} is not one (0 to 9e15)", step));
        for (auto& [tag, x] : scalars) {
            auto it = rename.find(tag);
            const std::string& key = it == rename.end() ? tag : it->second;
            try {
                check_name(key, "tag");  // the store's rule for a key, before anything is stored
            } catch (const std::invalid_argument& e) {
                throw bad(e.what());
            }
            out.push_back({key, step, x, wall_time});
        }
        offset += 12 + length + 4;
    }
    return offset;
}

std::string read_from(const std::string& path, size_t offset) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw IngestError(fmt::format("cannot open {}", path));
    in.seekg((std::streamoff)offset);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void read_event_file(const std::string& path, const KeyMap& rename, std::vector<MetricPoint>& out) {
    read_records(read_from(path, 0), 0, path, 0, rename, out, false);
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

TensorBoardTail::TensorBoardTail(std::string path, KeyMap rename) : path_(std::move(path)), rename_(std::move(rename)) {
    if (!fs::exists(path_)) throw IngestError(fmt::format("cannot open {}", path_));
}

std::vector<MetricPoint> TensorBoardTail::read_new() {
    std::vector<std::string> files;
    if (fs::is_directory(path_)) {
        std::error_code ec;  // a folder the writer is still making: read again at the next call
        for (auto it = fs::recursive_directory_iterator(path_, ec); !ec && it != fs::recursive_directory_iterator();
             it.increment(ec))
            if (it->is_regular_file() && is_event_file(it->path())) files.push_back(it->path().string());
        std::sort(files.begin(), files.end());  // by the writer's start time, as the import reads them
    } else {
        files.push_back(path_);
    }
    std::vector<MetricPoint> out;
    try {
        for (const std::string& f : files) {
            size_t& at = offsets_[f];
            at += read_records(read_from(f, at), 0, f, at, rename_, out, true);
        }
    } catch (const IngestError& e) {
        error_ = e.what();  // the records before it are returned: a follower stores them
    }
    std::stable_sort(out.begin(), out.end(), [](const MetricPoint& a, const MetricPoint& b) { return a.step < b.step; });
    return out;
}

}  // namespace hlat::telemetry
