// Documents in, documents out: reading a corpus (JSONL, zstd-compressed JSONL,
// plain text), removing exact-duplicate paragraphs, and the held-out split.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hlat {

struct Document {
    std::string id;
    std::string text;
    std::string source = "";  // the file it was read from ("" for one made in memory)
    long offset = 0;     // byte offset of its record in that file (decompressed): a JSONL line's first byte
};

struct CorpusStats {
    long documents = 0;              // kept
    long skipped_invalid_utf8 = 0;   // documents whose text is not valid UTF-8
    long skipped_empty = 0;          // documents with no non-blank text
    long duplicate_paragraphs = 0;   // removed by dedup_paragraphs
};

// Reads every file in order. By name: *.jsonl (one JSON object per line, text
// in text_field, id in "id" or else FILE:LINE), *.jsonl.zst (the same,
// zstd-compressed), anything else is plain text, one document per file.
// Invalid UTF-8 (a whole JSONL line or a text file) and empty documents are
// skipped and counted; a line that is not JSON, a missing or non-string text field and a truncated zstd stream are
// errors naming the file and line.
std::vector<Document> read_corpus(const std::vector<std::string>& files, const std::string& text_field,
                                  CorpusStats* stats);

// Removes, corpus-wide, every paragraph (text between blank lines) that
// appeared before, keeping the first; documents left empty are dropped.
// Returns the number of paragraphs removed.
long dedup_paragraphs(std::vector<Document>& docs);

// Stable held-out membership: a hash of the id (FNV-1a, 64 bit), so the split
// never depends on file order, thread count or machine.
bool is_heldout(const std::string& id, double heldout_percent);
uint64_t fnv1a64(std::string_view s);

bool is_valid_utf8(std::string_view s);

// Writes documents as JSONL with fields id, source, license, text.
void write_jsonl(const std::string& path, const std::vector<Document>& docs, const std::string& source,
                 const std::string& license);

}  // namespace hlat
