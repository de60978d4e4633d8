// hlat corpus (Texinfo to JSONL documents) and hlat tokenizer (train a
// SentencePiece model on a config's training documents).
#include "cli/commands.h"
#include "cli/options.h"
#include "trainer/config/config.h"
#include "trainer/data/corpus.h"
#include "trainer/data/dataset.h"
#include "trainer/files/file_io.h"
#include "trainer/files/sha256.h"
#include "trainer/data/texinfo.h"
#include "trainer/data/tokenizer.h"

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <iostream>

namespace hlat::cli {
namespace po = boost::program_options;
namespace fs = std::filesystem;

int corpus_command(int argc, char** argv) {
    po::options_description opts("hlat corpus options");
    opts.add_options()
        ("help,h", "print this help")
        ("info", po::value<std::string>()->default_value("data/raw/python3.11.info.gz"),
         "Texinfo Info file (.info or .info.gz) to convert")
        ("out", po::value<std::string>()->default_value("data/corpus/python-docs.jsonl"), "JSONL to write")
        ("license", po::value<std::string>()->default_value("PSF-2.0"), "license field of every document")
        ("min-chars", po::value<int>()->default_value(200), "drop nodes shorter than this");
    auto parsed = parse_options(argc, argv, opts, "usage: hlat corpus [options]\n\nOne JSONL document per Info node, plus OUT.manifest.json "
                     "(package, sha256 of input and output).");
    if (!parsed) return 0;
    const po::variables_map& vm = *parsed;
    std::string in = vm["info"].as<std::string>(), out = vm["out"].as<std::string>();
    if (vm["min-chars"].as<int>() < 0) throw std::runtime_error("--min-chars must be >= 0");
    std::string text;
    if (in.size() > 3 && in.compare(in.size() - 3, 3, ".gz") == 0) {
        text = read_gzip(in);
    } else {
        std::vector<char> bytes = read_file(in);
        text.assign(bytes.begin(), bytes.end());
    }
    InfoStats stats;
    std::vector<Document> docs = info_to_documents(text, vm["min-chars"].as<int>(), &stats);
    if (docs.empty()) throw std::runtime_error(fmt::format("{} has no Info nodes of at least {} characters", in,
                                                           vm["min-chars"].as<int>()));
    if (fs::path(out).has_parent_path()) fs::create_directories(fs::path(out).parent_path());
    write_jsonl(out, docs, fs::path(in).filename().string(), vm["license"].as<std::string>());

    // The package that shipped the input, when fetch_corpus.sh left a note of it.
    std::string package;
    std::ifstream note(fs::path(in).parent_path() / "package.txt");
    std::getline(note, package);
    long chars = 0;
    for (const Document& d : docs) chars += (long)d.text.size();
    nlohmann::json manifest = {{"input", in},
                               {"input_sha256", sha256_file(in)},
                               {"package", package},
                               {"output", out},
                               {"output_sha256", sha256_file(out)},
                               {"documents", docs.size()},
                               {"characters", chars},
                               {"nodes", stats.nodes},
                               {"dropped_short", stats.dropped_short},
                               {"min_chars", vm["min-chars"].as<int>()}};
    write_file_atomic(out + ".manifest.json", {manifest.dump(2)});
    spdlog::info("corpus: {} documents ({} characters) from {} nodes of {}; {} dropped as shorter than {} characters",
                 docs.size(), chars, stats.nodes, in, stats.dropped_short, vm["min-chars"].as<int>());
    spdlog::info("wrote {} and {}.manifest.json", out, out);
    return 0;
}

int tokenizer_command(int argc, char** argv) {
    po::options_description opts("hlat tokenizer options");
    opts.add_options()
        ("help,h", "print this help")
        ("config", po::value<std::string>()->default_value(""), "training config naming data.corpus and data.tokenizer")
        ("vocab-size", po::value<int>()->default_value(0), "pieces; 0: model.vocab_size of the config")
        ("threads", po::value<int>()->default_value(2), "trainer threads");
    auto parsed = parse_options(argc, argv, opts, "usage: hlat tokenizer --config FILE [options]\n\nTrains a SentencePiece BPE model with "
                     "LLaMA's settings on the training split of data.corpus\n(held-out documents never reach it) "
                     "and writes it to data.tokenizer.");
    if (!parsed) return 0;
    const po::variables_map& vm = *parsed;
    if (vm["config"].as<std::string>().empty()) throw std::runtime_error("--config is required");
    TrainConfig config = load_config(vm["config"].as<std::string>());
    if (config.data.corpus.empty()) throw std::runtime_error("the config has no data.corpus to train a tokenizer on");
    int vocab = vm["vocab-size"].as<int>() > 0 ? vm["vocab-size"].as<int>() : config.model.vocab_size;
    std::string model = config.data.tokenizer;
    if (model.size() < 7 || model.compare(model.size() - 6, 6, ".model") != 0)
        throw std::runtime_error(fmt::format("data.tokenizer {} must end in .model", model));
    Dataset ds = load_dataset(config.data);
    if (fs::path(model).has_parent_path()) fs::create_directories(fs::path(model).parent_path());
    spdlog::info("training a {}-piece BPE tokenizer on {} training documents", vocab, ds.train->size());
    train_tokenizer(*ds.train, model.substr(0, model.size() - 6), vocab, vm["threads"].as<int>());
    Tokenizer tok(model);
    spdlog::info("wrote {} ({} pieces)", model, tok.vocab_size());
    return 0;
}

}  // namespace hlat::cli
