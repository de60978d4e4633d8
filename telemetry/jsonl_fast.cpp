#include "telemetry/jsonl_fast.h"

#include "telemetry/untrusted_text.h"

#include <simdjson.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <stdexcept>

namespace hlat::telemetry {

bool natural_less(const std::string& a, const std::string& b) {
    size_t i = 0, j = 0;
    while (i < a.size() && j < b.size()) {
        if (std::isdigit((unsigned char)a[i]) && std::isdigit((unsigned char)b[j])) {
            size_t i2 = i, j2 = j;
            while (i2 < a.size() && std::isdigit((unsigned char)a[i2])) i2++;
            while (j2 < b.size() && std::isdigit((unsigned char)b[j2])) j2++;
            const std::string_view x = std::string_view(a).substr(i, i2 - i), y = std::string_view(b).substr(j, j2 - j);
            const std::string_view xs = x.substr(std::min(x.find_first_not_of('0'), x.size())),
                                   ys = y.substr(std::min(y.find_first_not_of('0'), y.size()));
            if (xs.size() != ys.size()) return xs.size() < ys.size();
            if (xs != ys) return xs < ys;
            i = i2, j = j2;
            continue;
        }
        if (a[i] != b[j]) return a[i] < b[j];
        i++, j++;
    }
    if (a.size() - i != b.size() - j) return a.size() - i < b.size() - j;
    return a < b;  // "a1" and "a01": equal as numbers, still two names, in one order whatever order they came in
}

namespace {

// Makes `shape` the one of `names` (in the line's order): natural order,
// every name checked. False for a repeated or a bad name.
bool reshape(FastJsonlReader::Shape& shape, std::vector<std::string> names) {
    std::vector<uint32_t> order(names.size());
    for (uint32_t k = 0; k < order.size(); k++) order[k] = k;
    std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return natural_less(names[a], names[b]); });
    std::vector<std::string> labels(order.size());
    std::vector<uint32_t> slot(order.size());
    for (uint32_t k = 0; k < order.size(); k++) {
        labels[k] = names[order[k]], slot[order[k]] = k;
        if (k > 0 && labels[k] == labels[k - 1]) return false;  // the DOM keeps the last: let it
        try {
            check_name(labels[k], "element name");
        } catch (const std::invalid_argument&) {
            return false;
        }
    }
    // The same names in another order keep their one shared copy (the session compares copies by address first).
    auto same = shape.labels && *shape.labels == labels ? shape.labels
                                                        : std::make_shared<const std::vector<std::string>>(std::move(labels));
    shape = {std::move(names), std::move(slot), std::move(same)};
    return true;
}

// One object of numbers (a statistic named per element) into its values, in
// the natural order of their names. The names usually come as the last line
// of this key had them: then they are only compared, never sorted or copied.
bool read_vector(const std::string& key, simdjson::dom::object elements, FastJsonlReader::Shape& shape,
                 FastLine& out) {
    std::vector<float> values;
    values.reserve(elements.size());
    std::vector<std::string> names;  // the names so far, once they are not the shape's
    bool matching = shape.labels != nullptr;
    for (auto [name, element] : elements) {
        double x = NAN;
        if (!element.is_null() && element.get_double().get(x)) return false;  // not a number: the full way
        if (matching && values.size() < shape.sent.size() && name == shape.sent[values.size()]) {
            values.push_back((float)x);
            continue;
        }
        if (matching) names.assign(shape.sent.begin(), shape.sent.begin() + (long)values.size()), matching = false;
        names.emplace_back(name);
        values.push_back((float)x);
    }
    if (values.empty()) return false;
    if (matching && values.size() != shape.sent.size())
        names.assign(shape.sent.begin(), shape.sent.begin() + (long)values.size()), matching = false;
    if (!matching && !reshape(shape, std::move(names))) {
        shape.labels.reset();
        return false;
    }
    std::vector<float> placed(values.size());
    for (size_t i = 0; i < values.size(); i++) placed[shape.slot[i]] = values[i];
    out.vectors.push_back({key, 0, std::move(placed), 0.0, shape.labels});
    return true;
}

// "batch": a string or a non-empty list of strings (a step's batch ids).
// False for anything else: the full way says what is wrong with it, or reads
// a number named batch as a metric.
bool read_batch(simdjson::dom::element value, FastLine& out) {
    std::string_view id;
    if (!value.get_string().get(id)) {
        out.batch.emplace_back(id);
    } else {
        simdjson::dom::array ids;
        if (value.get_array().get(ids) || ids.size() == 0) return false;
        for (simdjson::dom::element element : ids) {
            if (element.get_string().get(id)) return false;
            out.batch.emplace_back(id);
        }
    }
    out.has_batch = true;
    return true;
}

}  // namespace

FastJsonlReader::FastJsonlReader() = default;
FastJsonlReader::~FastJsonlReader() = default;
FastJsonlReader::FastJsonlReader(const FastJsonlReader& other) : shapes_(other.shapes_) {}
FastJsonlReader& FastJsonlReader::operator=(const FastJsonlReader& other) {
    shapes_ = other.shapes_;
    return *this;
}
FastJsonlReader::FastJsonlReader(FastJsonlReader&&) noexcept = default;
FastJsonlReader& FastJsonlReader::operator=(FastJsonlReader&&) noexcept = default;

bool FastJsonlReader::read(std::string_view line, FastLine& out) {
    out.scalars.clear();
    out.vectors.clear();
    out.keys.clear();
    out.has_batch = false;
    out.batch.clear();
    // simdjson checks the whole line (UTF-8, escapes, control characters,
    // trailing content) before any of it is read.
    if (!parser_) parser_ = std::make_unique<simdjson::dom::parser>();  // made at the first line a reader reads
    simdjson::dom::object object;
    if (parser_->parse(line.data(), line.size()).get_object().get(object)) return false;
    for (auto [name, value] : object) {
        std::string key(name);
        out.keys.push_back(key);  // nulls too: {"loss": 2, "loss": null} is the DOM's "no loss"
        if (value.is_null()) continue;  // a missing value
        if (value.is_object()) {
            if (!read_vector(key, value.get_object().value_unsafe(), shapes_[key], out)) return false;
            continue;
        }
        double x;
        if (value.get_double().get(x)) {  // a string, a boolean, a list: batch ids, or the full way
            if (key != "batch" || !read_batch(value, out)) return false;
            continue;
        }
        out.scalars.emplace_back(std::move(key), x);
    }
    std::sort(out.keys.begin(), out.keys.end());
    if (std::adjacent_find(out.keys.begin(), out.keys.end()) != out.keys.end()) return false;  // the DOM keeps the last
    // In the DOM's order (its objects are std::maps): two names mapped to one (--map iter=step) resolve alike.
    std::sort(out.scalars.begin(), out.scalars.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::sort(out.vectors.begin(), out.vectors.end(), [](const auto& a, const auto& b) { return a.key < b.key; });
    return true;
}

}  // namespace hlat::telemetry
