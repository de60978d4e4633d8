// The store's numbers, on the file system of the folder given: the raw SQLite
// batched-insert rate into the metrics table, the Writer's sustained rate for
// the same rows (trainer-shaped: 16 keys per step), and the time to read a
// 1,000,000-point series downsampled to 2,000 buckets.
// usage: hlat_store_bench FOLDER [--small]   (prints one JSON object; --small
// writes a tenth of the rows and of the series, to check the path, not measure)
#include "telemetry/reader.h"
#include "telemetry/schema.h"
#include "telemetry/sqlite.h"
#include "telemetry/writer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

using namespace hlat::telemetry;
using Clock = std::chrono::steady_clock;

static double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

constexpr int kKeys = 16;
static int n_steps = 40000;              // 640,000 rows (a tenth with --small)
static int64_t n_long_points = 1000000;  // the downsampled series

// Best case for SQLite: one prepared INSERT, transactions of 8192 rows, WAL.
static double raw_rows_per_second(const std::string& path) {
    Database db(path, Database::Mode::Create, 5000);
    prepare_schema(db, true);
    db.exec("INSERT INTO runs(name, status, started_at) VALUES ('raw', 'running', 0)");
    // The store's foreign keys are on: each key_id must name a metric_keys row.
    for (int k = 0; k < kKeys; k++) db.exec(fmt::format("INSERT INTO metric_keys(id, name) VALUES ({0}, 'key_{0}')", k));
    Statement insert = db.prepare("INSERT INTO metrics(run_id, key_id, step, value, wall_time) VALUES (1, ?1, ?2, ?3, 0)");
    auto t0 = Clock::now();
    long rows = 0;
    for (int step = 0; step < n_steps;) {
        Transaction t(db);
        for (int i = 0; i < 8192 / kKeys && step < n_steps; i++, step++)
            for (int k = 0; k < kKeys; k++, rows++) insert.bind(1, k).bind(2, step).bind(3, 1.0 + k * step).run();
        t.commit();
    }
    return rows / seconds_since(t0);
}

static double writer_rows_per_second(const std::string& path) {
    Writer w(path);
    RunRecord r;
    r.name = "bench";
    int64_t run = w.open_run(r, false);
    std::vector<std::string> keys;
    for (int k = 0; k < kKeys; k++) keys.push_back(fmt::format("key_{}", k));
    auto t0 = Clock::now();
    for (int step = 0; step < n_steps; step++) {
        std::vector<MetricPoint> pts;
        for (int k = 0; k < kKeys; k++) pts.push_back({keys[k], step, 1.0 + k * step, 0.0});
        w.metrics(run, std::move(pts));
    }
    w.flush();
    return (double)n_steps * kKeys / seconds_since(t0);
}

static double downsample_ms(const std::string& path) {
    int64_t run;
    {
        Writer w(path);
        RunRecord r;
        r.name = "long";
        run = w.open_run(r, false);
        for (int64_t chunk = 0; chunk < n_long_points / 10000; chunk++) {
            std::vector<MetricPoint> pts;
            for (int i = 0; i < 10000; i++) {
                int64_t step = chunk * 10000 + i;
                pts.push_back({"loss", step, 2.0 + 1e-6 * (step % 977), 0.0});
            }
            w.metrics(run, std::move(pts));
        }
    }
    Reader reader(path);
    std::vector<double> times;
    size_t buckets = 0;
    for (int rep = 0; rep < 7; rep++) {
        auto t0 = Clock::now();
        buckets = reader.downsample(run, "loss", 0, n_long_points - 1, 2000).size();
        times.push_back(seconds_since(t0) * 1000.0);
    }
    std::sort(times.begin(), times.end());
    if (buckets == 0) throw StoreError("downsample returned nothing");
    return times[times.size() / 2];
}

int main(int argc, char** argv) {
    const bool small = argc == 3 && std::string(argv[2]) == "--small";
    if (argc < 2 || (argc > 2 && !small)) {
        std::fprintf(stderr, "usage: hlat_store_bench FOLDER [--small]\n");
        return 2;
    }
    if (small) n_steps /= 10, n_long_points /= 10;
    namespace fs = std::filesystem;
    fs::path dir = argv[1];
    try {
        for (const char* f : {"raw.db", "writer.db", "long.db"}) fs::remove(dir / f);
        double raw = raw_rows_per_second((dir / "raw.db").string());
        double writer = writer_rows_per_second((dir / "writer.db").string());
        double ms = downsample_ms((dir / "long.db").string());
        std::printf("%s\n", fmt::format(R"({{"raw_rows_per_s": {:.0f}, "writer_rows_per_s": {:.0f}, "writer_vs_raw": {:.3f}, "downsample_1M_to_2000_ms": {:.2f}}})",
                                        raw, writer, writer / raw, ms)
                                .c_str());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "hlat_store_bench: error: %s\n", e.what());
        return 1;
    }
    return 0;
}
