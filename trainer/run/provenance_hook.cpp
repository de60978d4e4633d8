#include "trainer/run/provenance_hook.h"

#include "trainer/run/run_data.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace hlat {
namespace {

constexpr size_t kRecentSteps = 64;  // as far back as an alert may be dated
constexpr size_t kPreviewBytes = 400;
constexpr int kTopSequences = 3;

// Nine significant digits give a float back exactly (a replay compares them
// bit for bit), without the noise digits of its double.
nlohmann::json exact(float x) {
    if (!std::isfinite(x)) return nullptr;
    return std::stod(fmt::format("{:.9g}", x));
}

// Six for people.
nlohmann::json rounded(float x) {
    if (!std::isfinite(x)) return nullptr;
    return std::stod(fmt::format("{:.6g}", x));
}

// The first `bytes` of text, cut at a character boundary.
std::string utf8_prefix(const std::string& text, size_t bytes) {
    if (text.size() <= bytes) return text;
    while (bytes > 0 && ((unsigned char)text[bytes] & 0xc0) == 0x80) bytes--;
    return text.substr(0, bytes) + "…";
}

}  // namespace

ProvenanceHook::ProvenanceHook(RunContext& run) : run_(run) {
    for (const BadBatch& bad : run.options.faults.bad_batches) planted_.push_back(planted_batch(run.config, bad));
}

ProvenanceHook::~ProvenanceHook() {
    if (session::RunSession* session = run_.recorder.session()) session->set_annotator(nullptr);
}

void ProvenanceHook::on_start() {
    if (session::RunSession* session = run_.recorder.session())
        session->set_annotator([this](telemetry::Alert& a) { annotate(a); });
}

void ProvenanceHook::after_step(StepResult& result) {
    if (!run_.data.loader) return;  // a token file's windows carry no documents
    std::vector<SequenceRecord> sequences = gather(result.stats);
    if (!run_.parallel.is_root()) return;
    store(result.stats.step, sequences);
    recent_.emplace_back(result.stats.step, std::move(sequences));
    while (recent_.size() > kRecentSteps) recent_.pop_front();
}

// This rank's sequences to world rank 0, which keeps one copy per replica
// (tensor-parallel ranks of a replica train on the same batch).
std::vector<SequenceRecord> ProvenanceHook::gather(const StepStats& s) {
    nlohmann::json mine = nlohmann::json::array();
    const int B = run_.config.run.batch_size;
    for (size_t m = 0; m < s.provenance.size(); m++)
        for (int b = 0; b < B; b++) {
            const size_t i = m * B + b;
            nlohmann::json docs = nlohmann::json::array();
            for (const Segment& g : s.provenance[m].rows[b]) docs.push_back({g.doc, g.token, g.tokens});
            mine.push_back({m, b, s.provenance[m].batch, i < s.sequence_losses.size() ? s.sequence_losses[i] : NAN,
                            i < s.sequence_grad_norms.size() ? s.sequence_grad_norms[i] : NAN, docs});
        }
    std::vector<std::string> all = run_.parallel.gather(mine.dump(), Group::World);
    std::vector<SequenceRecord> out;
    const int tp = run_.parallel.tp_size();
    for (size_t r = 0; r < all.size(); r += tp)
        for (const auto& j : nlohmann::json::parse(all[r])) {
            SequenceRecord rec{(int)(r / tp), j[0], j[1], j[2], j[3].is_number() ? j[3].get<float>() : NAN,
                               j[4].is_number() ? j[4].get<float>() : NAN, {}};
            for (const auto& g : j[5]) rec.docs.push_back({g[0], g[1], g[2]});
            out.push_back(std::move(rec));
        }
    return out;
}

void ProvenanceHook::store(int64_t step, const std::vector<SequenceRecord>& sequences) {
    nlohmann::json rows = nlohmann::json::array();
    std::vector<telemetry::DocumentRecord> documents;
    for (const SequenceRecord& r : sequences) {
        nlohmann::json docs = nlohmann::json::array();
        for (const Segment& g : r.docs) {
            docs.push_back({g.doc, g.token, g.tokens});
            if (g.doc >= 0 && documents_stored_.insert(g.doc).second) documents.push_back(describe(g.doc));
        }
        rows.push_back({r.rank, r.micro, r.row, r.batch, exact(r.loss), exact(r.grad_norm), docs});
    }
    nlohmann::json data = {{"fields", {"rank", "micro", "row", "batch", "loss", "grad_norm", "docs"}},
                           {"docs_fields", {"document", "first_token", "tokens"}},
                           {"sequences", rows}};
    if (session::RunSession* session = run_.recorder.session())
        session->batch({step, data.dump(), 0.0}, std::move(documents));
}

telemetry::DocumentRecord ProvenanceHook::describe(long ref) const {
    if (ref >= kPlantedDocument) {
        for (const PlantedBatch& p : planted_)
            if (ref == kPlantedDocument + p.batch)
                return {ref, fmt::format("planted-{}-batch-{}", p.kind, p.batch),
                        fmt::format("--inject bad_batch (kind {}, batch {} of rank {})", p.kind, p.batch, p.rank), 0};
        return {ref, "planted", "--inject bad_batch", 0};
    }
    const Document& d = (*run_.data.dataset->train)[ref];
    return {ref, d.id, d.source, d.offset};
}

// A document's tokens as the loader packed them: its text's, then EOS.
const std::vector<int32_t>& ProvenanceHook::document_tokens(long ref) {
    auto it = token_cache_.find(ref);
    if (it != token_cache_.end()) return it->second;
    if (token_cache_.size() > 256) token_cache_.clear();
    std::vector<int32_t>& tokens = token_cache_[ref];
    const Tokenizer& tokenizer = *run_.data.tokenizer;
    if (ref >= kPlantedDocument) {
        for (const PlantedBatch& p : planted_)
            if (ref == kPlantedDocument + p.batch)
                tokens = planted_tokens(tokenizer, p, run_.config.run.batch_size, run_.config.run.seq_len);
        return tokens;
    }
    tokenizer.encode((*run_.data.dataset->train)[ref].text, tokens);
    tokens.push_back(tokenizer.eos_id());
    return tokens;
}

std::vector<int32_t> ProvenanceHook::tokens_of(const SequenceRecord& r) {
    std::vector<int32_t> out;
    for (const Segment& g : r.docs) {
        if (g.doc < 0) continue;  // carried over from a checkpoint that did not record its document
        const std::vector<int32_t>& doc = document_tokens(g.doc);
        const long end = std::min<long>(doc.size(), g.token + g.tokens);
        if (g.token < end) out.insert(out.end(), doc.begin() + g.token, doc.begin() + end);
    }
    return out;
}

nlohmann::json ProvenanceHook::sequence_json(const SequenceRecord& r) {
    nlohmann::json docs = nlohmann::json::array();
    long first_copy = -1;
    for (const Segment& g : r.docs) {
        if (g.doc < 0) continue;
        telemetry::DocumentRecord d = describe(g.doc);
        docs.push_back({{"document", g.doc}, {"id", d.doc_id}, {"source", d.source}, {"offset", d.offset},
                        {"first_token", g.token}, {"tokens", g.tokens}});
        if (g.doc < kPlantedDocument && first_copy < 0) first_copy = duplicates_->first_copy(g.doc);
    }
    const std::vector<int32_t> tokens = tokens_of(r);
    const std::string text = run_.data.tokenizer->decode(tokens);
    nlohmann::json j = {{"rank", r.rank}, {"micro", r.micro}, {"row", r.row}, {"batch", r.batch},
                        {"loss", rounded(r.loss)}, {"grad_norm", rounded(r.grad_norm)}, {"documents", docs},
                        {"preview", utf8_prefix(text, kPreviewBytes)},
                        {"repeated_ngrams", std::round(repeated_ngram_share(tokens) * 1000) / 1000},
                        {"byte_entropy", std::round(byte_entropy(text) * 100) / 100}};
    j["duplicate_of"] = first_copy >= 0 ? nlohmann::json(describe(first_copy).doc_id) : nlohmann::json(nullptr);
    return j;
}

// The alert's step's sequences with the highest loss and the highest
// gradient (the union, highest loss first), each with its documents.
void ProvenanceHook::annotate(telemetry::Alert& alert) {
    auto at = std::find_if(recent_.begin(), recent_.end(), [&](const auto& e) { return e.first == alert.step; });
    if (at == recent_.end() || at->second.empty()) return;
    if (!duplicates_) duplicates_ = std::make_unique<DuplicateIndex>(*run_.data.dataset->train);
    const std::vector<SequenceRecord>& seqs = at->second;
    std::vector<size_t> by_loss(seqs.size()), by_grad(seqs.size());
    for (size_t i = 0; i < seqs.size(); i++) by_loss[i] = by_grad[i] = i;
    auto desc = [](float a, float b) { return std::isnan(b) ? !std::isnan(a) : a > b; };
    std::stable_sort(by_loss.begin(), by_loss.end(), [&](size_t a, size_t b) { return desc(seqs[a].loss, seqs[b].loss); });
    std::stable_sort(by_grad.begin(), by_grad.end(),
                     [&](size_t a, size_t b) { return desc(seqs[a].grad_norm, seqs[b].grad_norm); });
    std::vector<size_t> chosen;
    for (const auto* order : {&by_loss, &by_grad})
        for (size_t k = 0; k < std::min<size_t>(kTopSequences, order->size()); k++)
            if (std::find(chosen.begin(), chosen.end(), (*order)[k]) == chosen.end()) chosen.push_back((*order)[k]);
    double loss_sum = 0.0, grad_sum = 0.0;
    for (const SequenceRecord& r : seqs) loss_sum += r.loss, grad_sum += r.grad_norm;
    nlohmann::json top = nlohmann::json::array();
    for (size_t i : chosen) {
        nlohmann::json j = sequence_json(seqs[i]);
        j["loss_rank"] = std::find(by_loss.begin(), by_loss.end(), i) - by_loss.begin() + 1;
        j["grad_rank"] = std::find(by_grad.begin(), by_grad.end(), i) - by_grad.begin() + 1;
        top.push_back(std::move(j));
    }
    nlohmann::json data = nlohmann::json::parse(alert.data, nullptr, false);
    if (!data.is_object()) data = nlohmann::json::object();
    data["attribution"]["batch"] = {{"step", alert.step},
                                    {"sequences", (long)seqs.size()},
                                    {"mean_loss", rounded((float)(loss_sum / seqs.size()))},
                                    {"mean_grad_norm", rounded((float)(grad_sum / seqs.size()))},
                                    {"top", top}};
    alert.data = data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace hlat
