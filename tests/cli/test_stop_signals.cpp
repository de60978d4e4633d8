// Ctrl-C and SIGTERM stop `hlat train` after its step, with a checkpoint and
// the run's status stored, wherever the signals land. Most of an fp32 step is
// oneDNN's JIT sgemm, which points rsp into the heap while it runs
// (cli/signal_thread.h): before the stop signals had a thread of their own,
// this test failed 6 times in 6, the trainer killed by SIGSEGV or SIGABRT
// (glibc's "corrupted size vs. prev_size"), on a Xeon with AMX.
#include "telemetry/reader.h"
#include "test_util.h"
#include "trainer/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <fstream>
#include <iterator>
#include <random>
#include <regex>
#include <thread>

namespace hlat {
namespace {

// A model whose step is mostly sgemm (about 25 ms on 2 cores), on random
// tokens, for far more steps than the test lets it take.
void write_run_files(const test::ScratchDir& dir) {
    std::mt19937 rng(3);
    std::vector<uint16_t> tokens(60000);
    for (uint16_t& t : tokens) t = (uint16_t)(rng() % 256);
    std::ofstream(dir.file("tokens.bin"), std::ios::binary)
        .write(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
    std::ofstream(dir.file("config.json")) << fmt::format(R"({{
      "model": {{"vocab_size": 256, "dim": 256, "n_layers": 2, "n_heads": 4, "n_kv_heads": 4,
                "hidden_dim": 704, "max_seq_len": 64}},
      "schedule": {{"max_lr": 1e-3, "min_lr": 1e-4, "warmup_steps": 5, "total_steps": 100000}},
      "run": {{"batch_size": 8, "seq_len": 64, "threads": 2, "data": "{}", "eval_every": 0, "peak_gflops": 100,
              "tensor_norms_every": 0, "checkpoint_every": 0, "keep_checkpoints": 0}}
    }})", dir.file("tokens.bin"));
}

// `hlat train` with a store, its output in log.txt.
pid_t start_training(const test::ScratchDir& dir) {
    const std::string config = dir.file("config.json"), store = dir.file("runs.db"), out = dir.file("out"),
                      metrics = dir.file("metrics.jsonl"), log = dir.file("log.txt");
    std::vector<const char*> argv = {HLAT_BINARY, "train",  "--config",        config.c_str(),  "--store",
                                     store.c_str(), "--out-dir", out.c_str(), "--metrics-jsonl", metrics.c_str(),
                                     nullptr};
    const pid_t pid = ::fork();
    if (pid == 0) {  // only async-signal-safe calls until exec
        const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        ::dup2(fd, 1);
        ::dup2(fd, 2);
        ::execv(HLAT_BINARY, const_cast<char* const*>(argv.data()));
        ::_exit(127);
    }
    return pid;
}

// Whether pid has ended; its wait status in *status.
bool ended(pid_t pid, int* status) { return ::waitpid(pid, status, WNOHANG) == pid; }

std::string read_file(const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

class StopSignalTest : public ::testing::TestWithParam<int> {};

// A user holding Ctrl-C (or a scheduler repeating SIGTERM): the signal every
// 0.2 ms from the third step on, until the process ends.
TEST_P(StopSignalTest, ABurstOfSignalsStopsTheRunAfterACheckpoint) {
    const int sig = GetParam();
    test::ScratchDir dir(fmt::format("stop_signal_{}", sig));
    write_run_files(dir);
    const pid_t pid = start_training(dir);
    ASSERT_GT(pid, 0);
    int status = 0;
    bool done = false;
    auto steps_taken = [&] {  // the metrics file: the config's line, then one per step
        const std::string metrics = read_file(dir.file("metrics.jsonl"));
        return std::count(metrics.begin(), metrics.end(), '\n') - 1;
    };
    while (!(done = ended(pid, &status)) && steps_taken() < 2)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const std::string early = done ? read_file(dir.file("log.txt")) : "";
    ASSERT_FALSE(done) << "the run ended before its second step:\n" << early;
    int sent = 0;
    for (; !ended(pid, &status); sent++) {
        ::kill(pid, sig);
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    const std::string log = read_file(dir.file("log.txt"));
    const std::string tail = log.substr(log.size() > 3000 ? log.size() - 3000 : 0);
    SCOPED_TRACE(fmt::format("{} signals sent; the log ends:\n{}", sent, tail));
    // A signal after the run has finished (store closed, handlers restored)
    // ends the process as by default: nothing is lost by then.
    const bool stopped_itself = WIFEXITED(status) && WEXITSTATUS(status) == 128 + sig;
    const bool ended_by_default = WIFSIGNALED(status) && WTERMSIG(status) == sig;
    EXPECT_TRUE(stopped_itself || ended_by_default)
        << (WIFSIGNALED(status) ? fmt::format("killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)))
                                : fmt::format("exit code {}", WEXITSTATUS(status)));
    std::smatch at;
    ASSERT_TRUE(std::regex_search(log, at, std::regex(fmt::format("stopped by signal {} after step (\\d+)", sig))));
    std::optional<std::string> checkpoint = latest_good_checkpoint(dir.file("out"), nullptr);
    ASSERT_TRUE(checkpoint.has_value());
    EXPECT_EQ(std::filesystem::path(*checkpoint).filename(), fmt::format("step_{:08d}", std::stoi(at[1])));
    std::optional<telemetry::RunRecord> run = telemetry::Reader(dir.file("runs.db")).find_run("out");
    ASSERT_TRUE(run.has_value());
    EXPECT_EQ(run->status, "stopped");
}

INSTANTIATE_TEST_SUITE_P(CtrlCAndSigterm, StopSignalTest, ::testing::Values(SIGINT, SIGTERM),
                         [](const auto& info) { return std::string(info.param == SIGINT ? "SIGINT" : "SIGTERM"); });

}  // namespace
}  // namespace hlat
