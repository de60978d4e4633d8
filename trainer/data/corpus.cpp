#include "trainer/data/corpus.h"

#include "trainer/files/file_io.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <zstd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <unordered_set>

namespace hlat {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Calls on_line(line, line_number, byte_offset) for every line of a file (the
// offset of its first byte in the decompressed stream), decompressing
// zstd on the fly when `zstd` is set. A zstd stream that ends mid-frame is an
// error: a truncated download must not pass for a short corpus.
void for_each_line(const std::string& path, bool zstd,
                   const std::function<void(std::string_view, long, long)>& on_line) {
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
    if (!f) throw std::runtime_error(fmt::format("cannot open {}: {}", path, std::strerror(errno)));
    std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> dctx(zstd ? ZSTD_createDCtx() : nullptr, ZSTD_freeDCtx);
    std::vector<char> in(1 << 17), out(1 << 17);
    std::string pending;
    long line_number = 0, pending_offset = 0;  // pending_offset: where `pending` starts in the file
    auto emit = [&](const char* data, size_t n) {
        pending.append(data, n);
        size_t start = 0, nl;
        while ((nl = pending.find('\n', start)) != std::string::npos) {
            on_line(std::string_view(pending).substr(start, nl - start), ++line_number, pending_offset + (long)start);
            start = nl + 1;
        }
        pending.erase(0, start);
        pending_offset += (long)start;
    };
    size_t last_ret = 0;
    size_t n;
    while ((n = std::fread(in.data(), 1, in.size(), f.get())) > 0) {
        if (!zstd) {
            emit(in.data(), n);
            continue;
        }
        ZSTD_inBuffer input{in.data(), n, 0};
        while (input.pos < input.size) {
            ZSTD_outBuffer output{out.data(), out.size(), 0};
            last_ret = ZSTD_decompressStream(dctx.get(), &output, &input);
            if (ZSTD_isError(last_ret))
                throw std::runtime_error(fmt::format("{} is not valid zstd data: {}", path, ZSTD_getErrorName(last_ret)));
            emit(out.data(), output.pos);
        }
    }
    if (std::ferror(f.get())) throw std::runtime_error(fmt::format("cannot read {}", path));
    if (zstd && last_ret != 0)
        throw std::runtime_error(fmt::format("{} is truncated: the zstd stream ends mid-frame", path));
    if (!pending.empty()) on_line(pending, ++line_number, pending_offset);
}

bool is_blank(std::string_view s) {
    for (char c : s)
        if (!std::isspace((unsigned char)c)) return false;
    return true;
}

// Adds a document unless it is empty or not UTF-8; counts what it skips.
void add_document(std::vector<Document>& docs, Document doc, CorpusStats* stats) {
    if (!is_valid_utf8(doc.text)) {
        stats->skipped_invalid_utf8++;
    } else if (is_blank(doc.text)) {
        stats->skipped_empty++;
    } else {
        docs.push_back(std::move(doc));
    }
}

}  // namespace

bool is_valid_utf8(std::string_view s) {
    size_t i = 0, n = s.size();
    while (i < n) {
        unsigned char c = s[i];
        int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
        if (!len || i + len > n) return false;
        uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1f : len == 3 ? c & 0x0f : c & 0x07;
        for (int k = 1; k < len; k++) {
            unsigned char cc = s[i + k];
            if ((cc >> 6) != 0x2) return false;
            cp = (cp << 6) | (cc & 0x3f);
        }
        // Overlong forms, surrogates and code points past U+10FFFF are invalid.
        static const uint32_t min_for_len[] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_for_len[len] || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) return false;
        i += len;
    }
    return true;
}

std::vector<Document> read_corpus(const std::vector<std::string>& files, const std::string& text_field,
                                  CorpusStats* stats) {
    std::vector<Document> docs;
    for (const std::string& path : files) {
        bool zst = ends_with(path, ".jsonl.zst");
        if (zst || ends_with(path, ".jsonl")) {
            for_each_line(path, zst, [&](std::string_view line, long line_number, long offset) {
                if (is_blank(line)) return;
                if (!is_valid_utf8(line)) {  // JSON must be UTF-8; a bad line is skipped, not fatal
                    stats->skipped_invalid_utf8++;
                    return;
                }
                nlohmann::json j;
                try {
                    j = nlohmann::json::parse(line);
                } catch (const nlohmann::json::parse_error& e) {
                    throw std::runtime_error(fmt::format("{}:{}: not a JSON object ({})", path, line_number, e.what()));
                } catch (const nlohmann::json::exception&) {
                    throw std::runtime_error(fmt::format("{}:{}: not a JSON object", path, line_number));
                }
                if (!j.is_object()) throw std::runtime_error(fmt::format("{}:{}: not a JSON object", path, line_number));
                auto text = j.find(text_field);
                if (text == j.end())
                    throw std::runtime_error(fmt::format("{}:{}: no \"{}\" field", path, line_number, text_field));
                if (!text->is_string())
                    throw std::runtime_error(fmt::format("{}:{}: field \"{}\" is not a string", path, line_number, text_field));
                auto id = j.find("id");
                std::string id_str = id != j.end() && id->is_string() ? id->get<std::string>()
                                     : id != j.end() && id->is_number()
                                         ? id->dump()
                                         : fmt::format("{}:{}", path, line_number);
                add_document(docs, {id_str, text->get<std::string>(), path, offset}, stats);
            });
        } else {
            std::vector<char> bytes = read_file(path);
            add_document(docs, {path, std::string(bytes.begin(), bytes.end()), path, 0}, stats);
        }
    }
    stats->documents = (long)docs.size();
    return docs;
}

long dedup_paragraphs(std::vector<Document>& docs) {
    std::unordered_set<uint64_t> seen;
    long removed = 0;
    std::vector<Document> kept;
    for (Document& d : docs) {
        std::string out;
        size_t pos = 0;
        while (pos < d.text.size()) {
            size_t end = d.text.find("\n\n", pos);
            if (end == std::string::npos) end = d.text.size();
            std::string_view para = std::string_view(d.text).substr(pos, end - pos);
            pos = end + 2;
            if (is_blank(para)) continue;
            // 64-bit hashes: a false "duplicate" needs a collision among ~1e5
            // paragraphs, odds around 1e-10.
            if (!seen.insert(fnv1a64(para)).second) {
                removed++;
                continue;
            }
            if (!out.empty()) out += "\n\n";
            out += para;
        }
        if (!out.empty()) kept.push_back({std::move(d.id), std::move(out), std::move(d.source), d.offset});
    }
    docs = std::move(kept);
    return removed;
}

uint64_t fnv1a64(std::string_view s) {
    uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64-bit offset basis and prime
    for (unsigned char c : s) {
        h ^= c;
        h *= 0x100000001b3ull;
    }
    return h;
}

bool is_heldout(const std::string& id, double heldout_percent) {
    return (double)(fnv1a64(id) % 10000) < heldout_percent * 100.0;
}

void write_jsonl(const std::string& path, const std::vector<Document>& docs, const std::string& source,
                 const std::string& license) {
    std::string out;
    for (const Document& d : docs)
        out += nlohmann::json{{"id", d.id}, {"source", source}, {"license", license}, {"text", d.text}}.dump() + "\n";
    write_file_atomic(path, {out});
}

}  // namespace hlat
