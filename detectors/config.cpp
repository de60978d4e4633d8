#include "detectors/config.h"

#include "telemetry/json_fields.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <limits>
#include <set>

namespace hlat::detectors {
namespace {

using json = nlohmann::json;

const telemetry::Choices<Policy> kPolicies = {
    {"off", Policy::Off}, {"warn", Policy::Warn}, {"halt", Policy::Halt}, {"rewind_skip", Policy::RewindSkip}};
const telemetry::Choices<SpikeRule> kRules = {
    {"additive", SpikeRule::Additive}, {"ratio", SpikeRule::Ratio}, {"zscore", SpikeRule::ZScore}};
constexpr double kNoBound = std::numeric_limits<double>::infinity();

// One detector's section, read with the config's one field reader: the
// calls its settings' fields() make (config.h).
class Fields : public telemetry::JsonFields<DetectorConfigError> {
  public:
    Fields(const json& parent, const std::string& name) : JsonFields(parent, name, "detectors." + name) {}
    void policy(Policy& out) { choice("policy", out, kPolicies); }
    void rule(SpikeRule& out) { choice("rule", out, kRules); }
    void integer(const char* key, int& out, int lo) { JsonFields::integer(key, out, lo); }
    void number(const char* key, double& out, bool positive) { JsonFields::number(key, out, 0.0, kNoBound, positive); }
};


}  // namespace

const char* policy_name(Policy p) {
    return p == Policy::Off ? "off" : p == Policy::Warn ? "warn" : p == Policy::Halt ? "halt" : "rewind_skip";
}

namespace {

// The writing side of fields(): each field as JSON, under the names it is read by.
struct FieldsOut {  // a base, so the JSON exists before the writer that fills it
    json out = json::object();
};
class FieldWriter : public FieldsOut, public telemetry::JsonFieldWriter {
  public:
    FieldWriter() : JsonFieldWriter(FieldsOut::out) {}
    void policy(const Policy& p) { choice("policy", p, kPolicies); }
    void rule(const SpikeRule& r) { choice("rule", r, kRules); }
    void integer(const char* key, const int& v, int lo) { JsonFieldWriter::integer(key, v, lo); }
    void number(const char* key, const double& v, bool) { JsonFieldWriter::number(key, v, 0.0, kNoBound); }
};

std::string known_sections() {
    std::string names;
    DetectorsConfig c;
    c.sections([&](const char* name, auto&) { names += std::string(names.empty() ? "" : ", ") + name; });
    return names + ", webhook, webhook_format, webhook_ca, webhook_page";
}

std::string read_webhook(const json& j) {
    if (!j.contains("webhook")) return "";
    const json& w = j.at("webhook");
    const bool url = w.is_string() && (w.get<std::string>().empty() || w.get<std::string>().rfind("http://", 0) == 0 ||
                                       w.get<std::string>().rfind("https://", 0) == 0);
    if (!url)  // the value is not quoted: a webhook URL's path is its secret
        throw DetectorConfigError("config field \"detectors.webhook\" is not \"\" or an http:// or https:// URL");
    if (is_redacted_webhook(w.get<std::string>())) {
        spdlog::warn("detectors.webhook {} is a redacted URL (a run's page shows it so): no alert is posted; give the "
                     "webhook's whole URL",
                     w.get<std::string>());
        return "";
    }
    return w.get<std::string>();
}

std::string read_text(const json& j, const char* key, const std::string& fallback,
                      std::initializer_list<const char*> allowed = {}) {
    if (!j.contains(key)) return fallback;
    const json& v = j.at(key);
    bool ok = v.is_string();
    if (ok && allowed.size()) {
        ok = false;
        for (const char* a : allowed) ok = ok || v.get<std::string>() == a;
    }
    if (!ok)
        throw DetectorConfigError(fmt::format("config field \"detectors.{}\" is {}; expected {}", key, v.dump(),
                                              allowed.size() ? "\"json\", \"slack\" or \"discord\"" : "a string"));
    return v.get<std::string>();
}

}  // namespace

DetectorsConfig detectors_from_json(const json& j) {
    DetectorsConfig c;
    if (j.is_null()) return c;
    if (!j.is_object()) throw DetectorConfigError("config field \"detectors\" must be an object");
    std::set<std::string> known = {"webhook", "webhook_format", "webhook_ca", "webhook_page"};
    c.sections([&](const char* name, auto&) { known.insert(name); });
    for (auto it = j.begin(); it != j.end(); ++it)
        if (!known.count(it.key()))
            throw DetectorConfigError(
                fmt::format("unknown detector \"detectors.{}\"; known: {}", it.key(), known_sections()));
    c.sections([&](const char* name, auto& section) {
        Fields f(j, name);
        section.fields(f);
        f.reject_unknown();
    });
    c.webhook = read_webhook(j);
    c.webhook_format = read_text(j, "webhook_format", "json", {"json", "slack", "discord"});
    c.webhook_ca = read_text(j, "webhook_ca", "");
    c.webhook_page = read_text(j, "webhook_page", "");
    return c;
}

json detectors_to_json(const DetectorsConfig& config) {
    DetectorsConfig c = config;
    json out = json::object();
    c.sections([&](const char* name, auto& section) {
        FieldWriter w;
        section.fields(w);
        out[name] = std::move(w.out);
    });
    out["webhook"] = c.webhook;
    out["webhook_format"] = c.webhook_format;
    out["webhook_ca"] = c.webhook_ca;
    out["webhook_page"] = c.webhook_page;
    return out;
}

namespace {
constexpr const char* kRedactedPath = "/\u2026";  // "/…"
}

std::string webhook_host(const std::string& url) {
    const size_t scheme_end = url.find("://");
    if (scheme_end == std::string::npos) return "";
    const std::string rest = url.substr(scheme_end + 3);
    // A user:password@ ends at the last '@' before the path (a '?' or '#' in a password included).
    const size_t at = rest.substr(0, rest.find('/')).rfind('@');
    const std::string after = at == std::string::npos ? rest : rest.substr(at + 1);
    return after.substr(0, after.find_first_of("/?#"));
}

std::string redacted_webhook(const std::string& url) {
    if (url.empty()) return "";
    const size_t scheme_end = url.find("://");
    if (scheme_end == std::string::npos) return "\u2026";
    return url.substr(0, scheme_end + 3) + webhook_host(url) + kRedactedPath;
}

bool is_redacted_webhook(const std::string& url) {
    const std::string tail = kRedactedPath;
    return url.size() >= tail.size() && url.compare(url.size() - tail.size(), tail.size(), tail) == 0 &&
           redacted_webhook(url) == url;
}

json config_for_readers(json run_config) {
    if (!run_config.is_object() || !run_config.contains("detectors")) return run_config;
    json& detectors = run_config["detectors"];
    if (detectors.is_object() && detectors.contains("webhook") && detectors["webhook"].is_string())
        detectors["webhook"] = redacted_webhook(detectors["webhook"].get<std::string>());
    else if (detectors.is_object() && detectors.contains("webhook"))
        detectors["webhook"] = "\u2026";  // not a URL (the run's client sent it): shown as nothing either
    return run_config;
}

}  // namespace hlat::detectors
