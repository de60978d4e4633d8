#include "telemetry/console_formats.h"

#include "telemetry/key_aliases.h"

#include "telemetry/log_text.h"

#include <cctype>
#include <optional>

namespace hlat::telemetry {
namespace {

std::vector<std::string_view> words(std::string_view s) {
    std::vector<std::string_view> out;
    size_t i = 0;
    while (i < s.size()) {
        while (i < s.size() && std::isspace((unsigned char)s[i])) i++;
        size_t start = i;
        while (i < s.size() && !std::isspace((unsigned char)s[i])) i++;
        if (i > start) out.push_back(s.substr(start, i - start));
    }
    return out;
}

bool all_digits(std::string_view s) {
    if (s.empty()) return false;
    for (char c : s)
        if (!std::isdigit((unsigned char)c)) return false;
    return true;
}

// The position of `word` where it starts a word (at the line's start or
// after white space), or npos.
size_t find_word(std::string_view line, std::string_view word) {
    for (size_t at = line.find(word); at != std::string_view::npos; at = line.find(word, at + 1))
        if (at == 0 || std::isspace((unsigned char)line[at - 1])) return at;
    return std::string_view::npos;
}

// "  10/  500000 |" after Megatron's "iteration": the step, and where the
// first '|' is; nullopt when the text is not that.
std::optional<std::pair<double, size_t>> megatron_iteration(std::string_view rest, bool of_total) {
    std::vector<std::string_view> head = words(rest.substr(0, rest.find('|')));
    if (rest.find('|') == std::string_view::npos || head.empty()) return std::nullopt;
    std::string_view step = head[0];
    if (of_total) {  // "10/" "500000", or "10/500000"
        size_t slash = step.find('/');
        if (slash == std::string_view::npos) return std::nullopt;
        step = step.substr(0, slash);
    }
    if (!all_digits(step)) return std::nullopt;
    double v;
    parse_number(step, &v);
    return std::make_pair(v, rest.find('|'));
}

}  // namespace

bool parse_steploss_line(std::string_view line, Fields& out) {
    std::vector<std::string_view> w = words(line);
    double step, loss;
    if (w.size() != 2 || !all_digits(w[0]) || !parse_number(w[0], &step) || !parse_number(w[1], &loss)) return false;
    out.push_back({"step", step});
    out.push_back({"loss", loss});
    return true;
}

bool parse_torchtitan_line(std::string_view raw, Fields& out) {
    const std::string line = strip_ansi(raw);
    const size_t at = find_word(line, "step:");
    if (at == std::string::npos) return false;
    const bool validation = at >= 9 && std::string_view(line).substr(at - 9, 9) == "validate ";
    std::vector<std::string_view> w = words(std::string_view(line).substr(at));
    Fields fields;
    bool has_step = false, has_loss = false;
    for (size_t i = 0; i + 1 < w.size(); i++) {
        if (w[i].size() < 2 || w[i].back() != ':') continue;
        std::string name(w[i].substr(0, w[i].size() - 1)), unit;
        double v;
        // "42.30GiB(44.52%)": the share in parentheses is dropped
        if (!number_and_unit(w[i + 1].substr(0, w[i + 1].find('(')), &v, &unit, true)) continue;  // a label of something else
        i++;
        if (name == "step" && (!unit.empty() || has_step)) return false;
        has_step |= name == "step", has_loss |= name == "loss";
        // A validation line's loss is torchtitan's "validation_metrics/loss", which
        // the alias table reads as heldout_loss; its other numbers keep their names.
        if (validation && name != "step")
            name = alias_of("validation_metrics/" + name).value_or("validation_" + name);
        fields.push_back({unit.empty() ? name : name + "_" + unit, v});
    }
    if (!has_step || !has_loss) return false;
    out.insert(out.end(), fields.begin(), fields.end());
    return true;
}

bool parse_megatron_line(std::string_view raw, Fields& out) {
    const std::string text = strip_ansi(raw);
    std::string_view line = text;
    size_t at = line.find("validation loss at iteration ");
    const bool validation = at != std::string_view::npos;
    if (validation) at += std::string_view("validation loss at iteration ").size();
    else if ((at = find_word(line, "iteration")) != std::string_view::npos) at += std::string_view("iteration").size();
    else return false;
    auto step = megatron_iteration(line.substr(at), !validation);
    if (!step) return false;
    out.push_back({"step", step->first});
    std::string_view rest = line.substr(at + step->second + 1);
    while (!rest.empty()) {
        size_t bar = rest.find('|');
        std::string_view cell = rest.substr(0, bar);
        rest = bar == std::string_view::npos ? std::string_view() : rest.substr(bar + 1);
        size_t colon = cell.rfind(':');
        double v;
        if (colon == std::string_view::npos || !parse_number(cell.substr(colon + 1), &v, true)) continue;
        std::string name(trim(cell.substr(0, colon)));
        if (name.empty()) continue;
        if (validation) {  // "lm loss value" -> "lm loss validation", Megatron's TensorBoard name
            if (name.size() > 6 && name.substr(name.size() - 6) == " value") name.resize(name.size() - 6);
            name += " validation";
        }
        out.push_back({name, v});
    }
    return true;
}

bool is_modded_nanogpt_line(std::string_view line) {
    std::string_view t = trim(line);
    return t.rfind("step:", 0) == 0 && t.size() > 5 && std::isdigit((unsigned char)t[5]) &&
           t.find('/') < t.find_first_of(" \t");
}

std::string console_format_of(std::string_view head) {
    // The head may end mid-line: that line is left out when others are there.
    if (!head.empty() && head.back() != '\n' && head.find('\n') != std::string_view::npos)
        head = head.substr(0, head.rfind('\n'));
    bool all_steploss = true, any_line = false;
    size_t pos = 0;
    while (pos < head.size()) {
        size_t nl = head.find('\n', pos);
        std::string_view line = head.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
        pos = nl == std::string_view::npos ? head.size() : nl + 1;
        if (trim(line).empty()) continue;
        Fields ignored;
        if (is_modded_nanogpt_line(line)) return "llmc";  // after its own source code
        if (parse_torchtitan_line(line, ignored)) return "torchtitan";
        if (parse_megatron_line(line, ignored)) return "megatron";
        any_line = true;
        all_steploss = all_steploss && parse_steploss_line(line, ignored);
    }
    return any_line && all_steploss ? "steploss" : "";
}

}  // namespace hlat::telemetry
