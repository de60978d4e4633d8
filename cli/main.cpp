// hlat: one binary, one subcommand per job. Errors are reported here, once, as
// one line on stderr, with a non-zero exit code.
#include "cli/commands.h"
#include "cli/signal_thread.h"
#include "trainer/parallel/parallel.h"

#include <fmt/format.h>

#include <cstring>
#include <exception>
#include <string>

namespace {

struct Command {
    const char* name;
    const char* summary;
    int (*run)(int, char**);
};

const Command kCommands[] = {
    {"train", "train the LLaMA model (corpus or token file); --resume continues a run", hlat::cli::train_command},
    {"run", "supervise a training job: relaunch it from its latest checkpoint when it crashes or hangs",
     hlat::cli::run_command},
    {"corpus", "turn the Python docs' Texinfo into JSONL documents", hlat::cli::corpus_command},
    {"tokenizer", "train a SentencePiece tokenizer on a config's corpus", hlat::cli::tokenizer_command},
    {"export", "write a checkpoint as a Hugging Face LLaMA folder", hlat::cli::export_command},
    {"runs", "list the runs of a telemetry store", hlat::cli::runs_command},
    {"alerts", "a run's alerts grouped into episodes (--all: each alert)", hlat::cli::alerts_command},
    {"ingest", "import another trainer's JSONL or CSV log into the store", hlat::cli::ingest_command},
    {"detect", "replay a stored run through the detectors", hlat::cli::detect_command},
    {"serve", "JSON API and page over a telemetry store", hlat::cli::serve_command},
    {"compare", "post-mortem of runs side by side, with an HTML report", hlat::cli::compare_command},
    {"eval", "score a checkpoint on task files, or each checkpoint of a run as it lands", hlat::cli::eval_command},
    {"make-tasks", "build the frozen evaluation task files from the held-out split", hlat::cli::make_tasks_command},
    {"probe", "the CPU's fp32 and bf16 ceilings and the rate of each GEMM of a training step", hlat::cli::probe_command},
    {"profile", "where a training step's time goes, kernel by kernel, beside the CPU's ceilings",
     hlat::cli::profile_command},
    {"preflight", "burn-in before a long job: every rank's GEMMs, memory and arithmetic, and the links",
     hlat::cli::preflight_command},
    {"replay", "re-run one stored step bit-exactly: reproducible (data) or not (hardware); --without its top sequences",
     hlat::cli::replay_command},
    {"spikes", "gradient spike episodes of a stored run (the paper's Figure 2)", hlat::cli::spikes_command},
};

void print_usage() {
    fmt::print("usage: hlat <command> [options]\n\ncommands:\n");
    for (const Command& c : kCommands) fmt::print("  {:<11} {}\n", c.name, c.summary);
    fmt::print("\n`hlat <command> --help` lists a command's options with their defaults.\n");
}

}  // namespace

int main(int argc, char** argv) {
    hlat::cli::give_stop_signals_their_own_thread();
    if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
        print_usage();
        return argc < 2 ? 2 : 0;
    }
    for (const Command& c : kCommands) {
        if (std::string(argv[1]) != c.name) continue;
        try {
            return c.run(argc - 1, argv + 1);
        } catch (const std::exception& e) {
            fmt::print(stderr, "hlat {}: error: {}\n", c.name, e.what());
            // The other ranks of a distributed job would wait for this one forever.
            hlat::Parallel::abort_job(1);
            return 1;
        }
    }
    fmt::print(stderr, "hlat: unknown command \"{}\"; `hlat --help` lists the commands\n", argv[1]);
    return 2;
}
