// Reading corpora: formats, the errors and skips a user sees, dedup, the
// held-out split and the Texinfo conversion.
#include "test_util.h"
#include "trainer/data/corpus.h"
#include "trainer/data/texinfo.h"

#include <zstd.h>

#include <fstream>

namespace hlat {
namespace {

void write_text(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::string corpus_error(const std::vector<std::string>& files, const std::string& field = "text") {
    CorpusStats stats;
    try {
        read_corpus(files, field, &stats);
    } catch (const std::runtime_error& e) {
        return e.what();
    }
    return "";
}

TEST(Utf8, AcceptsValidRejectsInvalid) {
    EXPECT_TRUE(is_valid_utf8("plain ascii"));
    EXPECT_TRUE(is_valid_utf8("caf\xc3\xa9 \xe2\x80\x9cquoted\xe2\x80\x9d \xf0\x9f\x98\x80"));
    EXPECT_FALSE(is_valid_utf8("\xff"));
    EXPECT_FALSE(is_valid_utf8("\xc3"));              // truncated sequence
    EXPECT_FALSE(is_valid_utf8("\xc0\xaf"));          // overlong '/'
    EXPECT_FALSE(is_valid_utf8("\xed\xa0\x80"));      // UTF-16 surrogate
    EXPECT_FALSE(is_valid_utf8("\xf4\x90\x80\x80"));  // past U+10FFFF
}

TEST(Corpus, ReadsJsonlWithConfigurableFieldAndCountsSkips) {
    test::ScratchDir dir("corpus_jsonl");
    write_text(dir.file("a.jsonl"),
               "{\"id\": \"x\", \"body\": \"first document\"}\n"
               "\n"
               "{\"body\": \"no id here\"}\n"
               "{\"id\": 7, \"body\": \"   \\n  \"}\n"
               "{\"id\": \"bad\", \"body\": \"\xff\xfe\"}\n");
    CorpusStats stats;
    auto docs = read_corpus({dir.file("a.jsonl")}, "body", &stats);
    ASSERT_EQ(docs.size(), 2u);
    EXPECT_EQ(docs[0].id, "x");
    EXPECT_EQ(docs[0].text, "first document");
    EXPECT_EQ(docs[1].id, dir.file("a.jsonl") + ":3") << "missing ids fall back to FILE:LINE";
    EXPECT_EQ(stats.skipped_empty, 1);
    EXPECT_EQ(stats.skipped_invalid_utf8, 1);
    EXPECT_EQ(stats.documents, 2);
}

TEST(Corpus, BadJsonLineNamesFileAndLine) {
    test::ScratchDir dir("corpus_badjson");
    write_text(dir.file("a.jsonl"), "{\"text\": \"ok\"}\n{\"text\": \"ok\"}\n{\"text\": broken}\n");
    std::string e = corpus_error({dir.file("a.jsonl")});
    EXPECT_NE(e.find(dir.file("a.jsonl") + ":3: not a JSON object"), std::string::npos) << e;
    write_text(dir.file("b.jsonl"), "[1, 2]\n");
    e = corpus_error({dir.file("b.jsonl")});
    EXPECT_NE(e.find("b.jsonl:1: not a JSON object"), std::string::npos) << e;
}

TEST(Corpus, MissingOrNonStringTextField) {
    test::ScratchDir dir("corpus_field");
    write_text(dir.file("a.jsonl"), "{\"text\": \"ok\"}\n{\"content\": \"ok\"}\n");
    std::string e = corpus_error({dir.file("a.jsonl")});
    EXPECT_NE(e.find("a.jsonl:2: no \"text\" field"), std::string::npos) << e;
    write_text(dir.file("b.jsonl"), "{\"text\": 12}\n");
    e = corpus_error({dir.file("b.jsonl")});
    EXPECT_NE(e.find("b.jsonl:1: field \"text\" is not a string"), std::string::npos) << e;
}

TEST(Corpus, ZstdJsonlAndTruncatedZstd) {
    test::ScratchDir dir("corpus_zstd");
    std::string jsonl;
    for (int i = 0; i < 2000; i++) jsonl += "{\"id\": \"d" + std::to_string(i) + "\", \"text\": \"document number " + std::to_string(i) + "\"}\n";
    std::string compressed(ZSTD_compressBound(jsonl.size()), '\0');
    size_t n = ZSTD_compress(compressed.data(), compressed.size(), jsonl.data(), jsonl.size(), 3);
    ASSERT_FALSE(ZSTD_isError(n));
    compressed.resize(n);
    write_text(dir.file("a.jsonl.zst"), compressed);
    CorpusStats stats;
    auto docs = read_corpus({dir.file("a.jsonl.zst")}, "text", &stats);
    ASSERT_EQ(docs.size(), 2000u);
    EXPECT_EQ(docs[1999].text, "document number 1999");

    write_text(dir.file("cut.jsonl.zst"), compressed.substr(0, compressed.size() - 10));
    std::string e = corpus_error({dir.file("cut.jsonl.zst")});
    EXPECT_NE(e.find("truncated"), std::string::npos) << e;
    write_text(dir.file("junk.jsonl.zst"), "this is not zstd at all");
    e = corpus_error({dir.file("junk.jsonl.zst")});
    EXPECT_NE(e.find("not valid zstd data"), std::string::npos) << e;
}

TEST(Corpus, PlainTextFilesAreOneDocumentEach) {
    test::ScratchDir dir("corpus_text");
    write_text(dir.file("a.txt"), "one\n\ntwo\n");
    write_text(dir.file("b.md"), "three");
    CorpusStats stats;
    auto docs = read_corpus({dir.file("a.txt"), dir.file("b.md")}, "text", &stats);
    ASSERT_EQ(docs.size(), 2u);
    EXPECT_EQ(docs[0].text, "one\n\ntwo\n");
    EXPECT_EQ(docs[1].id, dir.file("b.md"));
    EXPECT_NE(corpus_error({dir.file("missing.txt")}).find("missing.txt"), std::string::npos);
}

TEST(Corpus, DedupRemovesRepeatedParagraphsCorpusWide) {
    std::vector<Document> docs = {{"a", "intro\n\nshared boilerplate\n\nbody a"},
                                  {"b", "shared boilerplate\n\nbody b"},
                                  {"c", "shared boilerplate"}};
    EXPECT_EQ(dedup_paragraphs(docs), 2);
    ASSERT_EQ(docs.size(), 2u) << "a document left empty is dropped";
    EXPECT_EQ(docs[0].text, "intro\n\nshared boilerplate\n\nbody a");
    EXPECT_EQ(docs[1].text, "body b");
}

TEST(Corpus, HeldOutSplitIsStableAndAboutTenPercent) {
    int held = 0;
    for (int i = 0; i < 20000; i++) held += is_heldout("doc-" + std::to_string(i), 10.0);
    EXPECT_NEAR(held / 20000.0, 0.10, 0.01);
    EXPECT_EQ(is_heldout("Built-in Functions", 10.0), is_heldout(std::string("Built-in ") + "Functions", 10.0));
    EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cull) << "the published FNV-1a test vector";
    int none = 0;
    for (int i = 0; i < 1000; i++) none += is_heldout("x" + std::to_string(i), 0.0);
    EXPECT_EQ(none, 0);
}

TEST(Texinfo, NodesBecomeCleanDocuments) {
    std::string info =
        "This is test.info, produced by makeinfo.\n\n\x1f\n"
        "File: test.info,  Node: Tuples,  Next: Sets,  Up: Data\n\n"
        "5.3 Tuples and Sequences\n"
        "========================\n\n"
        "We saw that lists and strings have many common properties, see *note Sequence Types: 3a.\n"
        "and the *note tutorial\n     section: 1f, which describes *note Lists::.  Padding padding padding padding\n"
        "padding padding padding padding padding padding padding padding padding.\n\n"
        "* Menu:\n\n* Sets::\n\n"
        "   ---------- Footnotes ----------\n\n   (1) https://example.org/\n\n\x1f\n"
        "File: test.info,  Node: Tiny,  Up: Data\n\nToo short.\n\x1f\n"
        "Tag Table:\nNode: Tuples\x7f" "120\n\x1f\nEnd Tag Table\n";
    InfoStats stats;
    auto docs = info_to_documents(info, 200, &stats);
    EXPECT_EQ(stats.nodes, 2);
    EXPECT_EQ(stats.dropped_short, 1);
    ASSERT_EQ(docs.size(), 1u);
    EXPECT_EQ(docs[0].id, "Tuples");
    const std::string& t = docs[0].text;
    EXPECT_EQ(t.find("====="), std::string::npos) << t;
    EXPECT_EQ(t.find("*note"), std::string::npos) << t;
    EXPECT_EQ(t.find("Footnotes"), std::string::npos) << t;
    EXPECT_EQ(t.find("example.org"), std::string::npos) << t;
    EXPECT_EQ(t.find("Menu"), std::string::npos) << t;
    EXPECT_NE(t.find("see Sequence Types\nand the tutorial\n     section, which describes Lists.  Padding"),
              std::string::npos)
        << t;
    EXPECT_EQ(t.rfind("5.3 Tuples and Sequences", 0), 0u) << t;
}

}  // namespace
}  // namespace hlat
