// TensorBoard event files (what SummaryWriter.add_scalar writes): TFRecord
// framing (length, masked CRC-32C of the length, the record, masked CRC-32C
// of the record), each record an Event protobuf. Scalars come from
// simple_value or from a one-element float/double/int tensor. A bad CRC, a
// record cut short, a negative step or a tag the store cannot take as a key
// (check_name) is an error naming the file and byte offset.
#pragma once

#include "telemetry/ingest.h"

#include <cstdint>
#include <map>
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

// A TensorBoard log being written (`hlat ingest --follow`): each call reads
// the records whole since the last one, of every event file of a folder (new
// ones too, below it) or of one file, and returns their scalars in step order.
// A record still being written waits for the next call; a bad CRC or protobuf
// in a whole one ends the reading there: error() then names the file and byte
// offset, and the call returned the records before it.
class TensorBoardTail {
  public:
    TensorBoardTail(std::string path, KeyMap rename = {});
    std::vector<MetricPoint> read_new();
    const std::string& error() const { return error_; }

  private:
    std::string path_;
    KeyMap rename_;
    std::string error_;
    std::map<std::string, size_t> offsets_;  // by file: bytes read
};

// TFRecord's masked CRC-32C, as TensorFlow computes it.
uint32_t masked_crc32c(const void* data, size_t size);

}  // namespace hlat::telemetry
