// Subcommands of the hlat binary. Each takes its own argv (argv[0] is the
// subcommand name) and returns the process exit code.
#pragma once

namespace hlat::cli {

int train_command(int argc, char** argv);
int run_command(int argc, char** argv);
int corpus_command(int argc, char** argv);
int tokenizer_command(int argc, char** argv);
int export_command(int argc, char** argv);
int runs_command(int argc, char** argv);
int alerts_command(int argc, char** argv);
int ingest_command(int argc, char** argv);
int detect_command(int argc, char** argv);
int spikes_command(int argc, char** argv);
int serve_command(int argc, char** argv);
int compare_command(int argc, char** argv);
int eval_command(int argc, char** argv);
int make_tasks_command(int argc, char** argv);
int probe_command(int argc, char** argv);
int profile_command(int argc, char** argv);
int preflight_command(int argc, char** argv);
int replay_command(int argc, char** argv);

}  // namespace hlat::cli
