// Fuzz target: the ingest line parsers. The first byte picks the format
// (JSONL, CSV, llm.c, pattern, steploss, torchtitan, Megatron), the rest is
// the log, whose format is also detected (detect_format must not crash). Every line is parsed
// with bad lines skipped, as `hlat ingest --on-bad-line=skip` does; an
// exception other than a bad line's, or a message that is not bounded,
// escaped UTF-8, is a crash.
#include "telemetry/ingest.h"
#include "telemetry/untrusted_text.h"

#include <cstdint>
#include <cstdlib>
#include <string_view>

using namespace hlat::telemetry;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1) return 0;
    // Built once (the pattern's regex is costly), copied fresh for each input.
    static const LineParser kParsers[] = {
        {"fuzz.log", LogFormat::Jsonl}, {"fuzz.log", LogFormat::Csv}, {"fuzz.log", LogFormat::Llmc, "", {{"trl", "loss"}}},
        {"fuzz.log", LogFormat::Pattern, "step {step} loss: {loss} norm {grad_norm} {_}"},
        {"fuzz.log", LogFormat::StepLoss}, {"fuzz.log", LogFormat::Torchtitan}, {"fuzz.log", LogFormat::Megatron}};
    LineParser parser = kParsers[data[0] % 7];
    std::string_view text((const char*)data + 1, size - 1);
    try {
        detect_format("fuzz.log", text);
    } catch (const IngestError&) {  // a log no format claims: said, not a crash
    }
    for (size_t pos = 0; pos < text.size();) {
        std::optional<BadLine> bad;
        ParsedBatch batch = parser.parse_until_bad(text.substr(pos), 0.0, &bad);
        for (const MetricPoint& p : batch.points)
            if (!valid_utf8(p.key) || p.step < 0) std::abort();
        for (const VectorPoint& v : batch.vectors) {
            if (!valid_utf8(v.key) || v.step < 0 || !v.labels || v.labels->size() != v.values.size()) std::abort();
            for (const std::string& l : *v.labels)
                if (!valid_utf8(l)) std::abort();
        }
        for (const BatchIds& b : batch.batches) {
            if (b.step < 0 || b.ids.empty() || b.ids.size() > kMaxBatchIds) std::abort();
            for (const std::string& id : b.ids)
                if (id.empty() || id.size() > kMaxBatchIdBytes || !valid_utf8(id)) std::abort();
        }
        if (!bad) break;
        if (!valid_utf8(bad->message) || bad->message.size() > 1000 || bad->next == 0) std::abort();
        parser.skip_lines(1);
        pos += bad->next;
    }
    return 0;
}
