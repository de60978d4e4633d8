#include "eval/make_tasks.h"

#include "eval/task_file.h"
#include "trainer/files/file_io.h"
#include "trainer/files/sha256.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <random>
#include <stdexcept>

namespace fs = std::filesystem;

namespace hlat::eval {

// ---- n-gram decontamination ----

std::vector<uint64_t> NgramIndex::grams(const std::string& text) const {
    std::vector<uint64_t> words;
    uint64_t h = 0xcbf29ce484222325ull;
    bool in_word = false;
    for (unsigned char c : text) {
        if (c < 128 && std::isalnum(c)) {
            h = (h ^ (uint64_t)std::tolower(c)) * 0x100000001b3ull;
            in_word = true;
        } else if (in_word) {
            words.push_back(h);
            h = 0xcbf29ce484222325ull;
            in_word = false;
        }
    }
    if (in_word) words.push_back(h);
    std::vector<uint64_t> out;
    for (size_t i = 0; i + n_ <= words.size(); i++) {
        uint64_t g = 0;
        for (int k = 0; k < n_; k++) g = (g ^ words[i + k]) * 0x9e3779b97f4a7c15ull + (uint64_t)k;
        out.push_back(g);
    }
    return out;
}

void NgramIndex::add(const std::string& text) {
    std::vector<uint64_t> g = grams(text);
    hashes_.insert(hashes_.end(), g.begin(), g.end());
}

void NgramIndex::finish() {
    std::sort(hashes_.begin(), hashes_.end());
    hashes_.erase(std::unique(hashes_.begin(), hashes_.end()), hashes_.end());
}

bool NgramIndex::overlaps(const std::string& text) const {
    for (uint64_t g : grams(text))
        if (std::binary_search(hashes_.begin(), hashes_.end(), g)) return true;
    return false;
}

// ---- prose ----

// [begin, end) of each sentence; the spaces between sentences belong to none.
static std::vector<std::pair<size_t, size_t>> sentence_spans(const std::string& p) {
    static const char* kAbbreviations[] = {"e.g.", "i.e.", "etc.", "vs.", "Mr.", "Dr.", "cf.", "No.", "approx."};
    std::vector<std::pair<size_t, size_t>> out;
    size_t start = 0;
    for (size_t i = 0; i + 2 < p.size(); i++) {
        const char c = p[i];
        if (c != '.' && c != '!' && c != '?') continue;
        size_t next = i + 1;  // the info format puts two spaces after a sentence
        while (next < p.size() && p[next] == ' ') next++;
        if (next == i + 1 || next >= p.size() || !std::isupper((unsigned char)p[next])) continue;
        size_t word = p.rfind(' ', i);
        word = word == std::string::npos ? 0 : word + 1;
        const std::string last = p.substr(word, i + 1 - word);
        bool abbreviation = last.size() <= 2;  // "A." or a lone "."
        for (const char* a : kAbbreviations) abbreviation = abbreviation || last == a;
        if (abbreviation) continue;
        out.emplace_back(start, i + 1);
        start = next;
    }
    if (start < p.size()) out.emplace_back(start, p.size());
    return out;
}

std::vector<std::string> split_sentences(const std::string& p) {
    std::vector<std::string> out;
    for (auto [begin, end] : sentence_spans(p)) out.push_back(p.substr(begin, end - begin));
    return out;
}

// Paragraphs (between blank lines) of running text, joined into one line.
// In the info format running text is flush left, or indented by 5 spaces
// under a "-- Function:" definition; code is indented further or unevenly,
// and lists start with "*". A paragraph is prose when its lines share one
// indentation of at most 5, none starts a list, and it is nearly all letters,
// spaces and punctuation of sentences.
static std::vector<std::string> prose_paragraphs(const std::string& text) {
    std::vector<std::string> out;
    size_t pos = 0;
    while (pos < text.size()) {
        size_t end = text.find("\n\n", pos);
        if (end == std::string::npos) end = text.size();
        const std::string block = text.substr(pos, end - pos);
        pos = end + 2;
        std::string joined;
        bool prose = !block.empty();
        long indent = -1;
        size_t line_start = 0;
        while (prose && line_start < block.size()) {
            size_t line_end = block.find('\n', line_start);
            if (line_end == std::string::npos) line_end = block.size();
            const std::string line = block.substr(line_start, line_end - line_start);
            line_start = line_end + 1;
            const size_t first = line.find_first_not_of(' ');
            if (first == std::string::npos || first > 5 || (indent >= 0 && (long)first != indent)) prose = false;
            if (!prose) break;
            indent = (long)first;
            if (line[first] == '*' || line[first] == '-' || line[first] == '>') prose = false;
            if (!joined.empty()) joined += ' ';
            joined += line.substr(first);
        }
        if (!prose) continue;
        long plain = 0;
        for (unsigned char c : joined) plain += std::isalpha(c) || c == ' ' || c == '.' || c == ',' || c >= 128;
        if (plain >= 0.9 * (double)joined.size()) out.push_back(joined);
    }
    return out;
}

static bool ends_sentence(const std::string& s) { return !s.empty() && (s.back() == '.' || s.back() == '!' || s.back() == '?'); }

// A usable sentence: a reasonable length, ends like a sentence, is not a
// numbered section heading ("11.2.3 Is there ...?").
static bool good_sentence(const std::string& s) {
    const bool heading = !s.empty() && std::isdigit((unsigned char)s[0]);
    return s.size() >= 20 && s.size() <= 300 && ends_sentence(s) && !heading;
}

struct Built {
    std::vector<TaskItem> items;
    long candidates = 0, dropped = 0;
};

// Shuffles candidates, then keeps the first `limit` that share no n-gram with training text.
static Built keep_clean(std::vector<TaskItem> candidates, const NgramIndex& train, long limit,
                        std::mt19937_64& rng) {
    for (size_t i = candidates.size(); i > 1; i--) std::swap(candidates[i - 1], candidates[rng() % i]);
    Built b;
    b.candidates = (long)candidates.size();
    for (TaskItem& item : candidates) {
        if ((long)b.items.size() >= limit) break;
        std::string text = item.context + " " + item.target + " " + item.text;
        for (const std::string& c : item.choices) text += " " + c;
        if (train.overlaps(text)) {
            b.dropped++;
            continue;
        }
        b.items.push_back(std::move(item));
    }
    return b;
}

static Built perplexity_items(const std::vector<Document>& heldout, const NgramIndex& train, long limit,
                              std::mt19937_64& rng) {
    std::vector<TaskItem> candidates;
    for (const Document& d : heldout) {
        TaskItem item;
        item.text = d.text;
        candidates.push_back(std::move(item));
    }
    return keep_clean(std::move(candidates), train, limit, rng);
}

static Built next_sentence_items(const std::vector<Document>& heldout, const NgramIndex& train, long limit,
                                 std::mt19937_64& rng) {
    // First every paragraph picks its gold: a usable sentence after at least
    // 20 characters of context. The distractors of an item are the golds of
    // other documents' items, so they come from the same places in a
    // paragraph as a gold does: a model that ignores the context finds
    // nothing to tell them apart by (first sentences, say, are generic, and
    // drawn as distractors a context-blind model would prefer them).
    struct Pick {
        std::string context, gold;
        size_t doc;
    };
    std::vector<Pick> picks;
    for (size_t d = 0; d < heldout.size(); d++) {
        for (const std::string& p : prose_paragraphs(heldout[d].text)) {
            std::vector<std::pair<size_t, size_t>> spans = sentence_spans(p);
            std::vector<size_t> golds;
            for (size_t k = 1; k < spans.size(); k++)
                if (spans[k - 1].second >= 20 && good_sentence(p.substr(spans[k].first, spans[k].second - spans[k].first)))
                    golds.push_back(k);
            if (golds.empty()) continue;
            const size_t k = golds[rng() % golds.size()];
            picks.push_back({p.substr(0, spans[k - 1].second), p.substr(spans[k].first, spans[k].second - spans[k].first), d});
        }
    }
    std::vector<const Pick*> pool;  // by length
    for (const Pick& p : picks) pool.push_back(&p);
    std::sort(pool.begin(), pool.end(), [](const Pick* a, const Pick* b) {
        return a->gold.size() != b->gold.size() ? a->gold.size() < b->gold.size() : a->gold < b->gold;
    });
    std::vector<TaskItem> candidates;
    for (const Pick& p : picks) {
        const std::string& gold = p.gold;
        // Distractors: sentences of other documents within 15% of the gold's
        // length (widened to 30% and 60% until three distinct ones exist).
        // Not past 100%: the lower length would be negative, and the task
        // files built so far never drew a distractor there (that bound
        // wrapped to the pool's end, and a small corpus crashed on it).
        std::vector<std::string> distractors;
        for (double tolerance = 0.15; distractors.size() < 3 && tolerance < 1.0; tolerance *= 2) {
            distractors.clear();
            auto lo = std::lower_bound(pool.begin(), pool.end(), (size_t)(gold.size() * (1 - tolerance)),
                                       [](const Pick* a, size_t n) { return a->gold.size() < n; });
            auto hi = std::upper_bound(pool.begin(), pool.end(), (size_t)(gold.size() * (1 + tolerance)),
                                       [](size_t n, const Pick* a) { return n < a->gold.size(); });
            std::vector<const Pick*> near;
            for (auto it = lo; it != hi; ++it)
                if ((*it)->doc != p.doc && (*it)->gold != gold) near.push_back(*it);
            for (size_t tries = 0; distractors.size() < 3 && tries < 64 && !near.empty(); tries++) {
                const std::string& s = near[rng() % near.size()]->gold;
                if (std::find(distractors.begin(), distractors.end(), s) == distractors.end()) distractors.push_back(s);
            }
        }
        if (distractors.size() < 3) continue;
        TaskItem item;
        item.context = p.context;
        item.gold = (int)(rng() % 4);
        for (int c = 0, d = 0; c < 4; c++) item.choices.push_back(c == item.gold ? gold : distractors[d++]);
        candidates.push_back(std::move(item));
    }
    return keep_clean(std::move(candidates), train, limit, rng);
}

// Whole-word occurrence of w in text before `end`.
static bool occurs_before(const std::string& text, const std::string& w, size_t end) {
    for (size_t at = text.find(w); at != std::string::npos && at + w.size() <= end; at = text.find(w, at + 1)) {
        const bool left = at == 0 || !std::isalnum((unsigned char)text[at - 1]);
        const bool right = at + w.size() >= text.size() || !std::isalnum((unsigned char)text[at + w.size()]);
        if (left && right) return true;
    }
    return false;
}

static Built cloze_items(const std::vector<Document>& heldout, const NgramIndex& train, long limit,
                         std::mt19937_64& rng) {
    std::vector<TaskItem> candidates;
    for (const Document& doc : heldout) {
        std::vector<std::string> paragraphs = prose_paragraphs(doc.text);
        for (size_t p = 0; p < paragraphs.size(); p++) {
            // The passage: up to three previous prose paragraphs and this one.
            std::string prefix;
            for (size_t q = p >= 3 ? p - 3 : 0; q < p; q++) prefix += paragraphs[q] + "\n\n";
            const std::string passage = prefix + paragraphs[p];
            std::vector<TaskItem> options;
            for (auto [begin, end] : sentence_spans(paragraphs[p])) {
                const size_t sentence_start = prefix.size() + begin;
                const std::string sentence = passage.substr(sentence_start, end - begin);
                if (!ends_sentence(sentence)) continue;
                const size_t word_end = prefix.size() + end - 1;  // before the final punctuation
                size_t word_start = word_end;
                while (word_start > sentence_start && std::isalpha((unsigned char)passage[word_start - 1])) word_start--;
                const std::string word = passage.substr(word_start, word_end - word_start);
                if (word.size() < 3 || word_start == 0 || passage[word_start - 1] != ' ') continue;
                if (!occurs_before(passage, word, word_start - 1)) continue;
                if (word_start - 1 < 100) continue;  // too little passage to go on
                TaskItem item;
                item.context = passage.substr(0, word_start - 1);
                item.target = word;
                options.push_back(std::move(item));
            }
            if (!options.empty()) candidates.push_back(options[rng() % options.size()]);
        }
    }
    return keep_clean(std::move(candidates), train, limit, rng);
}

std::vector<std::string> make_tasks(const Dataset& dataset, const DataConfig& data, const MakeTasksOptions& options) {
    struct Spec {
        const char* name;
        TaskKind kind;
        const char* description;
        Built (*build)(const std::vector<Document>&, const NgramIndex&, long, std::mt19937_64&);
    };
    const Spec specs[] = {
        {"heldout_perplexity", TaskKind::Perplexity,
         "held-out documents, scored by rolling log-likelihood (bits per byte, byte and word perplexity)",
         perplexity_items},
        {"next_sentence_mc4", TaskKind::MultipleChoice,
         "first sentences of a held-out prose paragraph; choices: the true next sentence and three length-matched "
         "sentences of other held-out documents",
         next_sentence_items},
        {"cloze_lastword", TaskKind::Cloze,
         "a held-out passage up to the last word of a sentence whose word occurs earlier in the passage",
         cloze_items},
    };
    std::vector<std::string> paths;
    for (const Spec& s : specs) {
        std::string path = (fs::path(options.out_dir) / (std::string(s.name) + ".jsonl")).string();
        if (fs::exists(path) && !options.force)
            throw std::runtime_error(fmt::format("{} exists: task files are frozen once built, so results stay "
                                                 "comparable; delete it or pass --force to rebuild",
                                                 path));
        paths.push_back(path);
    }
    if (dataset.heldout->empty()) throw std::runtime_error("the corpus has no held-out documents to build tasks from");

    NgramIndex train(options.ngram);
    for (const Document& d : *dataset.train) train.add(d.text);
    train.finish();
    spdlog::info("decontamination index: {} distinct {}-grams of {} training documents", train.size(), options.ngram,
                 dataset.train->size());

    nlohmann::json files = nlohmann::json::array();
    for (const std::string& f : data.corpus) {
        nlohmann::json entry{{"path", f}, {"sha256", sha256_file(f)}};
        if (fs::exists(f + ".manifest.json")) {
            std::vector<char> bytes = read_file(f + ".manifest.json");
            entry["manifest"] = nlohmann::json::parse(bytes.begin(), bytes.end());
        }
        files.push_back(entry);
    }
    const nlohmann::json corpus{{"files", files},
                                {"fingerprint", dataset.fingerprint},
                                {"heldout_percent", data.heldout_percent},
                                {"dedup_paragraphs", data.dedup_paragraphs},
                                {"heldout_documents", dataset.heldout->size()},
                                {"training_documents", dataset.train->size()}};
    fs::create_directories(options.out_dir);
    for (size_t i = 0; i < std::size(specs); i++) {
        const Spec& s = specs[i];
        // Each task has its own stream, so rebuilding one never shifts another.
        std::mt19937_64 rng(options.seed ^ (0x9e3779b97f4a7c15ull * (i + 1)));
        Built b = s.build(*dataset.heldout, train, options.items, rng);
        if (b.items.empty()) throw std::runtime_error(fmt::format("no items for {}: the held-out split is too small", s.name));
        nlohmann::ordered_json header{{"hlat_task", s.name},
                              {"kind", task_kind_name(s.kind)},
                              {"format", 1},
                              {"description", s.description},
                              {"seed", options.seed},
                              {"items", b.items.size()},
                              {"corpus", corpus},
                              {"decontamination",
                               {{"ngram", options.ngram}, {"candidates", b.candidates}, {"dropped", b.dropped},
                                {"training_ngrams", train.size()}}}};
        std::string out = header.dump() + "\n";
        for (const TaskItem& item : b.items) out += item_to_json(item, s.kind).dump() + "\n";
        write_file_atomic(paths[i], {out});
        spdlog::info("{}: {} items ({} candidates, {} dropped as overlapping training text) -> {}", s.name,
                     b.items.size(), b.candidates, b.dropped, paths[i]);
    }
    return paths;
}

}  // namespace hlat::eval
