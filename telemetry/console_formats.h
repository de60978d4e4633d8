// Trainers' console output and bare loss files, read by content:
//   steploss    "<step> <loss>" per line, torchtitan's golden loss files
//               (tests/assets/losses/*.txt) and many scripts' loss dumps.
//   torchtitan  "step:  1  loss: 12.2365  grad_norm:  3.95  memory: 42.30GiB(44.52%)
//               tps: 1,040  tflops: 0.06  mfu: 0.01%" (colour codes and the
//               logger's prefix around it ignored); "validate step: N  loss: X"
//               gives heldout_loss.
//   megatron    " iteration       10/  500000 | consumed samples: 640 | ...
//               | lm loss: 1.051355E+01 | grad norm: 11.2 | ..." and
//               " validation loss at iteration 100 | lm loss value: 5.43E+00 | ..."
//               (read as "lm loss validation", Megatron's own TensorBoard name).
// Each gives a line's (name, value) pairs, "step" among them, names as the
// trainer prints them with a unit joined ("memory_GiB", "mfu_pct"); the
// session's aliases make them hlat's keys. Lines that are not records (the
// banner, the config dump, warnings) are not matched, and skipped.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hlat::telemetry {

using Fields = std::vector<std::pair<std::string, double>>;

// Whether the line is a record; its pairs into `out`. None throws: a line
// that is no record is the caller's to judge (a steploss file has no other
// lines, a console has many).
bool parse_steploss_line(std::string_view line, Fields& out);
bool parse_torchtitan_line(std::string_view line, Fields& out);
bool parse_megatron_line(std::string_view line, Fields& out);

// What the first lines of a log say about its format: "steploss" when every
// line is "<integer> <number>", "torchtitan" or "megatron" when a line is
// one of their records, "llmc" for modded-nanogpt's "step:N/M key:value"
// lines (ingest.h); "" otherwise.
std::string console_format_of(std::string_view head);

// modded-nanogpt's record line: "step:12/3200 train_loss:3.28 ..." (the
// step and its total joined by '/', no space after the colon).
bool is_modded_nanogpt_line(std::string_view line);

}  // namespace hlat::telemetry
