#include "telemetry/jsonl_fast.h"

#include "telemetry/untrusted_text.h"

#include <nlohmann/json.hpp>

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

// nlohmann's SAX interface for one line. Depth 1 is the line's object, depth 2
// an object of numbers; any other event declines the line.
class LineSax {
  public:
    LineSax(std::map<std::string, FastJsonlReader::Shape>& shapes, FastLine& out) : shapes_(shapes), out_(out) {}

    bool null() { return value(NAN, depth_ == 1); }
    bool number_integer(int64_t v) { return value((double)v, false); }
    bool number_unsigned(uint64_t v) { return value((double)v, false); }
    bool number_float(double v, const std::string&) { return value(v, false); }
    bool boolean(bool) { return false; }
    bool string(std::string&) { return false; }
    bool binary(nlohmann::json::binary_t&) { return false; }
    bool start_array(size_t) { return false; }
    bool end_array() { return false; }
    bool parse_error(size_t, const std::string&, const nlohmann::json::exception&) { return false; }

    bool start_object(size_t) {
        if (depth_ == 2) return false;
        if (depth_++ == 1) begin_vector();
        return true;
    }
    bool key(std::string& k) {
        if (depth_ == 1) {
            key_ = k;
            out_.keys.push_back(k);  // nulls too: {"loss": 2, "loss": null} is the DOM's "no loss"
            return true;
        }
        if (matching_ && count_ < shape_->sent.size() && k == shape_->sent[count_]) return true;
        if (matching_) names_.assign(shape_->sent.begin(), shape_->sent.begin() + (long)count_), matching_ = false;
        names_.push_back(k);
        return true;
    }
    bool end_object() {
        if (depth_-- == 2) return end_vector();
        return true;
    }

  private:
    bool value(double v, bool skip) {
        if (depth_ == 1) {
            if (!skip) out_.scalars.emplace_back(key_, v);
            return true;
        }
        if (depth_ != 2) return false;  // a bare number, not an object
        values_.push_back((float)v);
        count_++;
        return true;
    }
    void begin_vector() {
        shape_ = &shapes_[key_];
        matching_ = shape_->labels != nullptr;
        count_ = 0;
        values_.clear();
        names_.clear();
    }
    bool end_vector() {
        if (values_.empty()) return false;
        if (matching_ && count_ != shape_->sent.size())
            names_.assign(shape_->sent.begin(), shape_->sent.begin() + (long)count_), matching_ = false;
        if (!matching_ && !reshape(*shape_, std::move(names_))) {
            shape_->labels.reset();
            return false;
        }
        std::vector<float> placed(values_.size());
        for (size_t i = 0; i < values_.size(); i++) placed[shape_->slot[i]] = values_[i];
        out_.vectors.push_back({key_, 0, std::move(placed), 0.0, shape_->labels});
        return true;
    }

    std::map<std::string, FastJsonlReader::Shape>& shapes_;
    FastLine& out_;
    int depth_ = 0;
    std::string key_;
    FastJsonlReader::Shape* shape_ = nullptr;
    bool matching_ = false;  // the names so far are the shape's
    size_t count_ = 0;
    std::vector<std::string> names_;  // the names so far, once they are not the shape's
    std::vector<float> values_;
};

}  // namespace

bool FastJsonlReader::read(std::string_view line, FastLine& out) {
    out.scalars.clear();
    out.vectors.clear();
    out.keys.clear();
    LineSax sax(shapes_, out);
    if (!nlohmann::json::sax_parse(line.begin(), line.end(), &sax)) return false;
    std::sort(out.keys.begin(), out.keys.end());
    if (std::adjacent_find(out.keys.begin(), out.keys.end()) != out.keys.end()) return false;  // the DOM keeps the last
    // In the DOM's order (its objects are std::maps): two names mapped to one (--map iter=step) resolve alike.
    std::sort(out.scalars.begin(), out.scalars.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::sort(out.vectors.begin(), out.vectors.end(), [](const auto& a, const auto& b) { return a.key < b.key; });
    return true;
}

}  // namespace hlat::telemetry
