#include "cli/options.h"

#include <iostream>

namespace hlat::cli {

namespace po = boost::program_options;

std::optional<po::variables_map> parse_options(int argc, char** argv, const po::options_description& opts,
                                               const std::string& usage, const std::string& footer,
                                               const po::positional_options_description* positional) {
    po::command_line_parser parser(argc, argv);
    parser.options(opts);
    if (positional) parser.positional(*positional);
    po::variables_map vm;
    po::store(parser.run(), vm);
    if (vm.count("help")) {
        std::cout << usage << "\n\n" << opts << footer;
        return std::nullopt;
    }
    po::notify(vm);
    return vm;
}

}  // namespace hlat::cli
