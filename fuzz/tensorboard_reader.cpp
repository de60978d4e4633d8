// Fuzz target: the TensorBoard event-file reader. Random bytes almost never
// pass a TFRecord's CRCs, so the input is a list of record payloads (each a
// 2-byte little-endian length, then that many bytes) that this target frames
// with correct CRCs; the first byte can then flip one byte of the framed file
// or cut it short, so the framing checks are fuzzed too. Reading must either
// return points whose keys are names the store accepts and whose steps are
// valid (0 to 9e15, as every format's), or throw IngestError: anything else is a crash.
#include "telemetry/ingest.h"
#include "telemetry/tensorboard.h"
#include "telemetry/untrusted_text.h"

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

using namespace hlat::telemetry;

namespace {

std::string framed(const uint8_t* data, size_t size) {
    std::string file;
    for (size_t pos = 0; pos + 2 <= size;) {
        size_t length = std::min<size_t>(data[pos] | (data[pos + 1] << 8), size - pos - 2);
        std::string payload((const char*)data + pos + 2, length);
        pos += 2 + length;
        uint64_t length64 = length;
        char header[8];
        std::memcpy(header, &length64, 8);
        uint32_t header_crc = masked_crc32c(header, 8), payload_crc = masked_crc32c(payload.data(), length);
        file.append(header, 8).append((const char*)&header_crc, 4).append(payload).append((const char*)&payload_crc, 4);
    }
    return file;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 3) return 0;
    static const std::string path = "/tmp/hlat_fuzz_" + std::to_string(getpid()) + ".tfevents";
    const uint8_t damage = data[0];
    const size_t where = data[1] | (data[2] << 8);  // anywhere in a file of up to 64 KB
    std::string file = framed(data + 3, size - 3);
    if (!file.empty() && (damage & 1)) file[where % file.size()] ^= (char)(1 + (damage >> 1));
    if (!file.empty() && (damage & 2)) file.resize(file.size() - 1 - where % file.size());
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(file.data(), (std::streamsize)file.size());
    try {
        for (const TensorBoardRun& run : read_tensorboard(path))
            for (const MetricPoint& p : run.points) {
                check_name(p.key, "metric key");  // what every other reader checks before storing
                if (!valid_step((double)p.step)) std::abort();
            }
    } catch (const IngestError&) {
        // a clear refusal naming the file and offset: what bad input should get
    }
    return 0;
}
