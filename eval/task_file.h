// Task files: JSONL, one item per line, optionally preceded by a header line.
//
//   {"hlat_task": "next_sentence_mc4", "kind": "multiple_choice", ...}   header (optional)
//   {"context": "The first sentences.", "choices": ["a", "b", "c", "d"], "gold": 2}
//   {"context": "The passage up to its last", "target": "word"}            kind cloze
//   {"text": "A whole held-out document."}                                  kind perplexity
//
// Without a header the kind follows from the first item's fields and the task
// is named after the file, so an exported HellaSwag or PIQA file in the
// multiple-choice form scores unchanged. Other fields of an item are ignored.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace hlat::eval {

enum class TaskKind { MultipleChoice, Cloze, Perplexity };
const char* task_kind_name(TaskKind kind);

struct TaskItem {
    std::string context;               // multiple choice, cloze
    std::vector<std::string> choices;  // multiple choice
    int gold = 0;                      // index into choices
    std::string target;                // cloze: the word after the context
    std::string text;                  // perplexity: the document
};

struct TaskFile {
    std::string path;
    std::string name;
    TaskKind kind = TaskKind::MultipleChoice;
    nlohmann::json header;  // empty object when the file has none
    std::vector<TaskItem> items;
};

// Reads and validates a task file. Errors name the file and line: a line that
// is not UTF-8 or not a JSON object, a missing or mistyped field, an empty
// choice list, a gold index out of range, an empty file.
TaskFile read_task_file(const std::string& path);

// The JSON line of one item of the given kind.
nlohmann::json item_to_json(const TaskItem& item, TaskKind kind);

}  // namespace hlat::eval
