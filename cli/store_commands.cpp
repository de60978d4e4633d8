// hlat runs (list the runs of a store) and hlat ingest (import another
// trainer's JSONL or CSV log, optionally following it as it grows).
#include "cli/commands.h"
#include "cli/options.h"
#include "telemetry/ingest.h"
#include "telemetry/reader.h"
#include "telemetry/writer.h"

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <ctime>
#include <fstream>
#include <iostream>
#include <thread>

namespace hlat::cli {
namespace po = boost::program_options;
using namespace hlat::telemetry;

namespace {

std::string format_number(double v, const char* fmt_spec) {
    if (std::isnan(v)) return "-";
    return fmt::format(fmt::runtime(fmt_spec), v);
}

std::string format_time(double t) {
    if (t <= 0) return "-";
    std::time_t s = (std::time_t)t;
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", std::localtime(&s));
    return buf;
}

volatile std::sig_atomic_t g_ingest_stop = 0;
extern "C" void stop_following(int) { g_ingest_stop = 1; }

}  // namespace

int runs_command(int argc, char** argv) {
    po::options_description opts("hlat runs options");
    opts.add_options()("help,h", "print this help")(
        "store", po::value<std::string>()->default_value("runs/hlat.db"), "telemetry store")(
        "json", "one JSON object per run instead of the table (uptime with its training and wall seconds)");
    auto parsed = parse_options(argc, argv, opts, "usage: hlat runs [--store FILE] [--json]\n\nLists the runs of a store: status, steps, last loss, tokens, "
                     "uptime, alerts.");
    if (!parsed) return 0;
    const po::variables_map& vm = *parsed;
    Reader reader(vm["store"].as<std::string>());
    std::vector<RunSummary> runs = reader.runs();
    if (vm.count("json")) {
        auto number = [](double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); };
        for (const RunSummary& r : runs)
            fmt::print("{}\n", nlohmann::json{{"name", r.run.name},
                                              {"status", r.run.status},
                                              {"steps", r.last_step + 1},
                                              {"last_loss", number(r.last_loss)},
                                              {"tokens", number(r.tokens_seen)},
                                              {"alerts", r.alerts},
                                              {"uptime", {{"ratio", r.uptime.ratio},
                                                          {"training_seconds", r.uptime.training_seconds},
                                                          {"wall_seconds", r.uptime.wall_seconds},
                                                          {"restarts", r.uptime.restarts}}}}
                                    .dump());
        return 0;
    }
    if (runs.empty()) {
        fmt::print("no runs in {}\n", vm["store"].as<std::string>());
        return 0;
    }
    size_t name_width = 4;
    for (const RunSummary& r : runs) name_width = std::max(name_width, r.run.name.size());
    fmt::print("{:<{}}  {:<9}  {:<9}  {:>8}  {:>9}  {:>10}  {:>7}  {:>6}  {}\n", "RUN", name_width, "STATUS",
               "PRECISION", "STEPS", "LAST LOSS", "TOKENS", "UPTIME", "ALERTS", "STARTED");
    for (const RunSummary& r : runs) {
        fmt::print("{:<{}}  {:<9}  {:<9}  {:>8}  {:>9}  {:>10}  {:>7}  {:>6}  {}\n", r.run.name, name_width,
                   r.run.status, r.run.precision.empty() ? "-" : r.run.precision,
                   r.last_step >= 0 ? std::to_string(r.last_step + 1) : "-", format_number(r.last_loss, "{:.4f}"),
                   format_number(r.tokens_seen, "{:.4g}"),
                   r.uptime.wall_seconds > 0 ? fmt::format("{:.1f}%", 100.0 * r.uptime.ratio) : "-", r.alerts,
                   format_time(r.run.started_at));
    }
    return 0;
}

int ingest_command(int argc, char** argv) {
    po::options_description opts("hlat ingest options");
    opts.add_options()
        ("help,h", "print this help")
        ("store", po::value<std::string>()->default_value("runs/hlat.db"), "telemetry store (created if missing)")
        ("run", po::value<std::string>()->default_value(""), "run name (required)")
        ("file", po::value<std::string>()->default_value(""), "log to import: FILE.jsonl or FILE.csv")
        ("resume", "add to an existing run of that name")
        ("follow", "keep reading as the file grows, until SIGINT/SIGTERM or --idle-exit")
        ("idle-exit", po::value<double>()->default_value(0.0),
         "with --follow: stop after this many seconds without new lines; 0 never")
        ("config", po::value<std::string>()->default_value("{}"), "JSON to record as the run's config");
    po::positional_options_description positional;
    positional.add("file", 1);
    auto parsed = parse_options(argc, argv, opts, "usage: hlat ingest --store FILE --run NAME FILE.jsonl|FILE.csv [--follow]\n\n"
                     "Each line a record: {\"step\": 10, \"loss\": 2.31, \"lr\": 3e-4, \"time\": 1700000000.5}.\n"
                     "Every numeric field but step and time becomes a metric; \"nan\", \"inf\" and \"-inf\" strings\n"
                     "are accepted. CSV: a header row with a step column. A bad line rejects its whole batch.", "", &positional);
    if (!parsed) return 0;
    const po::variables_map& vm = *parsed;
    std::string store = vm["store"].as<std::string>(), run = vm["run"].as<std::string>(),
                file = vm["file"].as<std::string>();
    if (run.empty() || file.empty()) throw std::runtime_error("--run and a file to ingest are required");
    bool csv = file.size() > 4 && file.compare(file.size() - 4, 4, ".csv") == 0;
    bool follow = vm.count("follow") > 0;
    std::ifstream in(file, std::ios::binary);
    if (!in) throw std::runtime_error(fmt::format("cannot open {}", file));
    nlohmann::json config = nlohmann::json::parse(vm["config"].as<std::string>(), nullptr, false);
    if (config.is_discarded()) throw std::runtime_error("--config is not valid JSON");

    Writer writer(store);
    RunRecord record;
    record.name = run;
    record.config = config.dump();
    record.source = "ingest";
    record.started_at = now_seconds();
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    record.host = host;
    int64_t run_id = writer.open_run(record, vm.count("resume") > 0);
    writer.event(run_id, {"start", 0, now_seconds(), "ingest " + file});

    std::signal(SIGINT, stop_following);
    std::signal(SIGTERM, stop_following);
    std::vector<std::string> header;
    std::string pending;  // a trailing partial line waits for its newline
    long next_line = 1, records = 0;
    int64_t last_step = -1;
    double idle_limit = vm["idle-exit"].as<double>();
    auto last_growth = std::chrono::steady_clock::now();
    std::string status = "finished";
    try {
        for (;;) {
            char buf[1 << 16];
            in.read(buf, sizeof buf);
            std::streamsize n = in.gcount();
            if (n > 0) {
                pending.append(buf, n);
                last_growth = std::chrono::steady_clock::now();
            }
            bool at_end = in.eof();
            in.clear();
            size_t cut = pending.rfind('\n');
            // Without --follow the file is complete: a last line without a newline counts too.
            std::string chunk;
            if (cut != std::string::npos) {
                chunk = pending.substr(0, cut + 1);
                pending.erase(0, cut + 1);
            }
            if (!follow && at_end && !pending.empty()) {
                chunk += pending;
                pending.clear();
            }
            if (!chunk.empty()) {
                if (csv && header.empty()) {
                    size_t nl = chunk.find('\n');
                    header = parse_csv_header(file, std::string_view(chunk).substr(0, nl));
                    chunk.erase(0, nl == std::string::npos ? chunk.size() : nl + 1);
                    next_line++;
                }
                std::vector<MetricPoint> points =
                    parse_records(file, chunk, next_line, csv, header, &last_step, now_seconds());
                next_line += (long)std::count(chunk.begin(), chunk.end(), '\n');
                records += (long)points.size();
                if (!points.empty()) writer.metrics(run_id, std::move(points));
            }
            if (!follow && at_end) break;
            if (follow) {
                if (g_ingest_stop) {
                    status = "stopped";
                    break;
                }
                double idle = std::chrono::duration<double>(std::chrono::steady_clock::now() - last_growth).count();
                if (idle_limit > 0 && idle >= idle_limit) break;
                if (at_end) std::this_thread::sleep_for(std::chrono::milliseconds(200));
            }
        }
    } catch (const std::exception& e) {
        writer.event(run_id, {"crash", last_step < 0 ? 0 : last_step, now_seconds(), e.what()});
        writer.set_status(run_id, "crashed", now_seconds());
        writer.flush();
        throw;
    }
    writer.event(run_id, {"stop", last_step < 0 ? 0 : last_step, now_seconds(), "ingest " + status});
    writer.set_status(run_id, status, now_seconds());
    writer.flush();
    spdlog::info("ingested {} values up to step {} into run \"{}\" of {}", records, last_step, run, store);
    return 0;
}

}  // namespace hlat::cli
