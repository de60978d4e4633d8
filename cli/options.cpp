#include "cli/options.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <iostream>
#include <stdexcept>
#include <string>

namespace hlat::cli {

namespace po = boost::program_options;

std::optional<po::variables_map> parse_options(int argc, char** argv, const po::options_description& opts,
                                               const std::string& usage, const std::string& footer,
                                               const po::positional_options_description* positional) {
    po::command_line_parser parser(argc, argv);
    parser.options(opts);
    if (positional) parser.positional(*positional);
    po::parsed_options parsed = parser.run();
    // A word no option takes (a misspelt flag's value, a path without its
    // --flag) would be dropped without a word: it is an error instead.
    for (const po::option& o : parsed.options)
        if (o.position_key >= 0 && o.string_key.empty())
            throw std::runtime_error("unexpected argument \"" + (o.value.empty() ? std::string() : o.value[0]) +
                                     "\": this command takes options only (--help lists them)");
    po::variables_map vm;
    po::store(parsed, vm);
    if (vm.count("help")) {
        std::cout << usage << "\n\n" << opts << footer;
        return std::nullopt;
    }
    po::notify(vm);
    return vm;
}

void override_precision_mode(TrainConfig& config, const std::string& mode) {
    nlohmann::json j = config_to_json(config);
    j["precision"]["mode"] = mode;
    try {
        config = config_from_json(j);
    } catch (const ConfigError& e) {
        throw std::runtime_error(fmt::format("--precision: {}", e.what()));
    }
}

}  // namespace hlat::cli
