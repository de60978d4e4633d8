// A heatmap's cost (issue 35, "Must show" 4): a statistic of 64 elements over
// 100,000 steps written with the Writer, then read as 2,000 buckets, both by
// Reader::heatmap and as the whole HTTP reply built by the Api in-process
// (query, reduction and JSON). Median of several runs each, after one warm-up
// read (the file in the page cache, as on a server that has been up a while).
// usage: hlat_heatmap_bench FOLDER [REPEATS]   (prints one JSON object)
#include "telemetry/reader.h"
#include "telemetry/writer.h"
#include "web/api.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

using namespace hlat;
using Clock = std::chrono::steady_clock;

constexpr int kElements = 64;
constexpr int64_t kSteps = 100000;
constexpr int kBuckets = 2000;

static double median_ms(int repeats, const std::function<void()>& f) {
    f();  // warm-up
    std::vector<double> ms;
    for (int i = 0; i < repeats; i++) {
        auto t0 = Clock::now();
        f();
        ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

// 64 layers' residual RMS, slowly growing, one layer jumping for 40 steps.
static double write_run(const std::string& path) {
    auto t0 = Clock::now();
    telemetry::Writer w(path);
    telemetry::RunRecord r;
    r.name = "heat";
    const int64_t run = w.open_run(r, false);
    auto labels = std::make_shared<std::vector<std::string>>();
    for (int l = 0; l < kElements; l++) labels->push_back(fmt::format("layers.{}", l));
    for (int64_t chunk = 0; chunk < kSteps; chunk += 1000) {
        std::vector<telemetry::VectorPoint> pts;
        for (int64_t step = chunk; step < chunk + 1000; step++) {
            std::vector<float> v(kElements);
            for (int l = 0; l < kElements; l++)
                v[l] = 1.0f + 0.01f * l + 1e-5f * (float)step + (l == 17 && step / 40 == 1500 ? 50.0f : 0.0f);
            pts.push_back({"residual_rms", step, std::move(v), 1.7e9 + (double)step, step == 0 ? labels : nullptr});
        }
        w.vectors(run, std::move(pts));
    }
    w.flush();
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: hlat_heatmap_bench FOLDER [REPEATS]\n");
        return 2;
    }
    const int repeats = argc > 2 ? std::max(1, std::atoi(argv[2])) : 9;
    const std::string path = (std::filesystem::path(argv[1]) / "heatmap.db").string();
    try {
        std::filesystem::remove(path);
        const double write_s = write_run(path);
        telemetry::Reader reader(path);
        const int64_t run = 1;
        size_t buckets = 0;
        const double reader_ms = median_ms(repeats, [&] {
            buckets = reader.heatmap(run, "residual_rms", 0, kSteps, kBuckets, telemetry::Reduce::Max).buckets();
        });
        web::Api api(path, "");
        web::Request q{"GET", "/api/v1/runs/heat/heatmap", {{"key", "residual_rms"}, {"buckets", "2000"}}, "", "", ""};
        size_t bytes = 0;
        int status = 0;
        const double http_ms = median_ms(repeats, [&] {
            web::Response reply = api.handle(q);
            status = reply.status;
            bytes = web::whole_body(reply).size();
        });
        if (buckets == 0 || status != 200) throw std::runtime_error(fmt::format("no heatmap (HTTP {})", status));
        std::printf("%s\n", fmt::format(R"({{"heatmap_elements": {}, "heatmap_steps": {}, "heatmap_buckets": {}, )"
                                        R"("heatmap_write_s": {:.2f}, "heatmap_reader_ms": {:.1f}, )"
                                        R"("heatmap_http_ms": {:.1f}, "heatmap_reply_bytes": {}, "heatmap_repeats": {}}})",
                                        kElements, kSteps, buckets, write_s, reader_ms, http_ms, bytes, repeats)
                                .c_str());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "hlat_heatmap_bench: error: %s\n", e.what());
        return 1;
    }
    return 0;
}
