// Scoring a task file on a model, with the metrics lm-evaluation-harness
// reports for its kind:
//   multiple_choice  acc (argmax of summed log-likelihood), acc_norm (argmax of
//                    log-likelihood per character of the choice),
//                    acc_mutual_info (argmax of log-likelihood minus that of
//                    the choice with no context) and gold_logprob (mean log p
//                    per token of the gold choice); each choice is scored as
//                    " " + choice after the context.
//   cloze            acc (every token of " " + target is the greedy choice) and
//                    perplexity = exp(-mean log-likelihood of the target).
//   perplexity       bits_per_byte, byte_perplexity, word_perplexity over
//                    rolling windows (words as the harness splits on \s+).
// Accuracies carry the standard error of the mean; bits_per_byte that of a
// ratio of sums (delta method over documents).
#pragma once

#include "eval/scoring.h"
#include "eval/task_file.h"

#include <nlohmann/json.hpp>

#include <atomic>
#include <cmath>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace hlat::eval {

struct Metric {
    std::string name;
    double value = NAN;
    double stderr_ = NAN;  // NaN where there is none
};

struct TaskResult {
    std::string task;
    TaskKind kind = TaskKind::MultipleChoice;
    long items = 0;
    double chance = NAN;  // multiple choice: mean of 1 / choices
    std::vector<Metric> metrics;
    long tokens_run = 0;  // through the model, context computed once per item
    double seconds = 0.0;
};

struct TaskOptions {
    int rolling_context = 0;  // perplexity windows' context_len; 0: half the model's length
    long limit = 0;           // score only the first `limit` items; 0: all
    // Called with each scored item: its task and index, the token ids and the
    // log-likelihoods (the --log-samples file, and the PyTorch comparison).
    std::function<void(const nlohmann::json&)> on_sample;
    // When set and true, scoring stops before the next item by throwing
    // Cancelled: a watcher told to stop does not finish a checkpoint first.
    const std::atomic<bool>* cancel = nullptr;
};

struct Cancelled : std::runtime_error {
    Cancelled() : std::runtime_error("scoring cancelled") {}
};

TaskResult evaluate_task(const TaskFile& task, Scorer& scorer, const Tokenizer& tokenizer, const TaskOptions& options);

// The choices a multiple-choice item's scores pick: acc by the largest summed
// log-likelihood, acc_norm by the largest log-likelihood per character of the
// choice (ties go to the first, as numpy's argmax).
struct Picks {
    size_t acc, acc_norm;
};
Picks pick_choices(const std::vector<double>& loglik, const std::vector<std::string>& choices);

// Mean and its standard error (sample standard deviation / sqrt(n)), as the
// harness's mean_stderr.
Metric mean_metric(const std::string& name, const std::vector<double>& values);
// Length in Unicode code points, as Python's len() counts a str.
long utf8_length(const std::string& s);
// Words as re.split(r"\s+", text) counts them, empty ends included.
long harness_word_count(const std::string& text);

}  // namespace hlat::eval
