// A log's format: its names, telling it from the file's first MB, and the
// --map and batch-id records every format shares (ingest.h).
#include "telemetry/ingest.h"

#include "telemetry/ingest_record.h"

#include "telemetry/console_formats.h"
#include "telemetry/log_text.h"
#include "telemetry/untrusted_text.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>

namespace hlat::telemetry {

LogFormat format_from_name(const std::string& name) {
    if (name == "jsonl") return LogFormat::Jsonl;
    if (name == "csv") return LogFormat::Csv;
    if (name == "llmc") return LogFormat::Llmc;
    if (name == "pattern") return LogFormat::Pattern;
    if (name == "tensorboard") return LogFormat::TensorBoard;
    if (name == "steploss") return LogFormat::StepLoss;
    if (name == "torchtitan") return LogFormat::Torchtitan;
    if (name == "megatron") return LogFormat::Megatron;
    throw IngestError(fmt::format("unknown log format \"{}\" (jsonl, csv, llmc, tensorboard, steploss, torchtitan, "
                                  "megatron or pattern)",
                                  name));
}

const char* format_name(LogFormat f) {
    switch (f) {
        case LogFormat::Jsonl: return "jsonl";
        case LogFormat::Csv: return "csv";
        case LogFormat::Llmc: return "llmc";
        case LogFormat::Pattern: return "pattern";
        case LogFormat::TensorBoard: return "tensorboard";
        case LogFormat::StepLoss: return "steploss";
        case LogFormat::Torchtitan: return "torchtitan";
        case LogFormat::Megatron: return "megatron";
    }
    return "?";
}

LogFormat detect_format(const std::string& path, std::string_view head) {
    std::string_view first = head.substr(0, head.find('\n'));
    std::string_view line = trim(first);
    if (path.find("tfevents") != std::string::npos) return LogFormat::TensorBoard;
    if (line.rfind("s:", 0) == 0 && line.size() > 2 && std::isdigit((unsigned char)line[2])) return LogFormat::Llmc;
    if (line.rfind("{", 0) == 0) return LogFormat::Jsonl;
    if (!line.empty() && line.find(',') != std::string_view::npos) {
        for (std::string_view cell : split_csv(line))
            if (cell == "step") return LogFormat::Csv;
    }
    if (std::string console = console_format_of(head); !console.empty()) return format_from_name(console);
    auto ends_with = [&](const char* ext) {
        std::string_view p(path), e(ext);
        return p.size() >= e.size() && p.substr(p.size() - e.size()) == e;
    };
    if (ends_with(".jsonl") || ends_with(".json")) return LogFormat::Jsonl;
    if (ends_with(".csv")) return LogFormat::Csv;
    if (head.empty())
        throw IngestError(fmt::format("{} is empty: name its format with --format (jsonl, csv, llmc, steploss, "
                                      "torchtitan, megatron, pattern)",
                                      path));
    throw IngestError(fmt::format("{}: cannot tell its format from its first MB (first line {}); name it with --format "
                                  "(jsonl, csv, llmc, tensorboard, steploss, torchtitan, megatron, or pattern with --pattern)",
                                  path, excerpt(line, 80)));
}

KeyMap parse_key_map(const std::string& text) {
    KeyMap out;
    size_t start = 0;
    while (start <= text.size()) {
        size_t comma = text.find(',', start);
        std::string pair = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        if (!trim(pair).empty()) {
            size_t eq = pair.find('=');
            std::string from = eq == std::string::npos ? "" : std::string(trim(std::string_view(pair).substr(0, eq)));
            std::string to = eq == std::string::npos ? "" : std::string(trim(std::string_view(pair).substr(eq + 1)));
            if (from.empty() || to.empty())
                throw IngestError(fmt::format("--map \"{}\": each entry is LOG_NAME=HLAT_NAME, e.g. train_loss=loss", pair));
            out[from] = to;
        }
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return out;
}

BatchRecord batch_record(const BatchIds& batch) {
    return {batch.step, nlohmann::json{{"ids", batch.ids}}.dump(), batch.wall_time};
}

}  // namespace hlat::telemetry
