#include "eval/task_file.h"

#include "trainer/data/corpus.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace hlat::eval {

const char* task_kind_name(TaskKind kind) {
    switch (kind) {
        case TaskKind::MultipleChoice: return "multiple_choice";
        case TaskKind::Cloze: return "cloze";
        case TaskKind::Perplexity: return "perplexity";
    }
    return "?";
}

static TaskKind kind_from_name(const std::string& name, const std::string& where) {
    for (TaskKind k : {TaskKind::MultipleChoice, TaskKind::Cloze, TaskKind::Perplexity})
        if (name == task_kind_name(k)) return k;
    throw std::runtime_error(
        fmt::format("{}: unknown task kind \"{}\" (multiple_choice, cloze or perplexity)", where, name));
}

static TaskKind kind_from_fields(const nlohmann::json& item, const std::string& where) {
    if (item.contains("choices")) return TaskKind::MultipleChoice;
    if (item.contains("target")) return TaskKind::Cloze;
    if (item.contains("text")) return TaskKind::Perplexity;
    throw std::runtime_error(fmt::format(
        "{}: cannot tell the task kind: an item needs \"choices\" (multiple choice), \"target\" (cloze) or \"text\" "
        "(perplexity)",
        where));
}

static std::string string_field(const nlohmann::json& item, const char* field, const std::string& where) {
    auto it = item.find(field);
    if (it == item.end()) throw std::runtime_error(fmt::format("{}: missing field \"{}\"", where, field));
    if (!it->is_string()) throw std::runtime_error(fmt::format("{}: field \"{}\" must be a string", where, field));
    return it->get<std::string>();
}

static TaskItem parse_item(const nlohmann::json& j, TaskKind kind, const std::string& where) {
    TaskItem item;
    switch (kind) {
        case TaskKind::MultipleChoice: {
            item.context = string_field(j, "context", where);
            auto choices = j.find("choices");
            if (choices == j.end() || !choices->is_array())
                throw std::runtime_error(fmt::format("{}: field \"choices\" must be a list of strings", where));
            if (choices->empty()) throw std::runtime_error(fmt::format("{}: the choice list is empty", where));
            for (const auto& c : *choices) {
                if (!c.is_string())
                    throw std::runtime_error(fmt::format("{}: field \"choices\" must be a list of strings", where));
                item.choices.push_back(c.get<std::string>());
            }
            auto gold = j.find("gold");
            if (gold == j.end() || !gold->is_number_integer())
                throw std::runtime_error(fmt::format("{}: field \"gold\" must be an integer index into choices", where));
            long g = gold->get<long>();
            if (g < 0 || g >= (long)item.choices.size())
                throw std::runtime_error(fmt::format("{}: gold index {} is out of range for {} choices", where, g,
                                                     item.choices.size()));
            item.gold = (int)g;
            break;
        }
        case TaskKind::Cloze:
            item.context = string_field(j, "context", where);
            item.target = string_field(j, "target", where);
            if (item.target.empty()) throw std::runtime_error(fmt::format("{}: the target is empty", where));
            break;
        case TaskKind::Perplexity:
            item.text = string_field(j, "text", where);
            if (item.text.empty()) throw std::runtime_error(fmt::format("{}: the text is empty", where));
            break;
    }
    return item;
}

TaskFile read_task_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error(fmt::format("cannot open task file {}", path));
    TaskFile task;
    task.path = path;
    task.name = std::filesystem::path(path).stem().string();
    task.header = nlohmann::json::object();
    bool kind_known = false;
    std::string line;
    for (long number = 1; std::getline(in, line); number++) {
        const std::string where = fmt::format("{}:{}", path, number);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.find_first_not_of(" \t") == std::string::npos) continue;
        if (!is_valid_utf8(line)) throw std::runtime_error(fmt::format("{}: the line is not valid UTF-8", where));
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(line);
        } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e400
            throw std::runtime_error(fmt::format("{}: not JSON ({})", where, e.what()));
        }
        if (!j.is_object()) throw std::runtime_error(fmt::format("{}: a line must be a JSON object", where));
        if (j.contains("hlat_task")) {
            if (number != 1 || !task.items.empty())
                throw std::runtime_error(fmt::format("{}: a header is only allowed on the first line", where));
            task.header = j;
            task.name = string_field(j, "hlat_task", where);
            task.kind = kind_from_name(string_field(j, "kind", where), where);
            kind_known = true;
            continue;
        }
        if (!kind_known) {
            task.kind = kind_from_fields(j, where);
            kind_known = true;
        }
        task.items.push_back(parse_item(j, task.kind, where));
    }
    if (task.items.empty()) throw std::runtime_error(fmt::format("task file {} has no items", path));
    return task;
}

nlohmann::json item_to_json(const TaskItem& item, TaskKind kind) {
    switch (kind) {
        case TaskKind::MultipleChoice:
            return {{"context", item.context}, {"choices", item.choices}, {"gold", item.gold}};
        case TaskKind::Cloze: return {{"context", item.context}, {"target", item.target}};
        case TaskKind::Perplexity: return {{"text", item.text}};
    }
    return {};
}

}  // namespace hlat::eval
