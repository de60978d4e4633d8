// The online loader: packing, rank streams, exact state restore, and the
// tokenizer it uses.
#include "test_util.h"
#include "trainer/data/loader.h"

#include <fstream>

#include <set>

namespace hlat {
namespace {

class LoaderTest : public ::testing::Test {
  protected:
    static void SetUpTestSuite() { small_ = new test::SmallTokenizer(); }
    static void TearDownTestSuite() { delete small_; }
    static test::SmallTokenizer* small_;
    const Tokenizer& tok() { return *small_->tokenizer; }
    std::shared_ptr<const std::vector<Document>> docs() {
        return std::make_shared<const std::vector<Document>>(small_->docs);
    }
};
test::SmallTokenizer* LoaderTest::small_ = nullptr;

TEST_F(LoaderTest, TokenizerHasLlamaSpecialIdsAndRoundTrips) {
    EXPECT_EQ(tok().vocab_size(), 320);
    EXPECT_EQ(tok().bos_id(), 1);
    EXPECT_EQ(tok().eos_id(), 2);
    std::vector<int32_t> ids;
    std::string text = "the  gradient norm\n\n  of 2024 layers";
    tok().encode(text, ids);
    EXPECT_EQ(tok().decode(ids), text) << "identity normalization keeps every space";
    ids.clear();
    tok().encode("\xe4\xb8\xad", ids);  // a character never seen in training: byte fallback, not <unk>
    EXPECT_EQ(std::count(ids.begin(), ids.end(), 0), 0);
    EXPECT_EQ(tok().decode(ids), "\xe4\xb8\xad");
}

TEST_F(LoaderTest, PacksDocumentsWithEosAndCarriesLeftovers) {
    auto d = docs();
    Packer packer(d, tok(), 0, 0, 1, false, {});
    std::vector<int32_t> packed;
    const int len = 33;
    while (packer.next_sequence(packed, len)) {}
    std::vector<int32_t> expected;
    for (const Document& doc : *d) {
        tok().encode(doc.text, expected);
        expected.push_back(tok().eos_id());
    }
    ASSERT_EQ(packed.size() % len, 0u);
    ASSERT_GE(expected.size(), packed.size());
    EXPECT_LT(expected.size() - packed.size(), (size_t)len) << "only the final partial sequence is left";
    EXPECT_TRUE(std::equal(packed.begin(), packed.end(), expected.begin()))
        << "the stream is every document in order, EOS after each, split across sequences";
}

TEST_F(LoaderTest, RanksSeeDisjointDocumentsInAnEpoch) {
    auto d = docs();
    const int world = 3;
    for (int epoch = 0; epoch < 2; epoch++) {
        std::multiset<long> all;
        for (int rank = 0; rank < world; rank++) {
            Packer p(d, tok(), 42, rank, world, true, {epoch, 0, {}});
            all.insert(p.epoch_order().begin(), p.epoch_order().end());
            // What the rank packs in the epoch is exactly its documents, in its order.
            std::vector<int32_t> expected, packed;
            for (long i : p.epoch_order()) {
                tok().encode((*d)[i].text, expected);
                expected.push_back(tok().eos_id());
            }
            while (p.epoch() == epoch && packed.size() + 50 <= expected.size()) p.next_sequence(packed, 50);
            EXPECT_TRUE(std::equal(packed.begin(), packed.end(), expected.begin())) << "rank " << rank;
        }
        EXPECT_EQ(all.size(), d->size());
        EXPECT_EQ(std::set<long>(all.begin(), all.end()).size(), d->size()) << "no document on two ranks";
    }
    Packer e0(d, tok(), 42, 0, 1, true, {0, 0, {}}), e1(d, tok(), 42, 0, 1, true, {1, 0, {}});
    Packer again(d, tok(), 42, 0, 1, true, {0, 0, {}}), other_seed(d, tok(), 43, 0, 1, true, {0, 0, {}});
    EXPECT_NE(e0.epoch_order(), e1.epoch_order()) << "each epoch is reshuffled";
    EXPECT_EQ(e0.epoch_order(), again.epoch_order()) << "the order is a function of (seed, epoch)";
    EXPECT_NE(e0.epoch_order(), other_seed.epoch_order());
}

TEST_F(LoaderTest, RestoredStateContinuesTheStreamExactly) {
    auto d = docs();
    const int B = 3, T = 40;
    std::vector<int32_t> in(B * T), tg(B * T);
    Loader a(d, tok(), B, T, 7, 0, 1, 4);
    while (a.epoch() == 0) a.next_batch(in.data(), tg.data(), B, T);
    for (int i = 0; i < 3; i++) a.next_batch(in.data(), tg.data(), B, T);  // a little into epoch 1
    LoaderState saved = a.state();
    EXPECT_EQ(saved.epoch, 1);
    LoaderState round_trip = LoaderState::from_json(nlohmann::json::parse(saved.to_json().dump()));
    EXPECT_EQ(round_trip, saved);
    Loader b(d, tok(), B, T, 7, 0, 1, 2, round_trip);
    std::vector<int32_t> in2(B * T), tg2(B * T);
    for (int i = 0; i < 10; i++) {
        a.next_batch(in.data(), tg.data(), B, T);
        b.next_batch(in2.data(), tg2.data(), B, T);
        ASSERT_EQ(in, in2) << "batch " << i << " after restore";
        ASSERT_EQ(tg, tg2);
    }
    for (int b_ = 0; b_ < B; b_++)
        for (int t = 0; t + 1 < T; t++) EXPECT_EQ(tg[b_ * T + t], in[b_ * T + t + 1]) << "targets are inputs shifted";
}

// Batch provenance: each row's segments cover its T + 1 tokens and are the
// very tokens of their documents (text, then EOS), a long document running on
// from row to row and batch to batch.
TEST_F(LoaderTest, ProvenanceNamesTheDocumentTokensOfEveryRow) {
    auto d = docs();
    const int B = 3, T = 40;
    std::vector<int32_t> in(B * T), tg(B * T);
    Loader loader(d, tok(), B, T, 7, 0, 1, 2);
    long spans = 0;
    for (long batch = 0; batch < 30; batch++) {
        loader.next_batch(in.data(), tg.data(), B, T);
        const BatchProvenance* p = loader.last_provenance();
        ASSERT_NE(p, nullptr);
        EXPECT_EQ(p->batch, batch);
        ASSERT_EQ((int)p->rows.size(), B);
        for (int b = 0; b < B; b++) {
            std::vector<int32_t> from_documents;
            for (const Segment& g : p->rows[b]) {
                ASSERT_GE(g.doc, 0);
                std::vector<int32_t> doc;
                tok().encode((*d)[g.doc].text, doc);
                doc.push_back(tok().eos_id());
                ASSERT_LE(g.token + g.tokens, (long)doc.size()) << "batch " << batch << " row " << b;
                from_documents.insert(from_documents.end(), doc.begin() + g.token, doc.begin() + g.token + g.tokens);
                spans += g.token > 0;
            }
            // The row is inputs plus the last target: T + 1 tokens.
            std::vector<int32_t> row(in.begin() + b * T, in.begin() + (b + 1) * T);
            row.push_back(tg[(b + 1) * T - 1]);
            EXPECT_EQ(from_documents, row) << "batch " << batch << " row " << b;
        }
    }
    EXPECT_GT(spans, 0) << "some document runs on from an earlier row";
}

// A resumed loader knows the documents of the tokens it carried over, and the
// stream's batch count: its provenance is the uninterrupted loader's.
TEST_F(LoaderTest, RestoredStateKeepsProvenanceAndTheBatchCount) {
    auto d = docs();
    const int B = 2, T = 50;
    std::vector<int32_t> in(B * T), tg(B * T);
    Loader a(d, tok(), B, T, 3, 0, 1, 2);
    for (int i = 0; i < 7; i++) a.next_batch(in.data(), tg.data(), B, T);
    LoaderState saved = LoaderState::from_json(nlohmann::json::parse(a.state().to_json().dump()));
    EXPECT_EQ(saved.batch, 7);
    EXPECT_FALSE(saved.carry_segments.empty());
    Loader b(d, tok(), B, T, 3, 0, 1, 2, saved);
    for (int i = 0; i < 5; i++) {
        a.next_batch(in.data(), tg.data(), B, T);
        b.next_batch(in.data(), tg.data(), B, T);
        EXPECT_EQ(a.last_provenance()->batch, b.last_provenance()->batch);
        EXPECT_EQ(a.last_provenance()->rows, b.last_provenance()->rows) << "batch " << 7 + i;
    }
}

// rewind_skip's skip list: a skipped batch is packed and never handed out;
// the list survives in the state a checkpoint saves.
TEST_F(LoaderTest, SkippedBatchesAreNeverHandedOut) {
    auto d = docs();
    const int B = 2, T = 30;
    std::vector<std::vector<int32_t>> plain;
    std::vector<int32_t> in(B * T), tg(B * T);
    Loader a(d, tok(), B, T, 5, 0, 1, 2);
    for (int i = 0; i < 6; i++) {
        a.next_batch(in.data(), tg.data(), B, T);
        plain.push_back(in);
    }
    LoaderState skipping;
    skipping.skip = {1, 2};
    Loader b(d, tok(), B, T, 5, 0, 1, 2, skipping);
    for (int expected : {0, 3, 4, 5}) {
        b.next_batch(in.data(), tg.data(), B, T);
        EXPECT_EQ(in, plain[expected]);
        EXPECT_EQ(b.last_provenance()->batch, expected);
    }
    EXPECT_EQ(b.state().skip, (std::vector<long>{1, 2}));
    EXPECT_EQ(LoaderState::from_json(nlohmann::json::parse(b.state().to_json().dump())).skip, (std::vector<long>{1, 2}));
}

// bad_batch's planted document takes the first rows of its batch; the real
// documents move on to the rows after it.
TEST_F(LoaderTest, APlantedDocumentTakesTheFirstRowsOfItsBatch) {
    auto d = docs();
    const int B = 4, T = 30;
    std::vector<int32_t> in(B * T), tg(B * T), plain_in(B * T);
    Loader plain(d, tok(), B, T, 5, 0, 1, 2);
    Loader planted(d, tok(), B, T, 5, 0, 1, 2, {}, {PlantedBatch{1, 0, 2, "random"}});
    plain.next_batch(plain_in.data(), tg.data(), B, T);
    planted.next_batch(in.data(), tg.data(), B, T);
    EXPECT_EQ(in, plain_in) << "batch 0 is untouched";
    plain.next_batch(plain_in.data(), tg.data(), B, T);
    planted.next_batch(in.data(), tg.data(), B, T);
    const BatchProvenance* p = planted.last_provenance();
    for (int b = 0; b < 2; b++) {
        ASSERT_EQ(p->rows[b].size(), 1u);
        EXPECT_EQ(p->rows[b][0].doc, kPlantedDocument + 1);
        EXPECT_EQ(p->rows[b][0].token, (long)b * (T + 1));
    }
    EXPECT_EQ(std::vector<int32_t>(in.begin() + 2 * T, in.end()), std::vector<int32_t>(plain_in.begin(), plain_in.begin() + 2 * T))
        << "rows 2-3 hold what rows 0-1 held without the planted document";
    std::vector<int32_t> planted_tokens;
    tok().encode(planted_text("random", 1, 4 * 2 * (T + 1)), planted_tokens);
    EXPECT_EQ(std::vector<int32_t>(in.begin(), in.begin() + T), std::vector<int32_t>(planted_tokens.begin(), planted_tokens.begin() + T));
    Loader other_rank(d, tok(), B, T, 5, 1, 2, 2, {}, {PlantedBatch{1, 0, 2, "random"}});
    other_rank.next_batch(in.data(), tg.data(), B, T);
    other_rank.next_batch(in.data(), tg.data(), B, T);
    EXPECT_GE(other_rank.last_provenance()->rows[0][0].doc, 0) << "only rank 0's stream is planted";
}

TEST_F(LoaderTest, CorpusSmallerThanOneBatchIsAnError) {
    auto tiny = std::make_shared<const std::vector<Document>>(std::vector<Document>{{"a", "the model", "", 0}, {"b", "loss", "", 0}});
    try {
        Loader l(tiny, tok(), 4, 64, 1, 0, 1, 2);
        FAIL() << "a two-document corpus cannot fill a batch";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("fewer than one batch of 4 x 65 = 260"), std::string::npos) << e.what();
    }
}

TEST_F(LoaderTest, MalformedStateIsAnError) {
    EXPECT_THROW(LoaderState::from_json(nlohmann::json{{"epoch", 1}}), std::runtime_error);
    EXPECT_THROW(LoaderState::from_json(nlohmann::json{{"epoch", -1}, {"cursor", 0}, {"carry", nlohmann::json::array()}}),
                 std::runtime_error);
    // Segments that do not cover the carried tokens: a checkpoint edited or cut.
    EXPECT_THROW(LoaderState::from_json(nlohmann::json{{"epoch", 0}, {"cursor", 0}, {"carry", {5, 6}},
                                                       {"carry_segments", {{3, 0, 1}}}}),
                 std::runtime_error);
    // A checkpoint from before provenance: its carry belongs to no known document.
    LoaderState old = LoaderState::from_json(nlohmann::json{{"epoch", 0}, {"cursor", 4}, {"carry", {5, 6}}});
    EXPECT_EQ(old.carry_segments, (std::vector<Segment>{{-1, 0, 2}}));
    EXPECT_EQ(old.batch, 0);
}

TEST(Tokenizer, MissingOrCorruptModelIsNamed) {
    test::ScratchDir dir("bad_tokenizer");
    try {
        Tokenizer t(dir.file("absent.model"));
        FAIL();
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("absent.model"), std::string::npos);
    }
    std::ofstream(dir.file("junk.model")) << "not a protobuf";
    try {
        Tokenizer t(dir.file("junk.model"));
        FAIL();
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("cannot load tokenizer"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace hlat
