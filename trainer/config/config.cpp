#include "trainer/config/config.h"

#include "telemetry/json_fields.h"
#include "telemetry/untrusted_text.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <set>

namespace hlat {
namespace {

using json = nlohmann::json;

using telemetry::Choices;
// One section of the config (model, schedule, ...), read and written.
using Section = telemetry::JsonFields<ConfigError>;
using SectionWriter = telemetry::JsonFieldWriter;

}  // namespace

const char* precision_mode_name(PrecisionMode m) {
    switch (m) {
        case PrecisionMode::Fp32: return "fp32";
        case PrecisionMode::Bf16: return "bf16";
        case PrecisionMode::Bf16Sr: return "bf16_sr";
        case PrecisionMode::Mixed: return "mixed";
        case PrecisionMode::Bf16Kahan: return "bf16_kahan";
    }
    return "?";
}

namespace {

constexpr long kMaxInt = std::numeric_limits<int>::max();

const Choices<InitScaling> kInitScalings = {
    {"per_layer", InitScaling::PerLayer}, {"total_layers", InitScaling::TotalLayers}, {"none", InitScaling::None}};
const Choices<PrecisionMode> kPrecisionModes = {
    {precision_mode_name(PrecisionMode::Fp32), PrecisionMode::Fp32},
    {precision_mode_name(PrecisionMode::Bf16), PrecisionMode::Bf16},
    {precision_mode_name(PrecisionMode::Bf16Sr), PrecisionMode::Bf16Sr},
    {precision_mode_name(PrecisionMode::Mixed), PrecisionMode::Mixed},
    {precision_mode_name(PrecisionMode::Bf16Kahan), PrecisionMode::Bf16Kahan}};
const Choices<bool> kDtypes = {{"fp32", false}, {"bf16", true}};  // the precision knobs: is it bf16?
// precision.attention: its products in the dtype of every other matmul of the
// mode ("matmul"), or in fp32 whatever the mode: is it fp32?
const Choices<bool> kAttentionDtypes = {{"matmul", false}, {"fp32", true}};

// Each section's fields, listed once, with their ranges: `f` is a Section
// (reading a config) or a SectionWriter (writing one). C is the section's
// struct, const when writing.
template <class F, class C>
void model_fields(F& f, C& c) {
    f.integer("vocab_size", c.vocab_size, 2, 1 << 24);
    f.integer("dim", c.dim, 2, 65536);
    f.integer("n_layers", c.n_layers, 1, 1024);
    f.integer("n_heads", c.n_heads, 1, 1024);
    f.integer("n_kv_heads", c.n_kv_heads, 1, 1024);
    f.integer("hidden_dim", c.hidden_dim, 1, 1 << 20);
    f.integer("max_seq_len", c.max_seq_len, 1, 1 << 20);
    f.number("norm_eps", c.norm_eps, 0.0, 1.0, true);
    f.number("rope_theta", c.rope_theta, 1.0, 1e12);
    f.number("init_std", c.init_std, 0.0, 10.0, true);
    f.choice("init_scaling", c.init_scaling, kInitScalings);
    f.boolean("qk_norm", c.qk_norm);
    f.number("z_loss", c.z_loss, 0.0, 100.0);
}

template <class F, class C>
void optimizer_fields(F& f, C& c) {
    f.number("beta1", c.beta1, 0.0, 1.0);
    f.number("beta2", c.beta2, 0.0, 1.0);
    f.number("eps", c.eps, 0.0, 1.0, true);
    f.number("weight_decay", c.weight_decay, 0.0, 10.0);
    f.boolean("decay_norms_and_embeddings", c.decay_norms_and_embeddings);
    f.number("grad_clip", c.grad_clip, 0.0, 1e9);
}

template <class F, class C>
void schedule_fields(F& f, C& c) {
    f.number("max_lr", c.max_lr, 0.0, 10.0);
    f.number("min_lr", c.min_lr, 0.0, 10.0);
    f.integer("warmup_steps", c.warmup_steps, 0, kMaxInt);
    f.integer("total_steps", c.total_steps, 1, kMaxInt);
    f.integer("ramp_start", c.ramp_start, -1, kMaxInt);
    f.integer("ramp_steps", c.ramp_steps, 1, kMaxInt);
    f.number("peak_lr", c.peak_lr, 0.0, 10.0);
    f.integer("ramp_hold", c.ramp_hold, -1, kMaxInt);
}

template <class F, class C>
void data_fields(F& f, C& c) {
    f.strings("corpus", c.corpus);
    f.string("text_field", c.text_field);
    f.string("tokenizer", c.tokenizer);
    f.number("heldout_percent", c.heldout_percent, 0.0, 50.0);
    f.boolean("dedup_paragraphs", c.dedup_paragraphs);
    f.integer("prefetch_batches", c.prefetch_batches, 1, 1024);
}

template <class F, class C>
void run_fields(F& f, C& c) {
    f.integer("batch_size", c.batch_size, 1, 1 << 16);
    f.integer("seq_len", c.seq_len, 1, 1 << 20);
    f.integer("grad_accum", c.grad_accum, 1, 1 << 16);
    f.seed("seed", c.seed);
    f.integer("data_seed", c.data_seed, -1, kMaxInt);
    f.integer("threads", c.threads, 1, 1024);
    f.boolean("activation_checkpointing", c.activation_checkpointing);
    f.string("data", c.data);
    f.string("data_dtype", c.data_dtype, {"uint16", "uint32"});
    f.number("peak_gflops", c.peak_gflops, 0.0, 1e9);
    f.number("price_per_rank_hour", c.price_per_rank_hour, 0.0, 1e9);
    f.integer("log_every", c.log_every, 1, kMaxInt);
    f.string("out_dir", c.out_dir);
    f.string("name", c.name);
    f.string("store", c.store);
    f.integer("tensor_norms_every", c.tensor_norms_every, 0, kMaxInt);
    f.integer("internals_every", c.internals_every, 0, kMaxInt);
    f.integer("checkpoint_every", c.checkpoint_every, 0, kMaxInt);
    f.integer("keep_checkpoints", c.keep_checkpoints, 0, kMaxInt);
    f.integer("eval_every", c.eval_every, 0, kMaxInt);
    f.integer("eval_batches", c.eval_batches, 1, 100000);
    f.strings("inject", c.inject);
}

template <class F, class C>
void precision_fields(F& f, C& c) {
    f.choice("mode", c.mode, kPrecisionModes);
    f.choice("softmax", c.softmax_bf16, kDtypes);
    f.choice("attention", c.attention_fp32, kAttentionDtypes);
    f.choice("grad_accum", c.grad_accum_bf16, kDtypes);
    f.choice("reduce", c.reduce_bf16, kDtypes);
    f.boolean("sr_moments", c.sr_moments);
    f.boolean("sr_key_rank", c.sr_key_rank);
}

template <class F, class C>
void parallel_fields(F& f, C& c) {
    f.integer("dp", c.dp, 1, 4096);
    f.integer("tp", c.tp, 1, 64);
    f.boolean("sp", c.sp);
    f.boolean("zero1", c.zero1);
    f.integer("check_every", c.check_every, 0, kMaxInt);
    f.boolean("hash_grads", c.hash_grads);
    f.integer("resync_every", c.resync_every, 0, kMaxInt);
    f.integer("health_every", c.health_every, 0, kMaxInt);
}

// Calls visit(name, fields) for each section but detectors (detectors/config.h
// reads and writes its own), where fields(f) lists that section's fields to f.
template <class Config, class Visit>
void for_each_section(Config& c, Visit&& visit) {
    visit("model", [&](auto& f) { model_fields(f, c.model); });
    visit("optimizer", [&](auto& f) { optimizer_fields(f, c.optimizer); });
    visit("schedule", [&](auto& f) { schedule_fields(f, c.schedule); });
    visit("data", [&](auto& f) { data_fields(f, c.data); });
    visit("run", [&](auto& f) { run_fields(f, c.run); });
    visit("precision", [&](auto& f) { precision_fields(f, c.precision); });
    visit("parallel", [&](auto& f) { parallel_fields(f, c.parallel); });
}

}  // namespace

TrainConfig config_from_json(const json& j) {
    if (!j.is_object()) throw ConfigError("config must be a JSON object");
    TrainConfig c;
    std::set<std::string> sections = {"detectors"};
    std::string expected;
    for_each_section(c, [&](const char* name, auto) {
        sections.insert(name);
        expected += std::string(name) + ", ";
    });
    for (auto it = j.begin(); it != j.end(); ++it)
        if (!sections.count(it.key()))
            throw ConfigError(fmt::format("unknown config section \"{}\"; expected {}or detectors", it.key(),
                                          expected.substr(0, expected.size() - 2) + " "));
    for_each_section(c, [&](const char* name, auto fields) {
        Section section(j, name, name);
        fields(section);
        section.reject_unknown();
    });
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
    if (c.schedule.ramp_start >= 0 && !(c.schedule.peak_lr > 0 && c.schedule.max_lr > 0))
        throw ConfigError("schedule.ramp_start needs schedule.max_lr > 0 and schedule.peak_lr > 0 (the ramp goes "
                          "geometrically from one to the other)");
    if (c.schedule.warmup_steps > c.schedule.total_steps)
        throw ConfigError(fmt::format("schedule.warmup_steps = {} exceeds schedule.total_steps = {}",
                                      c.schedule.warmup_steps, c.schedule.total_steps));
    if (!c.data.corpus.empty() && c.data.tokenizer.empty())
        throw ConfigError("data.corpus is set but data.tokenizer is not: a corpus needs a SentencePiece model");
    if (c.run.out_dir.empty()) throw ConfigError("run.out_dir must not be empty");
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
    // Fewer kv heads than ranks: each kv head is shared by tp / n_kv_heads ranks.
    if (m.n_kv_heads % par.tp != 0 && par.tp % m.n_kv_heads != 0)
        throw ConfigError(fmt::format("parallel.tp = {} must divide model.n_kv_heads = {} or be a multiple of it",
                                      par.tp, m.n_kv_heads));
    divisible("model.hidden_dim", m.hidden_dim);
    divisible("model.vocab_size", m.vocab_size);
    if (par.sp && par.tp < 2)
        throw ConfigError("parallel.sp splits the stream across the tensor-parallel ranks: it needs parallel.tp >= 2");
    if (par.sp && ((long)c.run.batch_size * c.run.seq_len) % par.tp != 0)
        throw ConfigError(fmt::format("parallel.sp needs run.batch_size x run.seq_len ({} x {}) divisible by "
                                      "parallel.tp = {}",
                                      c.run.batch_size, c.run.seq_len, par.tp));
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
    } catch (const json::exception& e) {  // parse_error, or out_of_range for 1e400; its "last read" may quote raw bytes
        throw ConfigError(fmt::format("config file {} is not valid JSON: {}", path, telemetry::excerpt(e.what(), 300, false)));
    }
    try {
        return config_from_json(j);
    } catch (const ConfigError& e) {
        throw ConfigError(fmt::format("{}: {}", path, e.what()));
    }
}

json config_to_json(const TrainConfig& c) {
    json out = json::object();
    for_each_section(c, [&](const char* name, auto fields) {
        json section = json::object();
        SectionWriter writer(section);
        fields(writer);
        out[name] = std::move(section);
    });
    out["detectors"] = detectors::detectors_to_json(c.detectors);
    return out;
}

}  // namespace hlat
