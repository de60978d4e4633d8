// Command-line parsing shared by the subcommands: every option has a default
// that --help shows, and --help prints the usage text first.
#pragma once

#include "trainer/config/config.h"

#include <boost/program_options.hpp>

#include <optional>
#include <string>

namespace hlat::cli {

// Parses argv against opts. On --help prints usage, the options and footer,
// and returns nothing (the command then exits 0); a bad option throws.
std::optional<boost::program_options::variables_map> parse_options(
    int argc, char** argv, const boost::program_options::options_description& opts, const std::string& usage,
    const std::string& footer = "", const boost::program_options::positional_options_description* positional = nullptr);

// --precision MODE over a loaded config, checked by the config parser as the
// field itself would be; a bad mode throws naming --precision.
void override_precision_mode(TrainConfig& config, const std::string& mode);

}  // namespace hlat::cli
