// hlat export: a checkpoint as a Hugging Face LLaMA folder.
#include "cli/commands.h"
#include "cli/options.h"
#include "trainer/checkpoint/hf_export.h"

#include <boost/program_options.hpp>
#include <spdlog/spdlog.h>

#include <iostream>

namespace hlat::cli {
namespace po = boost::program_options;

int export_command(int argc, char** argv) {
    po::options_description opts("hlat export options");
    opts.add_options()
        ("help,h", "print this help")
        ("checkpoint", po::value<std::string>()->default_value(""), "checkpoint folder (runs/NAME/checkpoints/step_N)")
        ("out", po::value<std::string>()->default_value(""), "folder to write");
    auto parsed = parse_options(argc, argv, opts, "usage: hlat export --checkpoint DIR --out DIR\n\nWrites model.safetensors with Hugging Face "
                     "LLaMA names (q/k/v and gate/up split), config.json\nfor LlamaForCausalLM and tokenizer.model.");
    if (!parsed) return 0;
    const po::variables_map& vm = *parsed;
    if (vm["checkpoint"].as<std::string>().empty() || vm["out"].as<std::string>().empty())
        throw std::runtime_error("--checkpoint and --out are required");
    export_hugging_face(vm["checkpoint"].as<std::string>(), vm["out"].as<std::string>());
    spdlog::info("exported {} to {}", vm["checkpoint"].as<std::string>(), vm["out"].as<std::string>());
    return 0;
}

}  // namespace hlat::cli
