// hlat serve: the JSON API and the page over a store, until SIGINT or SIGTERM.
#include "cli/commands.h"
#include "cli/options.h"
#include "telemetry/reader.h"
#include "web/server.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <csignal>
#include <thread>

namespace hlat::cli {
namespace po = boost::program_options;

namespace {
volatile std::sig_atomic_t g_serve_stop = 0;
extern "C" void stop_serving(int) { g_serve_stop = 1; }
}  // namespace

int serve_command(int argc, char** argv) {
    po::options_description opts("hlat serve options");
    opts.add_options()
        ("help,h", "print this help")
        ("store", po::value<std::string>()->default_value("runs/hlat.db"), "telemetry store")
        ("bind", po::value<std::string>()->default_value("127.0.0.1"), "address to listen on")
        ("port", po::value<int>()->default_value(8080), "port; 0 picks a free one")
        ("static", po::value<std::string>()->default_value(HLAT_WEB_DIR "/static"), "folder of the page")
        ("vendor", po::value<std::string>()->default_value(HLAT_WEB_DIR "/node_modules/uplot/dist"),
         "folder of uPlot's files (installed by npm in setup)")
        ("token", po::value<std::string>()->default_value(""), "access token for state changes; empty: a random one");
    auto parsed = parse_options(argc, argv, opts,
                                "usage: hlat serve [--store FILE] [--port N]\n\nServes the JSON API (/api/v1, see "
                                "README) and the page over a store.");
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
    o.token = vm["token"].as<std::string>();
    { telemetry::Reader check(o.store); }  // a missing or foreign store is an error now, not at the first request
    if (o.bind != "127.0.0.1" && o.bind != "localhost" && o.bind != "::1")
        spdlog::warn("listening on {}: anyone who can reach this address can read the runs", o.bind);
    web::Server server(o);
    std::signal(SIGINT, stop_serving);
    std::signal(SIGTERM, stop_serving);
    fmt::print("hlat serve: {} on {}\nopen {}\naccess token (for halting and ingesting): {}\n", o.store, o.bind,
               server.url(), server.token());
    std::fflush(stdout);
    while (!g_serve_stop) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    return 0;
}

}  // namespace hlat::cli
