// `hlat replay`: re-run one stored step bit-exactly to tell data from hardware
// (trainer/run/replay.h).
#include "cli/commands.h"
#include "cli/options.h"
#include "trainer/parallel/parallel.h"
#include "trainer/run/replay.h"

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include <fstream>
#include <iostream>

namespace po = boost::program_options;

namespace hlat::cli {

int replay_command(int argc, char** argv) {
    po::options_description opts("hlat replay options");
    opts.add_options()
        ("help,h", "print this help")
        ("store", po::value<std::string>()->default_value("runs/hlat.db"), "the telemetry store")
        ("run", po::value<std::string>(), "the run's name in the store (required)")
        ("step", po::value<int>(), "the step to replay, as the store numbers it (required)")
        ("without", po::value<int>()->default_value(0),
         "also re-run the step without its N highest-loss sequences (from the step's batch record)")
        ("json", po::value<std::string>()->default_value(""), "write the report as JSON to this file too");
    auto parsed = parse_options(argc, argv, opts, "usage: hlat replay --run NAME --step S [--without N] [options]\n"
                                "Re-runs step S from the newest checkpoint at or before it, at the run's layout (under\n"
                                "mpirun -np dp*tp for a distributed run), and says whether the stored numbers come back\n"
                                "bit for bit: reproducible (the data or the optimisation) or not (hardware, silent data\n"
                                "corruption or nondeterminism, with the ranks and tensor that differ). Exit 0 when\n"
                                "reproducible, 2 when not.");
    if (!parsed) return 0;
    const po::variables_map& vm = *parsed;
    if (!vm.count("run") || !vm.count("step")) throw std::runtime_error("hlat replay needs --run and --step");
    ReplayOptions o;
    o.store = vm["store"].as<std::string>();
    o.run = vm["run"].as<std::string>();
    o.step = vm["step"].as<int>();
    o.without = vm["without"].as<int>();
    const nlohmann::json report = replay_step(o);
    if (report.is_null()) return 0;  // another rank than 0 under mpirun: rank 0 reports for the job
    std::cout << describe_replay(report);
    const std::string json_path = vm["json"].as<std::string>();
    if (!json_path.empty()) {
        std::ofstream out(json_path);
        out << report.dump(2) << "\n";
        if (!out) throw std::runtime_error(fmt::format("cannot write {}", json_path));
    }
    return report.value("verdict", "") == "reproducible" ? 0 : 2;
}

}  // namespace hlat::cli
