#include "trainer/config.h"

#include "telemetry/untrusted_text.h"
#include "trainer/faults.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <set>

namespace hlat {
namespace {

using json = nlohmann::json;

// Reads the fields of one JSON object, checking each one's type and range, and
// remembers which keys it consumed so that leftovers are reported as unknown.
class Section {
  public:
    Section(const json& root, const std::string& name) : name_(name) {
        if (!root.contains(name)) return;
        obj_ = &root.at(name);
        if (!obj_->is_object()) fail(name, *obj_, "an object");
    }

    void integer(const char* key, int& out, long lo, long hi) {
        const json* v = get(key);
        if (!v) return;
        if (!v->is_number_integer()) fail(path(key), *v, fmt::format("an integer in [{}, {}]", lo, hi));
        long x = v->get<long>();
        if (x < lo || x > hi) fail(path(key), *v, fmt::format("an integer in [{}, {}]", lo, hi));
        out = (int)x;
    }

    void seed(const char* key, unsigned long long& out) {
        const json* v = get(key);
        if (!v) return;
        if (!v->is_number_unsigned() && !(v->is_number_integer() && v->get<long long>() >= 0))
            fail(path(key), *v, "a non-negative integer");
        out = v->get<unsigned long long>();
    }

    void number(const char* key, double& out, double lo, double hi, bool lo_open = false) {
        const json* v = get(key);
        if (!v) return;
        std::string allowed = fmt::format("a number in {}{}, {}]", lo_open ? "(" : "[", lo, hi);
        if (!v->is_number()) fail(path(key), *v, allowed);
        double x = v->get<double>();
        if (!std::isfinite(x) || x < lo || x > hi || (lo_open && x == lo)) fail(path(key), *v, allowed);
        out = x;
    }

    void boolean(const char* key, bool& out) {
        const json* v = get(key);
        if (!v) return;
        if (!v->is_boolean()) fail(path(key), *v, "true or false");
        out = v->get<bool>();
    }

    void string(const char* key, std::string& out, const std::set<std::string>& choices = {}) {
        const json* v = get(key);
        if (!v) return;
        std::string allowed = "a string";
        if (!choices.empty()) {
            allowed = "one of";
            for (auto& c : choices) allowed += " \"" + c + "\"";
        }
        if (!v->is_string()) fail(path(key), *v, allowed);
        std::string s = v->get<std::string>();
        if (!choices.empty() && !choices.count(s)) fail(path(key), *v, allowed);
        out = s;
    }

    void strings(const char* key, std::vector<std::string>& out) {
        const json* v = get(key);
        if (!v) return;
        if (!v->is_array()) fail(path(key), *v, "an array of strings");
        std::vector<std::string> items;
        for (const json& item : *v) {
            if (!item.is_string() || item.get<std::string>().empty()) fail(path(key), *v, "an array of non-empty strings");
            items.push_back(item.get<std::string>());
        }
        out = items;
    }

    // Reports the first key that no reader asked for.
    void reject_unknown() const {
        if (!obj_) return;
        for (auto it = obj_->begin(); it != obj_->end(); ++it) {
            if (!seen_.count(it.key())) {
                throw ConfigError(fmt::format("unknown config field \"{}\"", path(it.key().c_str())));
            }
        }
    }

    [[noreturn]] static void fail(const std::string& field, const json& v, const std::string& allowed) {
        throw ConfigError(
            fmt::format("config field \"{}\" is {}; expected {}", field, v.dump(), allowed));
    }

  private:
    const json* get(const char* key) {
        seen_.insert(key);
        if (!obj_ || !obj_->contains(key)) return nullptr;
        return &obj_->at(key);
    }
    std::string path(const char* key) const { return name_ + "." + key; }

    std::string name_;
    const json* obj_ = nullptr;
    std::set<std::string> seen_;
};

const char* init_scaling_name(InitScaling s) {
    switch (s) {
        case InitScaling::PerLayer: return "per_layer";
        case InitScaling::TotalLayers: return "total_layers";
        case InitScaling::None: return "none";
    }
    return "?";
}

}  // namespace

const char* precision_mode_name(PrecisionMode m) {
    switch (m) {
        case PrecisionMode::Fp32: return "fp32";
        case PrecisionMode::Bf16: return "bf16";
        case PrecisionMode::Bf16Sr: return "bf16_sr";
        case PrecisionMode::Mixed: return "mixed";
    }
    return "?";
}

namespace {

constexpr long kMaxInt = std::numeric_limits<int>::max();

// One parser per config section: each key read, checked and its range named.
void parse_model(const json& j, ModelConfig& c) {
    Section m(j, "model");
    m.integer("vocab_size", c.vocab_size, 2, 1 << 24);
    m.integer("dim", c.dim, 2, 65536);
    m.integer("n_layers", c.n_layers, 1, 1024);
    m.integer("n_heads", c.n_heads, 1, 1024);
    m.integer("n_kv_heads", c.n_kv_heads, 1, 1024);
    m.integer("hidden_dim", c.hidden_dim, 1, 1 << 20);
    m.integer("max_seq_len", c.max_seq_len, 1, 1 << 20);
    m.number("norm_eps", c.norm_eps, 0.0, 1.0, true);
    m.number("rope_theta", c.rope_theta, 1.0, 1e12);
    m.number("init_std", c.init_std, 0.0, 10.0, true);
    std::string scaling = init_scaling_name(c.init_scaling);
    m.string("init_scaling", scaling, {"per_layer", "total_layers", "none"});
    c.init_scaling = scaling == "per_layer"      ? InitScaling::PerLayer
                     : scaling == "total_layers" ? InitScaling::TotalLayers
                                                 : InitScaling::None;
    m.reject_unknown();
}

void parse_optimizer(const json& j, OptimizerConfig& c) {
    Section o(j, "optimizer");
    o.number("beta1", c.beta1, 0.0, 1.0);
    o.number("beta2", c.beta2, 0.0, 1.0);
    o.number("eps", c.eps, 0.0, 1.0, true);
    o.number("weight_decay", c.weight_decay, 0.0, 10.0);
    o.boolean("decay_norms_and_embeddings", c.decay_norms_and_embeddings);
    o.number("grad_clip", c.grad_clip, 0.0, 1e9);
    o.reject_unknown();
}

void parse_schedule(const json& j, ScheduleConfig& c) {
    Section s(j, "schedule");
    s.number("max_lr", c.max_lr, 0.0, 10.0);
    s.number("min_lr", c.min_lr, 0.0, 10.0);
    s.integer("warmup_steps", c.warmup_steps, 0, kMaxInt);
    s.integer("total_steps", c.total_steps, 1, kMaxInt);
    s.reject_unknown();
}

void parse_data(const json& j, DataConfig& c) {
    Section d(j, "data");
    d.strings("corpus", c.corpus);
    d.string("text_field", c.text_field);
    d.string("tokenizer", c.tokenizer);
    d.number("heldout_percent", c.heldout_percent, 0.0, 50.0);
    d.boolean("dedup_paragraphs", c.dedup_paragraphs);
    d.integer("prefetch_batches", c.prefetch_batches, 1, 1024);
    d.reject_unknown();
}

void parse_run(const json& j, RunConfig& c) {
    Section r(j, "run");
    r.integer("batch_size", c.batch_size, 1, 1 << 16);
    r.integer("seq_len", c.seq_len, 1, 1 << 20);
    r.integer("grad_accum", c.grad_accum, 1, 1 << 16);
    r.seed("seed", c.seed);
    r.integer("threads", c.threads, 1, 1024);
    r.boolean("activation_checkpointing", c.activation_checkpointing);
    r.string("data", c.data);
    r.string("data_dtype", c.data_dtype, {"uint16", "uint32"});
    r.number("peak_gflops", c.peak_gflops, 0.0, 1e9);
    r.integer("log_every", c.log_every, 1, kMaxInt);
    r.string("out_dir", c.out_dir);
    r.string("name", c.name);
    r.string("store", c.store);
    r.integer("tensor_norms_every", c.tensor_norms_every, 0, kMaxInt);
    r.integer("checkpoint_every", c.checkpoint_every, 0, kMaxInt);
    r.integer("keep_checkpoints", c.keep_checkpoints, 0, kMaxInt);
    r.integer("eval_every", c.eval_every, 0, kMaxInt);
    r.integer("eval_batches", c.eval_batches, 1, 100000);
    r.strings("inject", c.inject);
    r.reject_unknown();
}

void parse_precision(const json& j, PrecisionConfig& c) {
    Section p(j, "precision");
    std::string mode = precision_mode_name(c.mode);
    p.string("mode", mode, {"fp32", "bf16", "bf16_sr", "mixed"});
    for (PrecisionMode pm : {PrecisionMode::Fp32, PrecisionMode::Bf16, PrecisionMode::Bf16Sr, PrecisionMode::Mixed})
        if (mode == precision_mode_name(pm)) c.mode = pm;
    auto dtype = [&](const char* key, bool& is_bf16) {
        std::string v = is_bf16 ? "bf16" : "fp32";
        p.string(key, v, {"fp32", "bf16"});
        is_bf16 = v == "bf16";
    };
    dtype("softmax", c.softmax_bf16);
    dtype("grad_accum", c.grad_accum_bf16);
    dtype("reduce", c.reduce_bf16);
    p.boolean("sr_moments", c.sr_moments);
    p.boolean("sr_key_rank", c.sr_key_rank);
    p.reject_unknown();
}

void parse_parallel(const json& j, ParallelConfig& c) {
    Section par(j, "parallel");
    par.integer("dp", c.dp, 1, 4096);
    par.integer("tp", c.tp, 1, 64);
    par.boolean("zero1", c.zero1);
    par.integer("check_every", c.check_every, 0, kMaxInt);
    par.boolean("hash_grads", c.hash_grads);
    par.integer("resync_every", c.resync_every, 0, kMaxInt);
    par.reject_unknown();
}

}  // namespace

TrainConfig config_from_json(const json& j) {
    if (!j.is_object()) throw ConfigError("config must be a JSON object");
    static const std::set<std::string> sections = {"model", "optimizer", "schedule", "data", "run", "precision", "parallel", "detectors"};
    for (auto it = j.begin(); it != j.end(); ++it) {
        if (!sections.count(it.key()))
            throw ConfigError(fmt::format(
                "unknown config section \"{}\"; expected model, optimizer, schedule, data, run, precision, parallel or detectors", it.key()));
    }
    TrainConfig c;
    parse_model(j, c.model);
    parse_optimizer(j, c.optimizer);
    parse_schedule(j, c.schedule);
    parse_data(j, c.data);
    parse_run(j, c.run);
    parse_precision(j, c.precision);
    parse_parallel(j, c.parallel);
    try {
        c.detectors = detectors::detectors_from_json(j.contains("detectors") ? j.at("detectors") : json());
    } catch (const detectors::DetectorConfigError& e) {
        throw ConfigError(e.what());
    }
    validate_config(c);
    return c;
}

void validate_config(const TrainConfig& c) {
    const ModelConfig& m = c.model;
    if (m.dim % m.n_heads != 0)
        throw ConfigError(fmt::format("model.n_heads = {} must divide model.dim = {}", m.n_heads, m.dim));
    if (m.head_dim() % 2 != 0)
        throw ConfigError(fmt::format(
            "head dim model.dim / model.n_heads = {} must be even for RoPE", m.head_dim()));
    if (m.n_heads % m.n_kv_heads != 0)
        throw ConfigError(fmt::format("model.n_kv_heads = {} must divide model.n_heads = {}",
                                      m.n_kv_heads, m.n_heads));
    if (c.run.seq_len > m.max_seq_len)
        throw ConfigError(fmt::format("run.seq_len = {} exceeds model.max_seq_len = {}",
                                      c.run.seq_len, m.max_seq_len));
    if (c.schedule.min_lr > c.schedule.max_lr)
        throw ConfigError(fmt::format("schedule.min_lr = {} exceeds schedule.max_lr = {}",
                                      c.schedule.min_lr, c.schedule.max_lr));
    if (c.schedule.warmup_steps > c.schedule.total_steps)
        throw ConfigError(fmt::format("schedule.warmup_steps = {} exceeds schedule.total_steps = {}",
                                      c.schedule.warmup_steps, c.schedule.total_steps));
    if (!c.data.corpus.empty() && c.data.tokenizer.empty())
        throw ConfigError("data.corpus is set but data.tokenizer is not: a corpus needs a SentencePiece model");
    if (c.run.out_dir.empty()) throw ConfigError("run.out_dir must not be empty");
    parse_faults(c.run.inject);  // throws ConfigError naming a bad fault
    if ((long)c.run.batch_size * c.run.seq_len > std::numeric_limits<int>::max() / 4)
        throw ConfigError("run.batch_size * run.seq_len is too large");
    const PrecisionConfig& p = c.precision;
    if (p.mode == PrecisionMode::Fp32 && (p.softmax_bf16 || p.grad_accum_bf16 || p.reduce_bf16))
        throw ConfigError("precision.softmax, grad_accum and reduce can be \"bf16\" only with a bf16 precision.mode");
    if ((p.sr_moments || p.sr_key_rank) && p.mode != PrecisionMode::Bf16Sr)
        throw ConfigError("precision.sr_moments and sr_key_rank need precision.mode \"bf16_sr\"");
    const ParallelConfig& par = c.parallel;
    auto divisible = [&](const char* what, int n) {
        if (n % par.tp != 0)
            throw ConfigError(fmt::format("parallel.tp = {} must divide {} = {}", par.tp, what, n));
    };
    divisible("model.n_heads", m.n_heads);
    divisible("model.n_kv_heads", m.n_kv_heads);
    divisible("model.hidden_dim", m.hidden_dim);
    divisible("model.vocab_size", m.vocab_size);
    Faults faults = parse_faults(c.run.inject);
    if (faults.allreduce_bug != AllreduceBug::None && (par.dp < 2 || par.zero1))
        throw ConfigError("the allreduce_bug fault needs plain data parallelism: parallel.dp >= 2 without zero1");
    if (par.hash_grads && par.zero1)
        throw ConfigError("parallel.hash_grads needs whole reduced gradients on every replica: not with zero1");
}

TrainConfig load_config(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw ConfigError(fmt::format("cannot open config file {}", path));
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (telemetry::json_depth(text) > telemetry::kMaxJsonDepth)
        throw ConfigError(fmt::format("config file {} nests arrays or objects more than {} deep", path,
                                      telemetry::kMaxJsonDepth));
    json j;
    try {
        j = json::parse(text);
    } catch (const json::parse_error& e) {  // its "last read" may quote raw bytes: escaped and cut
        throw ConfigError(fmt::format("config file {} is not valid JSON: {}", path, telemetry::excerpt(e.what(), 300, false)));
    }
    try {
        return config_from_json(j);
    } catch (const ConfigError& e) {
        throw ConfigError(fmt::format("{}: {}", path, e.what()));
    }
}

json config_to_json(const TrainConfig& c) {
    return {
        {"model",
         {{"vocab_size", c.model.vocab_size},
          {"dim", c.model.dim},
          {"n_layers", c.model.n_layers},
          {"n_heads", c.model.n_heads},
          {"n_kv_heads", c.model.n_kv_heads},
          {"hidden_dim", c.model.hidden_dim},
          {"max_seq_len", c.model.max_seq_len},
          {"norm_eps", c.model.norm_eps},
          {"rope_theta", c.model.rope_theta},
          {"init_std", c.model.init_std},
          {"init_scaling", init_scaling_name(c.model.init_scaling)}}},
        {"optimizer",
         {{"beta1", c.optimizer.beta1},
          {"beta2", c.optimizer.beta2},
          {"eps", c.optimizer.eps},
          {"weight_decay", c.optimizer.weight_decay},
          {"decay_norms_and_embeddings", c.optimizer.decay_norms_and_embeddings},
          {"grad_clip", c.optimizer.grad_clip}}},
        {"schedule",
         {{"max_lr", c.schedule.max_lr},
          {"min_lr", c.schedule.min_lr},
          {"warmup_steps", c.schedule.warmup_steps},
          {"total_steps", c.schedule.total_steps}}},
        {"data",
         {{"corpus", c.data.corpus},
          {"text_field", c.data.text_field},
          {"tokenizer", c.data.tokenizer},
          {"heldout_percent", c.data.heldout_percent},
          {"dedup_paragraphs", c.data.dedup_paragraphs},
          {"prefetch_batches", c.data.prefetch_batches}}},
        {"run",
         {{"batch_size", c.run.batch_size},
          {"seq_len", c.run.seq_len},
          {"grad_accum", c.run.grad_accum},
          {"seed", c.run.seed},
          {"threads", c.run.threads},
          {"activation_checkpointing", c.run.activation_checkpointing},
          {"data", c.run.data},
          {"data_dtype", c.run.data_dtype},
          {"peak_gflops", c.run.peak_gflops},
          {"log_every", c.run.log_every},
          {"out_dir", c.run.out_dir},
          {"name", c.run.name},
          {"store", c.run.store},
          {"tensor_norms_every", c.run.tensor_norms_every},
          {"checkpoint_every", c.run.checkpoint_every},
          {"keep_checkpoints", c.run.keep_checkpoints},
          {"eval_every", c.run.eval_every},
          {"eval_batches", c.run.eval_batches},
          {"inject", c.run.inject}}},
        {"precision",
         {{"mode", precision_mode_name(c.precision.mode)},
          {"softmax", c.precision.softmax_bf16 ? "bf16" : "fp32"},
          {"grad_accum", c.precision.grad_accum_bf16 ? "bf16" : "fp32"},
          {"reduce", c.precision.reduce_bf16 ? "bf16" : "fp32"},
          {"sr_moments", c.precision.sr_moments},
          {"sr_key_rank", c.precision.sr_key_rank}}},
        {"parallel",
         {{"dp", c.parallel.dp},
          {"tp", c.parallel.tp},
          {"zero1", c.parallel.zero1},
          {"check_every", c.parallel.check_every},
          {"hash_grads", c.parallel.hash_grads},
          {"resync_every", c.parallel.resync_every}}},
        {"detectors", detectors::detectors_to_json(c.detectors)},
    };
}

}  // namespace hlat
