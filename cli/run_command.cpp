// hlat run: supervise a training job (supervisor/supervisor.h).
#include "cli/commands.h"
#include "cli/options.h"
#include "supervisor/supervisor.h"

#include <boost/program_options.hpp>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <sstream>

namespace hlat::cli {
namespace po = boost::program_options;

namespace {

// What follows "--" are `hlat train`'s options. The command spelled whole
// (`hlat run -- hlat train --config c.json`, or `-- train ...`), as the usage
// line may be read, is taken for its options; any other program is refused,
// since the supervisor always launches its own `hlat train` (it must add
// --resume and read the run's config and store).
std::vector<std::string> train_options(std::vector<std::string> args) {
    if (args.empty() || args[0].rfind("-", 0) == 0) return args;
    const std::filesystem::path program = args[0];
    size_t words = 0;
    if (args[0] == "train") {
        words = 1;
    } else if (program.filename() == "hlat" && args.size() > 1 && args[1] == "train") {
        words = 2;
        const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe");
        std::error_code error;  // a bare `hlat` is looked up on PATH, not here: no warning then
        const bool same = std::filesystem::equivalent(program, self, error);
        if (!error && !same) spdlog::warn("hlat run launches its own hlat ({}), not {}", self.string(), args[0]);
    } else {
        throw std::runtime_error("hlat run launches `hlat train` itself: give only its options after --, e.g. "
                                 "`hlat run -- --config run.json` (got \"" + args[0] + "\" after --)");
    }
    args.erase(args.begin(), args.begin() + static_cast<std::ptrdiff_t>(words));
    return args;
}

}  // namespace

int run_command(int argc, char** argv) {
    // Everything after "--" belongs to `hlat train`.
    int split = argc;
    for (int i = 1; i < argc; i++)
        if (!std::strcmp(argv[i], "--")) {
            split = i;
            break;
        }
    po::options_description opts("hlat run options");
    opts.add_options()
        ("help,h", "print this help")
        ("launcher", po::value<std::string>()->default_value(""),
         "command that starts the ranks, e.g. \"mpirun -np 4 --hostfile hosts\"; empty: run hlat train directly")
        ("max-restarts", po::value<int>()->default_value(10), "relaunches after crashes before giving up")
        ("backoff", po::value<double>()->default_value(1.0),
         "seconds before the first relaunch; doubled at each further one")
        ("backoff-max", po::value<double>()->default_value(60.0), "cap on the wait before a relaunch, seconds")
        ("hang-timeout", po::value<double>()->default_value(300.0),
         "seconds without a heartbeat in the store (a step or an event) after which the job is killed and "
         "relaunched; 0: never")
        ("preflight", "run `hlat preflight` under the launcher before every launch; a failure stops (exit 3)")
        ("preflight-args", po::value<std::string>()->default_value(""),
         "more options for hlat preflight, e.g. \"--min-fraction 0.7\"");
    auto parsed = parse_options(split, argv, opts,
                                "usage: hlat run [options] -- [hlat train options]\n"
                                "Relaunches a crashed or hung job from its latest good checkpoint (adding --resume);\n"
                                "a job halted by a detector (exit 3) or stopped by Ctrl-C is not restarted; one a rewind_skip alert\n"
                                "stopped (exit 4) restarts from an earlier checkpoint, skipping the alert's batches.");
    if (!parsed) return 0;
    const po::variables_map& vm = *parsed;
    SupervisorOptions o;
    o.train_args = train_options(std::vector<std::string>(argv + std::min(split + 1, argc), argv + argc));
    std::istringstream launcher(vm["launcher"].as<std::string>());
    for (std::string word; launcher >> word;) o.launcher.push_back(word);
    o.max_restarts = vm["max-restarts"].as<int>();
    o.backoff_seconds = vm["backoff"].as<double>();
    o.backoff_max_seconds = vm["backoff-max"].as<double>();
    o.hang_timeout_seconds = vm["hang-timeout"].as<double>();
    o.preflight = vm.count("preflight") > 0;
    std::istringstream preflight_args(vm["preflight-args"].as<std::string>());
    for (std::string word; preflight_args >> word;) o.preflight_args.push_back(word);
    if (o.max_restarts < 0 || o.backoff_seconds < 0 || o.backoff_max_seconds < 0 || o.hang_timeout_seconds < 0)
        throw std::runtime_error("--max-restarts, --backoff, --backoff-max and --hang-timeout must be >= 0");
    return supervise(o);
}

}  // namespace hlat::cli
