// TensorBoard event files (what SummaryWriter.add_scalar writes): TFRecord
// framing (length, masked CRC-32C of the length, the record, masked CRC-32C
// of the record), each record an Event protobuf. Scalars come from
// simple_value or from a one-element float/double/int tensor. A bad CRC, a
// record cut short, a negative step or a tag the store cannot take as a key
// (check_name) is an error naming the file and byte offset.
#pragma once

#include "telemetry/ingest.h"

#include <cstdint>
#include <string>
#include <vector>

namespace hlat::telemetry {

// The scalars of one TensorBoard run: every event file in one folder.
struct TensorBoardRun {
    std::string folder;  // relative to the log directory ("" for the directory itself)
    std::vector<std::string> files;
    std::vector<MetricPoint> points;  // in step order; a (tag, step) written twice keeps the later value
};

// A single event file, or a log directory: each folder below it that holds
// event files (events.out.tfevents.*) is a run, in name order. Throws
// IngestError (bad framing, bad CRC, bad protobuf, no event files).
std::vector<TensorBoardRun> read_tensorboard(const std::string& path, const KeyMap& rename = {});

// TFRecord's masked CRC-32C, as TensorFlow computes it.
uint32_t masked_crc32c(const void* data, size_t size);

}  // namespace hlat::telemetry
