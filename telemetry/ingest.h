// Records from other trainers, as text lines. Formats:
//   jsonl    one object per line: an integer "step" >= 0 and any number of
//            numeric fields, each becoming a metric; "time", when present,
//            is the wall time: seconds since the epoch, milli-, micro- or
//            nanoseconds since it (above 1e11, 1e14, 1e17), or seconds since
//            the run's start (below 1e8, i.e. before 1973: dated from when
//            its first record is read, or from the run's start where the
//            caller knows it, keeping the spacing). A time that reads as
//            after now + 1 day (a clock ahead, a time in another unit:
//            1.7e21) or before 1e8 s is out of bounds (valid_time, the rule
//            of the HTTP start and finish): the record is kept, dated when
//            it is read, and counted, with a message naming the first such
//            line (ParsedBatch::time_note). Values may be numbers,
//            Python's bare NaN / Infinity / -Infinity, or the strings "nan",
//            "inf", "-inf"; null is a missing value (the field is skipped). A
//            line {"step": N, "event": KIND, "detail": TEXT} is an event.
//            "batch": "ID" or ["ID", ...] (strings) names what the step
//            trained on (an external trainer's batch ids: a hash of the
//            token ids, "shard3:offset12345", one per rank or micro-batch):
//            no metric, it becomes the step's batch record (BatchIds). A
//            number or a list of numbers named batch is a metric, as before.
//   csv      a header row with a "step" column, then one row per record; an
//            empty cell is a missing value.
//   llmc     llm.c's main.log: "s:N trl:2.31 lr:0.0006 norm:1.2" (train
//            loss, lr, grad norm), "s:N tel:3.28" (validation loss), "s:N
//            eval:0.29" (HellaSwag accuracy); other "k:v" pairs keep their
//            name, a unit suffix joins it (train_time:120ms -> train_time_ms);
//            modded-nanogpt's "step:12/3200 train_loss:3.28 val_loss:3.30"
//            likewise (its names are read as hlat's by the aliases).
//   steploss, torchtitan, megatron: bare "<step> <loss>" files and those
//            trainers' console output (telemetry/console_formats.h).
//   pattern  console lines matched by a pattern such as
//            "step: {step} loss: {loss} grad_norm: {grad_norm}": {name}
//            captures a number (thousands separators allowed; {_} matches
//            one and keeps nothing; matched by RE2, in time linear in the
//            line, so no line can make it recurse), white space
//            matches any run of white space, ANSI colour codes are ignored and
//            the pattern may match anywhere in a line. Lines it does not match
//            are skipped and counted.
// JSONL alerts: {"step": N, "alert": TITLE, "text": TEXT, "level": "info|
// warning|critical"} is a trainer's own alert (the client's run.alert), an
// event of kind "alert" that the run's session stores and routes like a
// detector's.
// Steps: a record whose step is below the last one read (a trainer resumed
// from an earlier checkpoint logs those steps again) is skipped and counted
// as stale: the first values of a step are kept. Records at the same step
// add the keys it does not have yet. A rename map (--map train_loss=loss) applies
// to the names as they appear in the log.
#pragma once

#include "telemetry/jsonl_fast.h"
#include "telemetry/records.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace re2 {
class RE2;
}

namespace hlat::telemetry {

struct IngestError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

enum class LogFormat { Jsonl, Csv, Llmc, Pattern, TensorBoard, StepLoss, Torchtitan, Megatron };

using KeyMap = std::map<std::string, std::string>;

// Whether `step` is a step hlat keeps: an integer from 0 to 9e15 (doubles hold
// every integer there, and int64 every one of them). Every format and
// endpoint checks steps with this.
bool valid_step(double step);

// Whether `t` is a time hlat keeps: Unix seconds from 1e8 (1973) up to
// now + 1 day, by `now`, this machine's clock. Every door that takes a time
// from outside (an ingested line, a start, a finish) checks it with this.
bool valid_time(double t, double now);

// "jsonl", "csv", "llmc", "pattern", "tensorboard", "steploss", "torchtitan",
// "megatron"; throws IngestError otherwise.
LogFormat format_from_name(const std::string& name);
const char* format_name(LogFormat f);
// The format of a log from its first bytes (a TFRecord header, llm.c's
// "s:N", a JSON object, a CSV header with a step column, lines of "<step>
// <loss>", a torchtitan or Megatron record line), then from its extension. Throws IngestError naming the file when neither says.
LogFormat detect_format(const std::string& path, std::string_view head);
// "a=b,c=d" -> {a: b, c: d}; throws IngestError on a malformed pair.
KeyMap parse_key_map(const std::string& text);

// A step's batch ids ("batch" in its record; docs/external-trainers.md):
// 1 to kMaxBatchIds strings of 1 to kMaxBatchIdBytes bytes, no control
// character. The first record of a step that has them gives them, as a
// step's first value of a key is kept.
struct BatchIds {
    int64_t step = 0;
    std::vector<std::string> ids;
    double wall_time = 0.0;
};
constexpr size_t kMaxBatchIdBytes = 256;
constexpr size_t kMaxBatchIds = 1024;
// The step's batch record as the store keeps it: data {"ids": [...]}.
BatchRecord batch_record(const BatchIds& batch);

struct ParsedBatch {
    std::vector<MetricPoint> points;
    std::vector<VectorPoint> vectors;  // JSONL values that are objects or lists (docs/internals.md)
    std::vector<Event> events;
    std::vector<BatchIds> batches;  // in step order, a step once
    long records = 0;  // lines that gave a record
    long skipped = 0;  // console lines the pattern did not match
    long stale = 0;    // records at a step below the last one, skipped (see above)
    long clamped_times = 0;  // records whose time was out of bounds, dated when read instead
    std::string time_note;   // the first such line's message, once a parser: for the caller to warn with
};

// The first bad line of a chunk: its number, the message ("FILE:LINE: why",
// quoting at most 200 bytes of it, escaped) and where in the chunk the line
// after it starts.
struct BadLine {
    long line = 0;
    std::string message;
    size_t next = 0;
};

// The longest line a record may take: real log lines stay under a few KB. A
// longer one is a bad line (its message says so), and readers need keep no
// more than kMaxLineBytes + 1 bytes of it (append_capped).
constexpr size_t kMaxLineBytes = 1 << 20;

// Appends `bytes` read from a log to `pending`, keeping at most
// kMaxLineBytes + 1 bytes of a line that goes on past that (enough to be
// refused as too long) and dropping the rest of it up to its newline;
// `cutting` carries that across calls. So a line that never ends costs a
// reader 1 MB, not the file.
void append_capped(std::string& pending, std::string_view bytes, bool& cutting);

// Parses a log's lines chunk by chunk, keeping what carries across chunks
// (the CSV header, the last step, line numbers).
class LineParser {
  public:
    // `file` names the log in messages (FILE:LINE). Throws IngestError for a
    // pattern without {step} or a format that is not line-based.
    LineParser(std::string file, LogFormat format, const std::string& pattern = "", KeyMap rename = {});
    // Parses complete lines. Throws IngestError on the first bad line having
    // kept nothing of the chunk and changed no state: a batch is all or nothing.
    ParsedBatch parse(std::string_view text, double default_time);
    // Parses lines up to the first bad one: returns the records before it and
    // sets *bad; the state has moved past the good lines only, so a caller
    // may skip the bad line (skip_lines(1)) and go on from bad->next.
    ParsedBatch parse_until_bad(std::string_view text, double default_time, std::optional<BadLine>* bad);
    int64_t last_step() const { return last_step_; }
    // Counts lines a caller passed over (a bad line it skipped), so that the
    // numbers in later messages stay right.
    void skip_lines(long n) { next_line_ += n; }
    LogFormat format() const { return format_; }
    // Relative times (seconds since the run's start) are dated from
    // `origin`, the run's start when the caller knows it (the HTTP endpoint:
    // a parser per batch must not date each batch from its arrival).
    void set_time_origin(double origin) { time_origin_ = origin; }
    // Whether a record's time was read as seconds since the run's start.
    bool read_relative_time() const { return relative_time_; }
    struct Record;  // one line's step, time, values and event (ingest_record.h)

  private:
    void parse_record(std::string_view line, long number, double default_time, std::vector<std::string>& header,
                      ParsedBatch& out);
    void parse_line(std::string_view line, long number, const std::vector<std::string>& header, Record& out);
    void parse_csv(std::string_view line, long number, const std::vector<std::string>& header, Record& out);
    void parse_jsonl(std::string_view line, long number, Record& out);
    void parse_llmc(std::string_view line, long number, Record& out);
    void parse_pattern(std::string_view line, long number, Record& out);
    void parse_console(std::string_view line, long number, Record& out);
    std::string rename(std::string_view name) const;
    template <typename Bad>
    VectorPoint take_vector(const std::string& key, const nlohmann::json& j, const Bad& bad);
    template <typename Bad>
    static void check_batch_ids(const std::vector<std::string>& ids, const Bad& bad);
    template <typename Bad>
    static void check_names(const std::string& key, const std::vector<std::string>& labels, const Bad& bad);
    double wall_time_of(double time, double default_time);
    double bounded_time(double time, long number, double default_time, ParsedBatch& out);

    std::string file_;
    LogFormat format_;
    KeyMap rename_;
    std::vector<std::string> csv_header_;
    std::shared_ptr<const re2::RE2> pattern_;  // RE2: linear time in the line, whatever it holds
    std::vector<std::string> pattern_names_;
    long next_line_ = 1;
    int64_t last_step_ = -1;
    // A log whose "time" counts seconds from the run's start (not the epoch):
    // the wall time its time 0 is read as, set at its first timed record.
    double time_origin_ = NAN;
    bool relative_time_ = false;
    bool time_noted_ = false;  // a line's time was out of bounds: ParsedBatch::time_note was given
    std::set<std::string> keys_at_last_step_;  // what a record at last_step_ may no longer set
    bool batch_at_last_step_ = false;           // and whether it had its batch ids
    std::map<std::string, std::shared_ptr<const std::vector<std::string>>> vector_labels_;  // last names per key
    FastJsonlReader fast_;  // tried first on every JSON line
    FastLine fast_line_;    // its output, reused line to line
};

}  // namespace hlat::telemetry
