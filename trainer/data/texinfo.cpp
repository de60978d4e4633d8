#include "trainer/data/texinfo.h"

#include <fmt/format.h>
#include <zlib.h>

#include <stdexcept>

namespace hlat {
namespace {

// Replaces cross-references by their label.
std::string resolve_cross_references(const std::string& text) {
    std::string out;
    size_t i = 0;
    while (i < text.size()) {
        size_t at = text.find("*", i);
        if (at == std::string::npos || (text.compare(at, 6, "*note ") && text.compare(at, 6, "*Note ") &&
                                        text.compare(at, 6, "*note\n") && text.compare(at, 6, "*Note\n"))) {
            size_t stop = at == std::string::npos ? text.size() : at + 1;
            out.append(text, i, stop - i);
            i = stop;
            continue;
        }
        out.append(text, i, at - i);
        size_t label_start = at + 6;
        size_t colon = text.find(':', label_start);
        if (colon == std::string::npos) {  // not a reference after all
            out.append(text, at, std::string::npos);
            break;
        }
        out.append(text, label_start, colon - label_start);
        if (colon + 1 < text.size() && text[colon + 1] == ':') {  // *note LABEL::
            i = colon + 2;
            continue;
        }
        // *note LABEL: TARGET. or *note LABEL: TARGET, (the comma belongs to the sentence)
        size_t end = text.find_first_of(".,", colon + 1);
        if (end == std::string::npos) {
            i = text.size();
        } else {
            i = text[end] == '.' ? end + 1 : end;
        }
    }
    return out;
}

bool is_underline(const std::string& line) {
    if (line.size() < 2) return false;
    char c = line[0];
    if (c != '*' && c != '=' && c != '-' && c != '.' && c != '~' && c != '^') return false;
    return line.find_first_not_of(c) == std::string::npos;
}

std::string drop_underlines(const std::string& text) {
    std::string out;
    size_t pos = 0;
    bool previous_blank = true;
    while (pos <= text.size()) {
        size_t nl = text.find('\n', pos);
        if (nl == std::string::npos) nl = text.size();
        std::string line = text.substr(pos, nl - pos);
        pos = nl + 1;
        if (!previous_blank && is_underline(line)) continue;
        previous_blank = line.find_first_not_of(" \t") == std::string::npos;
        out += line;
        out += '\n';
    }
    return out;
}

std::string trim(const std::string& s) {
    size_t b = s.find_first_not_of(" \t\n");
    if (b == std::string::npos) return "";
    size_t e = s.find_last_not_of(" \t\n");
    return s.substr(b, e - b + 1);
}

}  // namespace

std::vector<Document> info_to_documents(const std::string& info_text, size_t min_chars, InfoStats* stats) {
    std::vector<Document> docs;
    size_t pos = 0;
    while (pos < info_text.size()) {
        size_t next = info_text.find('\x1f', pos);
        if (next == std::string::npos) next = info_text.size();
        std::string chunk = info_text.substr(pos, next - pos);
        pos = next + 1;
        size_t start = chunk.find_first_not_of('\n');
        if (start == std::string::npos || chunk.compare(start, 6, "File: ")) continue;  // preamble, tag table
        size_t header_end = chunk.find('\n', start);
        std::string header = chunk.substr(start, header_end - start);
        size_t node_at = header.find("Node: ");
        if (node_at == std::string::npos) continue;
        std::string name = header.substr(node_at + 6, header.find(',', node_at) - node_at - 6);
        stats->nodes++;
        std::string body = header_end == std::string::npos ? "" : chunk.substr(header_end + 1);
        size_t footnotes = body.find("---------- Footnotes ----------");
        if (footnotes != std::string::npos) {
            size_t line_start = body.rfind('\n', footnotes);
            body.erase(line_start == std::string::npos ? 0 : line_start);
        }
        size_t menu = body.find("* Menu:");
        if (menu != std::string::npos) body.erase(menu);
        std::string text = trim(drop_underlines(resolve_cross_references(body)));
        if (text.size() < min_chars) {
            stats->dropped_short++;
            continue;
        }
        docs.push_back({name, text, "", 0});
    }
    return docs;
}

std::string read_gzip(const std::string& path) {
    gzFile f = gzopen(path.c_str(), "rb");
    if (!f) throw std::runtime_error(fmt::format("cannot open {}", path));
    std::string out;
    char buf[1 << 16];
    int n;
    while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, n);
    int err;
    const char* msg = gzerror(f, &err);
    bool failed = n < 0 || (err != Z_OK && err != Z_STREAM_END);
    std::string reason = failed ? msg : "";
    gzclose(f);
    if (failed) throw std::runtime_error(fmt::format("cannot decompress {}: {}", path, reason));
    return out;
}

}  // namespace hlat
