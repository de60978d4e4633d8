// A config object's fields read one by one, each checked for its type and
// range, and the keys asked for remembered so that any other is reported as
// unknown; and the same calls writing the fields back out. One reader for
// every config section: the trainer's (model, schedule, run, ...) and the
// detectors' (detectors.grad_spike, ...), so every field's error reads alike:
// `config field "model.dim" is 3.5; expected an integer in [2, 65536]`.
#pragma once

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace hlat::telemetry {

// The names of an enum's (or a flag's) values in a config file.
template <class T>
using Choices = std::vector<std::pair<const char*, T>>;

template <class T>
const char* name_of(const T& value, const Choices<T>& choices) {
    for (const auto& [name, v] : choices)
        if (v == value) return name;
    return "?";
}

// Reads the object `name` of `parent`, whose place in the config is `path`
// ("model", "detectors.grad_spike"). A missing object reads as all defaults.
// Errors throw Error (constructible from a string).
template <class Error>
class JsonFields {
  public:
    static constexpr long kNoUpperBound = std::numeric_limits<long>::max();

    JsonFields(const nlohmann::json& parent, const std::string& name, std::string path) : path_(std::move(path)) {
        if (!parent.contains(name)) return;
        obj_ = &parent.at(name);
        if (!obj_->is_object()) fail(path_, *obj_, "an object");
    }

    void integer(const char* key, int& out, long lo, long hi = kNoUpperBound) {
        const nlohmann::json* v = get(key);
        if (!v) return;
        const std::string allowed =
            hi == kNoUpperBound ? fmt::format("an integer >= {}", lo) : fmt::format("an integer in [{}, {}]", lo, hi);
        if (!v->is_number_integer()) fail(path(key), *v, allowed);
        const long x = v->get<long>();
        if (x < lo || x > hi || x > std::numeric_limits<int>::max()) fail(path(key), *v, allowed);
        out = (int)x;
    }

    void seed(const char* key, unsigned long long& out) {
        const nlohmann::json* v = get(key);
        if (!v) return;
        if (!v->is_number_unsigned() && !(v->is_number_integer() && v->get<long long>() >= 0))
            fail(path(key), *v, "a non-negative integer");
        out = v->get<unsigned long long>();
    }

    // In [lo, hi], or (lo, hi] with lo_open; hi infinite: no upper bound.
    void number(const char* key, double& out, double lo, double hi, bool lo_open = false) {
        const nlohmann::json* v = get(key);
        if (!v) return;
        const std::string allowed = std::isinf(hi) ? fmt::format("a number {} {}", lo_open ? ">" : ">=", lo)
                                                   : fmt::format("a number in {}{}, {}]", lo_open ? "(" : "[", lo, hi);
        if (!v->is_number()) fail(path(key), *v, allowed);
        const double x = v->get<double>();
        if (!std::isfinite(x) || x < lo || x > hi || (lo_open && x == lo)) fail(path(key), *v, allowed);
        out = x;
    }

    void boolean(const char* key, bool& out) {
        const nlohmann::json* v = get(key);
        if (!v) return;
        if (!v->is_boolean()) fail(path(key), *v, "true or false");
        out = v->get<bool>();
    }

    void string(const char* key, std::string& out, const std::vector<std::string>& choices = {}) {
        const nlohmann::json* v = get(key);
        if (!v) return;
        const std::string allowed = choices.empty() ? "a string" : one_of(choices);
        if (!v->is_string()) fail(path(key), *v, allowed);
        const std::string s = v->get<std::string>();
        if (!choices.empty() && std::find(choices.begin(), choices.end(), s) == choices.end())
            fail(path(key), *v, allowed);
        out = s;
    }

    template <class T>
    void choice(const char* key, T& out, const Choices<T>& choices) {
        std::string name = name_of(out, choices);
        std::vector<std::string> names;
        for (const auto& [n, value] : choices) names.push_back(n);
        string(key, name, names);
        for (const auto& [n, value] : choices)
            if (name == n) out = value;
    }

    void strings(const char* key, std::vector<std::string>& out) {
        const nlohmann::json* v = get(key);
        if (!v) return;
        if (!v->is_array()) fail(path(key), *v, "an array of strings");
        std::vector<std::string> items;
        for (const nlohmann::json& item : *v) {
            if (!item.is_string() || item.get<std::string>().empty()) fail(path(key), *v, "an array of non-empty strings");
            items.push_back(item.get<std::string>());
        }
        out = items;
    }

    // Reports the first key that no reader asked for.
    void reject_unknown() const {
        if (!obj_) return;
        for (auto it = obj_->begin(); it != obj_->end(); ++it)
            if (!seen_.count(it.key())) throw Error(fmt::format("unknown config field \"{}\"", path(it.key().c_str())));
    }

    [[noreturn]] static void fail(const std::string& field, const nlohmann::json& v, const std::string& allowed) {
        throw Error(fmt::format("config field \"{}\" is {}; expected {}", field, v.dump(), allowed));
    }

  private:
    // "\"a\", \"b\" or \"c\"", in the order given.
    static std::string one_of(const std::vector<std::string>& choices) {
        std::string out;
        for (size_t i = 0; i < choices.size(); i++)
            out += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + ("\"" + choices[i] + "\"");
        return out;
    }
    const nlohmann::json* get(const char* key) {
        seen_.insert(key);
        return obj_ && obj_->contains(key) ? &obj_->at(key) : nullptr;
    }
    std::string path(const char* key) const { return path_ + "." + key; }

    std::string path_;
    const nlohmann::json* obj_ = nullptr;
    std::set<std::string> seen_;
};

// The writing side: the same calls as JsonFields', each field as JSON under
// the name it is read by, so a section lists its fields once for both.
class JsonFieldWriter {
  public:
    explicit JsonFieldWriter(nlohmann::json& out) : out_(out) {}
    void integer(const char* key, const int& v, long, long = 0) { out_[key] = v; }
    void seed(const char* key, const unsigned long long& v) { out_[key] = v; }
    void number(const char* key, const double& v, double, double, bool = false) { out_[key] = v; }
    void boolean(const char* key, const bool& v) { out_[key] = v; }
    void string(const char* key, const std::string& v, const std::vector<std::string>& = {}) { out_[key] = v; }
    void strings(const char* key, const std::vector<std::string>& v) { out_[key] = v; }
    template <class T>
    void choice(const char* key, const T& v, const Choices<T>& choices) {
        out_[key] = name_of(v, choices);
    }

  private:
    nlohmann::json& out_;
};

}  // namespace hlat::telemetry
