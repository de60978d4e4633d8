#include "session/divergence.h"

#include <fmt/format.h>

#include <cmath>

namespace hlat::session {

namespace {

constexpr int64_t kChunk = 4096;  // points read at a time, walking back from the newest

// The first step of the non-finite stretch that ends `key`'s series.
std::optional<int64_t> trailing_nonfinite(telemetry::Reader& reader, int64_t run, const std::string& key) {
    std::optional<int64_t> last = reader.last_step(run, key);
    if (!last) return std::nullopt;
    std::optional<int64_t> since;
    for (int64_t to = *last; to >= 0; to -= kChunk) {
        std::vector<telemetry::SeriesPoint> points = reader.series(run, key, std::max<int64_t>(0, to - kChunk + 1), to);
        for (auto p = points.rbegin(); p != points.rend(); ++p) {
            if (std::isfinite(p->value)) return since;
            since = p->step;
        }
    }
    return since;
}

}  // namespace

std::optional<int64_t> nonfinite_since(telemetry::Reader& reader, int64_t run) {
    std::optional<int64_t> loss = trailing_nonfinite(reader, run, "loss");
    std::optional<int64_t> grad = trailing_nonfinite(reader, run, "grad_norm");
    if (loss && grad) return std::min(*loss, *grad);
    return loss ? loss : grad;
}

std::string ending_status(telemetry::Reader& reader, int64_t run, const std::string& status, std::string& detail) {
    if (status != "finished" && status != "stopped" && status != "stale") return status;
    std::optional<int64_t> since = nonfinite_since(reader, run);
    if (!since) return status;
    detail = fmt::format("{}{}diverged: the training loss or gradient norm is non-finite from step {} to the end",
                         detail, detail.empty() ? "" : "; ", *since);
    return "diverged";
}

}  // namespace hlat::session
