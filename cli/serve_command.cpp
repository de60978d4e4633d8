// hlat serve: the JSON API and the page over a store, until SIGINT or SIGTERM.
#include "cli/commands.h"
#include "cli/options.h"
#include "telemetry/reader.h"
#include "telemetry/writer.h"
#include "web/limits.h"
#include "web/server.h"

#include <fmt/format.h>
#include <malloc.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace hlat::cli {
namespace po = boost::program_options;

namespace {
std::atomic<int> g_serve_stop{0};  // lock-free: set in a handler, on the signal thread
std::atomic<bool>* g_server_stopping = nullptr;  // the server's: a read or catch-up in progress ends at once
extern "C" void stop_serving(int) {
    g_serve_stop = 1;
    if (g_server_stopping) g_server_stopping->store(true);
}
// --token-file, else HLAT_TOKEN, else --token (which `ps` shows to everyone).
std::string token_from(const po::variables_map& vm) {
    if (std::string file = vm["token-file"].as<std::string>(); !file.empty()) {
        std::ifstream in(file);
        std::string token;
        if (!in || !std::getline(in, token) || token.empty())
            throw std::runtime_error(fmt::format("--token-file {}: cannot read a token from its first line", file));
        return token;
    }
    if (const char* env = std::getenv("HLAT_TOKEN"); env && *env) return env;
    return vm["token"].as<std::string>();
}

// The usage line and every limit the server holds (from web/limits.h).
std::string serve_usage() {
    namespace lim = web::limits;
    return fmt::format(
        "usage: hlat serve [--store FILE] [--port N]\n\nServes the JSON API (/api/v1, see docs/api.md) and the page "
        "over a store.\nThe token comes from --token-file, else the environment's HLAT_TOKEN, else --token, else a new "
        "random one.\nLimits (docs/api.md, Security and limits): a header within {} s and {} KB; a body\nup to {} MB "
        "(413), all bodies being read at once {} MB (503), none read without the token\n(401); a body or reply may "
        "pause {} s; {} connections per client address and {} in all\n(the oldest idle one gives way); {} event "
        "streams (503); {} reads and {} token-carrying requests\nrun at once, {} of each may wait (503); JSON nested at "
        "most 64 deep; names and keys 1 to 200\nbytes of UTF-8.",
        lim::kHeaderTimeout.count(), lim::kMaxHeaderBytes >> 10, lim::kMaxBody >> 20, lim::kBodyBudget >> 20,
        lim::kIdleTimeout.count(), lim::kMaxConnectionsPerClient, lim::kMaxConnections, lim::kMaxStreams,
        lim::kReadThreads, lim::kWriteThreads, lim::kMaxQueuedReads);
}

// Large blocks straight from the kernel and back to it when freed. heaptrack
// over a 30-minute soak saw at most 59 MB of the server's heap live, while its
// resident memory stood at 60-150 MB and, over two hours, its least climbed to
// 129 MB. glibc raises its mmap threshold to the largest block freed (up to
// 32 MB) and keeps twice that unreturned at each arena's top, so after the
// first large reply (heaptrack's largest holder: a 25 MB `/events` page built
// by doubling) the later ones were carved from the read threads' arenas and
// their pages kept. A fixed threshold turns that adjustment off (the trim
// threshold stays at 128 KB); the same soak then held 25 MB between replies.
void return_large_blocks_when_freed() {
#ifdef __GLIBC__
    ::mallopt(M_MMAP_THRESHOLD, 1 << 20);
#endif
}

}  // namespace

int serve_command(int argc, char** argv) {
    po::options_description opts("hlat serve options");
    opts.add_options()
        ("help,h", "print this help")
        ("store", po::value<std::string>()->default_value("runs/hlat.db"), "telemetry store")
        ("bind", po::value<std::string>()->default_value("127.0.0.1"), "address to listen on")
        ("allow-host", po::value<std::string>()->default_value(""),
         "host names a request's Host header may carry besides 127.0.0.1, localhost, [::1] and --bind "
         "(comma-separated: a reverse proxy's name); any other is refused (403)")
        ("port", po::value<int>()->default_value(8080), "port; 0 picks a free one")
        ("static", po::value<std::string>()->default_value(HLAT_WEB_DIR "/static"), "folder of the page")
        ("vendor", po::value<std::string>()->default_value(HLAT_WEB_DIR "/node_modules/uplot/dist"),
         "folder of uPlot's files (installed by npm in setup)")
        ("token", po::value<std::string>()->default_value(""),
         "access token for state changes (visible in ps: prefer --token-file or HLAT_TOKEN); empty: a random one")
        ("token-file", po::value<std::string>()->default_value(""), "read the access token from this file's first line")
        ("create", "create the store if it does not exist (to receive runs from the Python client or HTTP ingest)")
        ("stale-after", po::value<double>()->default_value(300.0),
         "mark a run fed from outside (client, HTTP ingest, ingest --follow) stale after this many seconds "
         "without records; 0 never");
    auto parsed = parse_options(argc, argv, opts, serve_usage());
    if (!parsed) return 0;
    const po::variables_map& vm = *parsed;
    int port = vm["port"].as<int>();
    if (port < 0 || port > 65535) throw std::runtime_error(fmt::format("--port {} is not a port", port));
    web::ServerOptions o;
    o.store = vm["store"].as<std::string>();
    o.bind = vm["bind"].as<std::string>();
    o.port = port;
    o.static_dir = vm["static"].as<std::string>();
    o.vendor_dir = vm["vendor"].as<std::string>();
    o.token = token_from(vm);
    std::istringstream hosts(vm["allow-host"].as<std::string>());
    for (std::string h; std::getline(hosts, h, ',');) {
        if (h.empty()) continue;
        if (web::host_of(h).empty())
            throw std::runtime_error(fmt::format("--allow-host {} is not a host name (NAME, NAME:PORT or [IPv6])", h));
        o.allowed_hosts.push_back(web::host_of(h));
    }
    if (!o.token.empty() && o.token.size() < 16)
        throw std::runtime_error("the access token must be at least 16 characters (leave it out for a random one)");
    double stale_after = vm["stale-after"].as<double>();
    if (stale_after < 0) throw std::runtime_error("--stale-after must be >= 0 seconds");
    if (vm.count("create") && !std::filesystem::exists(o.store)) {
        std::filesystem::path parent = std::filesystem::path(o.store).parent_path();
        if (!parent.empty()) std::filesystem::create_directories(parent);
        telemetry::Writer create(o.store);
    }
    { telemetry::Reader check(o.store); }  // a missing or foreign store is an error now, not at the first request
    if (o.bind != "127.0.0.1" && o.bind != "localhost" && o.bind != "::1")
        spdlog::warn("listening on {}: anyone who can reach this address can read the runs", o.bind);
    return_large_blocks_when_freed();
    web::Server server(o);
    static_assert(std::atomic<bool>::is_always_lock_free);  // stored from the signal handler
    g_server_stopping = &server.stopping();
    std::signal(SIGINT, stop_serving);
    std::signal(SIGTERM, stop_serving);
    fmt::print("hlat serve: {} on {}\nopen {}\naccess token (for halting and ingesting): {}\n", o.store, o.bind,
               server.url(), server.token());
    std::fflush(stdout);
    auto last_sweep = std::chrono::steady_clock::now();
    while (!g_serve_stop) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        if (stale_after > 0 && std::chrono::steady_clock::now() - last_sweep > std::chrono::seconds(1)) {
            last_sweep = std::chrono::steady_clock::now();
            try {
                if (int n = server.mark_stale(stale_after)) spdlog::info("{} run(s) marked stale", n);
            } catch (const std::exception& e) {
                spdlog::warn("stale check: {}", e.what());
            }
        }
    }
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
    g_server_stopping = nullptr;
    return 0;
}

}  // namespace hlat::cli
