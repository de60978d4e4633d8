// The evaluator: the harness's scoring rules checked on hand-computed cases,
// the cached decoder held against the trainer's forward pass, task files
// refused with a clear message, make-tasks frozen and decontaminated, and
// checkpoints scored only once complete, into the store, agreeing with the
// PyTorch reference.
#include "eval/decoder.h"
#include "eval/evaluator.h"
#include "eval/make_tasks.h"
#include "eval/scoring.h"
#include "eval/task_file.h"
#include "eval/tasks.h"
#include "telemetry/reader.h"
#include "test_util.h"
#include "trainer/model/kernels.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <set>
#include <utility>

namespace hlat {
namespace {

namespace fs = std::filesystem;
using eval::Window;

// ---- the context/continuation boundary ----

class EvalTokenizer : public ::testing::Test {
  protected:
    static void SetUpTestSuite() { small_ = new test::SmallTokenizer(); }
    static void TearDownTestSuite() { delete small_; }
    static std::vector<int32_t> encode(const std::string& s) {
        std::vector<int32_t> ids;
        small_->tokenizer->encode(s, ids);
        return ids;
    }
    static test::SmallTokenizer* small_;
};
test::SmallTokenizer* EvalTokenizer::small_ = nullptr;

TEST_F(EvalTokenizer, TrailingSpacesOfTheContextMoveToTheContinuation) {
    // This tokenizer keeps whitespace, so a context encoded with its trailing
    // space ends in a token of its own: the harness's rule avoids that.
    ASSERT_NE(encode("the model gradient "), encode("the model gradient"));
    for (std::string space : {" ", "  ", "\n", " \n "}) {
        SCOPED_TRACE(nlohmann::json(space).dump());
        eval::EncodedPair p = eval::encode_pair(*small_->tokenizer, "the model gradient" + space, " norm spike");
        EXPECT_EQ(p.context, encode("the model gradient"));
        // The continuation is whatever the whole encoding has past the context.
        std::vector<int32_t> whole = encode("the model gradient" + space + " norm spike");
        std::vector<int32_t> joined = p.context;
        joined.insert(joined.end(), p.continuation.begin(), p.continuation.end());
        EXPECT_EQ(joined, whole);
        EXPECT_FALSE(p.continuation.empty());
    }
    // Without trailing whitespace nothing moves: the continuation is the
    // whole pair's tail past the context's own tokens.
    eval::EncodedPair p = eval::encode_pair(*small_->tokenizer, "the model", " gradient");
    std::vector<int32_t> whole = encode("the model gradient"), context = encode("the model");
    EXPECT_EQ(p.context, context);
    EXPECT_EQ(p.continuation, std::vector<int32_t>(whole.begin() + (long)context.size(), whole.end()));
}

// ---- acc and acc_norm ----

TEST(EvalScoring, AccAndAccNormDisagreeOnAConstructedItem) {
    // "yes" is likelier in total (-6 > -9), but "a longer answer" is likelier
    // per character (-9/15 = -0.6 > -6/3 = -2).
    std::vector<std::string> choices = {"yes", "a longer answer", "no"};
    eval::Picks p = eval::pick_choices({-6.0, -9.0, -7.5}, choices);
    EXPECT_EQ(p.acc, 0u);
    EXPECT_EQ(p.acc_norm, 1u);
    // Length is in characters, not bytes: "café" is 4 long (5 bytes), so per
    // character it scores -1.0 against "cafe!"'s -0.9.
    p = eval::pick_choices({-4.0, -4.5}, {"café", "cafe!"});
    EXPECT_EQ(p.acc, 0u);
    EXPECT_EQ(p.acc_norm, 1u);
    EXPECT_EQ(eval::utf8_length("café"), 4);
    // Ties go to the first choice, as numpy's argmax.
    p = eval::pick_choices({-3.0, -3.0}, {"abc", "xyz"});
    EXPECT_EQ(p.acc, 0u);
    EXPECT_EQ(p.acc_norm, 0u);
}

TEST(EvalScoring, MeanStderrAndWordCountsAsTheHarness) {
    eval::Metric m = eval::mean_metric("acc", {1, 0, 1, 1});
    EXPECT_DOUBLE_EQ(m.value, 0.75);
    EXPECT_NEAR(m.stderr_, 0.25, 1e-12);  // sample sd 0.5 / sqrt(4)
    EXPECT_EQ(eval::harness_word_count("a b  c"), 3);
    EXPECT_EQ(eval::harness_word_count("a b\n"), 3);  // re.split keeps the empty tail
    EXPECT_EQ(eval::harness_word_count(" a"), 2);
}

// ---- rolling windows ----

TEST(EvalScoring, RollingWindowsAsComputedByHand) {
    // 10 tokens, windows of 4, context_len 2: each later window predicts 3.
    std::vector<Window> w = eval::rolling_windows(10, 4, 2);
    ASSERT_EQ(w.size(), 3u);
    EXPECT_EQ((std::vector<long>{w[0].input_begin, w[0].input_end, w[0].pred_begin, w[0].pred_end}),
              (std::vector<long>{-1, 3, 0, 4}));
    EXPECT_EQ((std::vector<long>{w[1].input_begin, w[1].input_end, w[1].pred_begin, w[1].pred_end}),
              (std::vector<long>{2, 6, 4, 7}));
    EXPECT_EQ((std::vector<long>{w[2].input_begin, w[2].input_end, w[2].pred_begin, w[2].pred_end}),
              (std::vector<long>{5, 9, 7, 10}));
    EXPECT_TRUE(eval::rolling_windows(0, 4, 2).empty());
    EXPECT_THROW(eval::rolling_windows(10, 4, 5), std::invalid_argument);
}

TEST(EvalScoring, RollingWindowsScoreEveryTokenExactlyOnce) {
    for (long n : {1L, 2L, 31L, 32L, 33L, 100L, 257L})
        for (int T : {4, 32})
            for (int context_len : {1, 2, T / 2, T}) {
                SCOPED_TRACE(fmt::format("n {} T {} context {}", n, T, context_len));
                std::vector<int> times(n, 0);
                for (const Window& w : eval::rolling_windows(n, T, context_len)) {
                    const long len = w.input_end - w.input_begin, pred = w.pred_end - w.pred_begin;
                    EXPECT_LE(len, T);
                    EXPECT_GE(w.input_begin, -1);
                    // The last `pred` inputs are the tokens just before the predicted ones.
                    EXPECT_EQ(w.input_end, w.pred_end - 1);
                    EXPECT_LE(pred, len + 0);
                    if (w.input_begin >= 0) {
                        EXPECT_GE(w.pred_begin - w.input_begin, context_len - 1);
                    }
                    for (long t = w.pred_begin; t < w.pred_end; t++) times[t]++;
                }
                for (long t = 0; t < n; t++) ASSERT_EQ(times[t], 1) << "token " << t;
            }
}

// ---- the decoder against the trainer's forward pass ----

// log p(tokens[i+1] | tokens[..i]) from Model::forward: the plain reference.
static std::vector<double> model_logprobs(Model& m, const std::vector<int32_t>& tokens) {
    const int T = m.seq_len(), V = m.config().vocab_size;
    std::vector<int32_t> in(T, 0);
    std::copy(tokens.begin(), tokens.end(), in.begin());
    m.forward(in.data(), nullptr);
    std::vector<double> out;
    for (size_t i = 0; i + 1 < tokens.size(); i++) {
        const float* row = m.activations().logits + (long)i * V;
        double max = *std::max_element(row, row + V), sum = 0.0;
        for (int v = 0; v < V; v++) sum += std::exp(row[v] - max);
        out.push_back(row[tokens[i + 1]] - max - std::log(sum));
    }
    return out;
}

static Model tiny_model(int NKV, bool qk_norm = false) {
    ModelConfig c;
    c.qk_norm = qk_norm;
    c.vocab_size = 97;
    c.dim = 32;
    c.n_layers = 2;
    c.n_heads = 4;
    c.n_kv_heads = NKV;
    c.hidden_dim = 48;
    c.max_seq_len = 24;
    Model m(c, 1, c.max_seq_len, false);
    m.init_weights(7);
    // qk-norm's gains away from one, q's unlike k's.
    for (int i = 0; qk_norm && i < c.n_layers * c.head_dim(); i++) {
        m.param_tensors().q_norm[i] = 0.5f + 0.05f * (i % 13);
        m.param_tensors().k_norm[i] = 1.5f - 0.04f * (i % 11);
    }
    return m;
}

TEST(EvalDecoder, CachedContinuationsMatchTheFullForwardPass) {
    for (auto [NKV, qk_norm] : {std::pair{4, false}, std::pair{2, false}, std::pair{2, true}}) {
        SCOPED_TRACE(fmt::format("kv heads {}, qk_norm {}", NKV, qk_norm));
        Model m = tiny_model(NKV, qk_norm);
        eval::Scorer scorer(m, 2);
        std::vector<int32_t> context = {5, 17, 33, 60, 2, 91, 11};
        std::vector<std::vector<int32_t>> conts = {{40}, {3, 4, 5, 6}, {90, 1}};
        std::vector<eval::ContinuationScore> got = scorer.score(context, conts);
        ASSERT_EQ(got.size(), conts.size());
        for (size_t c = 0; c < conts.size(); c++) {
            std::vector<int32_t> seq = {2};
            seq.insert(seq.end(), context.begin(), context.end());
            seq.insert(seq.end(), conts[c].begin(), conts[c].end());
            std::vector<double> lp = model_logprobs(m, seq);
            double want = 0.0;
            for (size_t i = lp.size() - conts[c].size(); i < lp.size(); i++) want += lp[i];
            EXPECT_NEAR(got[c].loglik, want, 1e-4) << "choice " << c;
            EXPECT_EQ(got[c].tokens, (int)conts[c].size());
        }
        // Shared context once, then only the continuations' own tokens
        // (all but the last of each): 8 + 0 + 3 + 1.
        EXPECT_EQ(scorer.tokens_run(), 12);
    }
}

TEST(EvalDecoder, RollingLogLikelihoodOfADocumentThatFitsIsItsFullForwardSum) {
    Model m = tiny_model(2);
    eval::Scorer scorer(m, 2);
    std::vector<int32_t> doc = {8, 9, 10, 11, 12, 50, 51, 52, 53, 7, 7, 7};
    eval::ContinuationScore s = scorer.score_rolling(doc, 12);
    std::vector<int32_t> seq = {2};
    seq.insert(seq.end(), doc.begin(), doc.end());
    double want = 0.0;
    for (double lp : model_logprobs(m, seq)) want += lp;
    EXPECT_NEAR(s.loglik, want, 1e-4);
    EXPECT_EQ(s.tokens, (int)doc.size());
    // A document longer than the model is scored in windows, still once per token.
    std::vector<int32_t> long_doc;
    for (int i = 0; i < 60; i++) long_doc.push_back((i * 13) % 97);
    EXPECT_EQ(scorer.score_rolling(long_doc, 12).tokens, 60);
}

TEST(EvalDecoder, AContinuationLongerThanTheModelIsAnError) {
    Model m = tiny_model(4);
    eval::Scorer scorer(m, 2);
    EXPECT_THROW(scorer.score({1, 2}, {std::vector<int32_t>(25, 3)}), std::runtime_error);
    EXPECT_THROW(scorer.score({1, 2}, {{}}), std::runtime_error);
    // A long context is cut from the left so the continuation still fits.
    std::vector<int32_t> context(40, 9);
    EXPECT_NO_THROW(scorer.score(context, {{1, 2, 3}}));
}

// ---- task files ----

class TaskFiles : public ::testing::Test {
  protected:
    std::string write(const std::string& name, const std::string& content) {
        std::ofstream(dir.file(name), std::ios::binary) << content;
        return dir.file(name);
    }
    std::string error_of(const std::string& path) {
        try {
            eval::read_task_file(path);
        } catch (const std::exception& e) {
            return e.what();
        }
        return "";
    }
    test::ScratchDir dir{"taskfiles"};
};

TEST_F(TaskFiles, AUserFileWithoutHeaderIsMultipleChoiceNamedAfterItself) {
    std::string path = write("piqa.jsonl", R"({"context": "To open a jar,", "choices": ["twist the lid.", "eat it."], "gold": 0, "id": 7}
{"context": "To dry hair,", "choices": ["use a towel.", "use water.", "wait."], "gold": 0}

)");
    eval::TaskFile t = eval::read_task_file(path);
    EXPECT_EQ(t.name, "piqa");
    EXPECT_EQ(t.kind, eval::TaskKind::MultipleChoice);
    ASSERT_EQ(t.items.size(), 2u);
    EXPECT_EQ(t.items[1].choices.size(), 3u);
}

TEST_F(TaskFiles, BadItemsAreRefusedNamingFileLineAndProblem) {
    std::string gold = write("gold.jsonl", R"({"context": "a", "choices": ["b", "c"], "gold": 0}
{"context": "a", "choices": ["b", "c"], "gold": 2}
)");
    EXPECT_NE(error_of(gold).find("gold.jsonl:2: gold index 2 is out of range for 2 choices"), std::string::npos)
        << error_of(gold);
    std::string negative = write("neg.jsonl", R"({"context": "a", "choices": ["b"], "gold": -1})" "\n");
    EXPECT_NE(error_of(negative).find("gold index -1 is out of range"), std::string::npos) << error_of(negative);
    std::string empty = write("empty.jsonl", R"({"context": "a", "choices": [], "gold": 0})" "\n");
    EXPECT_NE(error_of(empty).find("empty.jsonl:1: the choice list is empty"), std::string::npos) << error_of(empty);
    std::string utf8 = write("bytes.jsonl", "{\"context\": \"a\", \"choices\": [\"b\"], \"gold\": 0}\n"
                                            "{\"context\": \"caf\xe9\", \"choices\": [\"b\"], \"gold\": 0}\n");
    EXPECT_NE(error_of(utf8).find("bytes.jsonl:2: the line is not valid UTF-8"), std::string::npos) << error_of(utf8);
    std::string notjson = write("nj.jsonl", "{\"context\": \"a\", \"choices\": [\"b\"], \"gold\": 0\n");
    EXPECT_NE(error_of(notjson).find("nj.jsonl:1: not JSON"), std::string::npos) << error_of(notjson);
    std::string mistyped = write("mt.jsonl", R"({"context": "a", "choices": ["b", 3], "gold": 0})" "\n");
    EXPECT_NE(error_of(mistyped).find("\"choices\" must be a list of strings"), std::string::npos);
    std::string unknown = write("unk.jsonl", R"({"question": "a"})" "\n");
    EXPECT_NE(error_of(unknown).find("cannot tell the task kind"), std::string::npos) << error_of(unknown);
    std::string none = write("none.jsonl", "\n");
    EXPECT_NE(error_of(none).find("has no items"), std::string::npos) << error_of(none);
    EXPECT_NE(error_of(dir.file("missing.jsonl")).find("cannot open task file"), std::string::npos);
}

// ---- make-tasks ----

// Prose with sentences, so every task has candidates; the held-out documents
// are those whose id hashes into the split.
static std::vector<Document> prose_documents(int n) {
    static const char* subjects[] = {"The parser", "A socket", "The logger", "Each thread", "The module",
                                     "This function", "The buffer", "A generator"};
    static const char* verbs[] = {"reads", "closes", "writes", "returns", "copies", "checks", "formats", "opens"};
    static const char* objects[] = {"the file", "a new list", "every record", "the queue", "its argument",
                                    "the socket", "a string", "the buffer"};
    std::vector<Document> docs;
    std::mt19937 rng(3);
    for (int d = 0; d < n; d++) {
        std::string text;
        for (int p = 0; p < 4; p++) {
            if (p) text += "\n\n";
            for (int s = 0; s < 4; s++) {
                if (s) text += "  ";
                static const char* last[] = {"records", "buffers", "strings", "files"};
                text += fmt::format("{} {} {} when doc {} asks for {} {}.", subjects[rng() % 8], verbs[rng() % 8],
                                    objects[rng() % 8], d, rng() % 1000, last[rng() % 4]);
            }
        }
        docs.push_back({fmt::format("doc-{}", d), text});
    }
    return docs;
}

TEST(MakeTasks, FrozenDeterministicAndDecontaminated) {
    test::ScratchDir dir("make_tasks");
    std::vector<Document> docs = prose_documents(60);
    auto train = std::make_shared<std::vector<Document>>(), heldout = std::make_shared<std::vector<Document>>();
    for (const Document& d : docs) (is_heldout(d.id, 30.0) ? heldout : train)->push_back(d);
    ASSERT_GE(heldout->size(), 5u);
    // One held-out document copies a training paragraph: overlapping 13-grams.
    Document copied = heldout->front();
    copied.id = "copied";
    copied.text = train->front().text;
    heldout->push_back(copied);
    Dataset ds{train, heldout, {}, "fingerprint-xyz"};
    std::ofstream(dir.file("corpus.jsonl")) << "{}\n";
    DataConfig data;
    data.corpus = {dir.file("corpus.jsonl")};
    eval::MakeTasksOptions options;
    options.out_dir = dir.file("tasks");
    std::vector<std::string> paths = eval::make_tasks(ds, data, options);
    ASSERT_EQ(paths.size(), 3u);
    std::map<std::string, std::string> first;
    for (const std::string& p : paths) {
        eval::TaskFile t = eval::read_task_file(p);
        SCOPED_TRACE(t.name);
        EXPECT_FALSE(t.items.empty());
        EXPECT_EQ(t.header["corpus"]["fingerprint"], "fingerprint-xyz");
        EXPECT_EQ(t.header["corpus"]["files"][0]["sha256"].get<std::string>().size(), 64u);
        EXPECT_EQ(t.header["seed"], 1234);
        for (const eval::TaskItem& item : t.items) {
            EXPECT_EQ(item.text.find(train->front().text.substr(0, 60)), std::string::npos) << "contaminated item kept";
            if (t.kind == eval::TaskKind::MultipleChoice) {
                EXPECT_EQ(item.choices.size(), 4u);
                EXPECT_EQ(std::set<std::string>(item.choices.begin(), item.choices.end()).size(), 4u);
            } else if (t.kind == eval::TaskKind::Cloze) {
                // The target occurs earlier in the passage.
                EXPECT_NE(item.context.find(item.target), std::string::npos) << item.target;
            }
        }
        if (t.kind == eval::TaskKind::Perplexity) {
            EXPECT_GE(t.header["decontamination"]["dropped"].get<long>(), 1);
        }
        std::ifstream in(p);
        first[p] = std::string(std::istreambuf_iterator<char>(in), {});
    }
    // Frozen: a second build is refused, and with --force it is identical.
    try {
        eval::make_tasks(ds, data, options);
        ADD_FAILURE() << "overwrote frozen task files";
    } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find("task files are frozen"), std::string::npos) << e.what();
    }
    options.force = true;
    eval::make_tasks(ds, data, options);
    for (const std::string& p : paths) {
        std::ifstream in(p);
        EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), first[p]) << p;
    }
}

TEST(MakeTasks, SentencesSplitAfterPunctuationNotAfterAbbreviations) {
    EXPECT_EQ(eval::split_sentences("Use it, e.g. With care.  Then stop! Why? No."),
              (std::vector<std::string>{"Use it, e.g. With care.", "Then stop!", "Why?", "No."}));
}

// A small held-out split (bench/small_corpus.py's): one gold far shorter than
// every other has no distractor of its length; it is dropped, not a crash.
TEST(MakeTasks, AGoldWithNoSentenceOfItsLengthIsDropped) {
    test::ScratchDir dir("make_tasks_lonely");
    auto train = std::make_shared<std::vector<Document>>(), heldout = std::make_shared<std::vector<Document>>();
    train->push_back({"train", "Nothing here is held out, and nothing here overlaps the held-out text at all."});
    const std::string context = "The context sentence runs well past twenty characters.  ";
    heldout->push_back({"short", context + "Then a short one ends."});
    for (int d = 0; d < 4; d++)
        heldout->push_back({fmt::format("long-{}", d),
                            context + fmt::format("Then document {} goes on for much longer than that, through clause "
                                                  "after clause of plain words, until it ends.", d)});
    // One sentence, no gold of its own: the cloze item, so that every task has one.
    heldout->push_back({"cloze", "The buffer that the reader fills with every line of the file, one after another "
                                 "until the end of the input, is the same buffer."});
    Dataset ds{train, heldout, {}, "fingerprint-lonely"};
    std::ofstream(dir.file("corpus.jsonl")) << "{}\n";
    DataConfig data;
    data.corpus = {dir.file("corpus.jsonl")};
    eval::MakeTasksOptions options;
    options.out_dir = dir.file("tasks");
    eval::TaskFile mc = eval::read_task_file(eval::make_tasks(ds, data, options).at(1));
    ASSERT_EQ(mc.kind, eval::TaskKind::MultipleChoice);
    EXPECT_EQ(mc.items.size(), 4u);
    for (const eval::TaskItem& item : mc.items)
        for (const std::string& c : item.choices) EXPECT_EQ(c.find("short one"), std::string::npos) << c;
}

// ---- checkpoints: through the binary, as a user runs them ----

class EvalRun : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        small_ = new test::SmallTokenizer();
        std::ofstream corpus(small_->dir.file("corpus.jsonl"));
        for (const Document& d : small_->docs) corpus << nlohmann::json{{"id", d.id}, {"text", d.text}}.dump() << "\n";
        corpus.close();
        std::ofstream(small_->dir.file("config.json")) << fmt::format(R"({{
          "model": {{"vocab_size": 320, "dim": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2,
                    "hidden_dim": 64, "max_seq_len": 32}},
          "schedule": {{"max_lr": 3e-3, "min_lr": 3e-4, "warmup_steps": 2, "total_steps": 8}},
          "data": {{"corpus": ["{}"], "tokenizer": "{}", "prefetch_batches": 3}},
          "run": {{"batch_size": 4, "seq_len": 32, "threads": 1, "eval_every": 0,
                  "checkpoint_every": 4, "keep_checkpoints": 0}}
        }})", small_->dir.file("corpus.jsonl"), small_->model_path);
        // Task files a user might write: word salad like the training text.
        std::ofstream(small_->dir.file("mc.jsonl"))
            << R"({"context": "the model gradient norm", "choices": ["spike loss step.", "layer", "token attention mask rank"], "gold": 0})" "\n"
            << R"({"context": "python def return  ", "choices": ["import class", "value"], "gold": 1})" "\n";
        std::ofstream(small_->dir.file("cloze.jsonl"))
            << R"({"context": "the loss of the step of the", "target": "loss"})" "\n";
        std::ofstream(small_->dir.file("ppl.jsonl"))
            << nlohmann::json{{"text", small_->docs[0].text}}.dump() << "\n"
            << nlohmann::json{{"text", small_->docs[7].text}}.dump() << "\n";  // spans many windows
        run_dir_ = small_->dir.file("run");
        auto r = test::run_command(fmt::format("{} train --config {} --out-dir {} --steps 8 --store {}", HLAT_BINARY,
                                               small_->dir.file("config.json"), run_dir_, store()));
        ASSERT_EQ(r.exit_code, 0) << r.output;
        fs::copy_file(store(), unscored_store());  // before any test's watcher writes evals into store()
    }
    static void TearDownTestSuite() { delete small_; }
    static std::string store() { return small_->dir.file("hlat.db"); }
    static std::string unscored_store() { return small_->dir.file("unscored.db"); }
    static std::string tasks() {
        return fmt::format("{},{},{}", small_->dir.file("mc.jsonl"), small_->dir.file("cloze.jsonl"),
                           small_->dir.file("ppl.jsonl"));
    }
    static std::string checkpoint(int step) { return fmt::format("{}/checkpoints/step_{:08d}", run_dir_, step); }
    static test::SmallTokenizer* small_;
    static std::string run_dir_;
};
test::SmallTokenizer* EvalRun::small_ = nullptr;
std::string EvalRun::run_dir_;

TEST_F(EvalRun, ScoresACheckpointAndPrintsATable) {
    auto r = test::run_command(fmt::format("{} eval --checkpoint {} --tasks {}", HLAT_BINARY, checkpoint(8), tasks()));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("after 8 steps"), std::string::npos) << r.output;
    for (const char* want : {"mc ", "acc_norm", "gold_logprob", "cloze", "perplexity", "bits_per_byte", "word_perplexity"}) {
        EXPECT_NE(r.output.find(want), std::string::npos) << want << "\n" << r.output;
    }
    // Chance of the two items: (1/3 + 1/2) / 2.
    EXPECT_NE(r.output.find("0.417"), std::string::npos) << r.output;

    r = test::run_command(fmt::format("{} eval --checkpoint {} --tasks {} --json", HLAT_BINARY, checkpoint(8), tasks()));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
    EXPECT_EQ(j["tokens_seen"], 8 * 4 * 32);
    const double bpb = j["tasks"]["ppl"]["metrics"]["bits_per_byte"];
    EXPECT_GT(bpb, 0.0);
    EXPECT_LT(bpb, std::log2(320.0) * 2);  // below a uniform guess over the vocabulary, per byte and then some
}

TEST_F(EvalRun, AgreesWithThePyTorchReferenceOnLogLikelihoods) {
    std::string samples = small_->dir.file("samples.jsonl");
    auto r = test::run_command(fmt::format("{} eval --checkpoint {} --tasks {} --log-samples {} --rolling-context 8",
                                           HLAT_BINARY, checkpoint(8), tasks(), samples));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = test::run_command(fmt::format("{} {}/tests/reference/eval_loglik.py {} {}", HLAT_PYTHON, HLAT_SOURCE_DIR,
                                      checkpoint(8), samples));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto j = nlohmann::json::parse(r.output.substr(r.output.rfind('{')));
    EXPECT_EQ(j["compared"], 2 * (3 + 2) + 1 + 2);  // choices (with and without context), cloze targets, documents
    EXPECT_LT(j["max_abs_diff"].get<double>(), 1e-4) << r.output;
}

TEST_F(EvalRun, AnIncompleteCheckpointIsNotReadUntilItsManifestLands) {
    // A copy being written in place (by another tool, or a copy in progress):
    // everything but the manifest, which is written last.
    std::string copy = small_->dir.file("copy/checkpoints/step_00000004");
    fs::create_directories(copy);
    for (const auto& e : fs::directory_iterator(checkpoint(4)))
        if (e.path().filename() != "manifest.json") fs::copy(e.path(), copy + "/" + e.path().filename().string());
    auto r = test::run_command(fmt::format("{} eval --checkpoint {} --tasks {}", HLAT_BINARY, copy, tasks()));
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("has no readable manifest"), std::string::npos) << r.output;

    // The watcher scores complete checkpoints only, into the store, and a
    // second watcher does not score them again.
    fs::rename(checkpoint(8) + "/manifest.json", small_->dir.file("held_manifest.json"));
    std::string watch = fmt::format("{} eval --watch {} --tasks {} --store {} --poll 0.2 --exit-when-done", HLAT_BINARY,
                                    run_dir_, tasks(), store());
    r = test::run_command(watch);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("scored 1 checkpoints"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("not scored yet"), std::string::npos) << r.output;
    auto steps_in_store = [&] {
        telemetry::Reader reader(store());
        auto run = reader.find_run("run");
        EXPECT_TRUE(run.has_value());
        std::map<int64_t, int64_t> tokens;  // step -> tokens seen
        for (const telemetry::EvalRecord& e : reader.evals(run->id))
            if (e.task == "mc") tokens[e.step] = e.tokens;
        return tokens;
    };
    EXPECT_EQ(steps_in_store(), (std::map<int64_t, int64_t>{{3, 4 * 4 * 32}}));

    fs::rename(small_->dir.file("held_manifest.json"), checkpoint(8) + "/manifest.json");
    r = test::run_command(watch);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("scored 1 checkpoints"), std::string::npos) << r.output;
    EXPECT_EQ(steps_in_store(), (std::map<int64_t, int64_t>{{3, 4 * 4 * 32}, {7, 8 * 4 * 32}}));

    // hlat compare reads them back: the last checkpoint's value with its error.
    r = test::run_command(fmt::format("{} compare --store {} --runs run --json", HLAT_BINARY, store()));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto j = nlohmann::json::parse(r.output.substr(r.output.rfind("\n{") + 1));
    const auto& acc = j["runs"]["run"]["evals"]["mc/acc_norm"];
    EXPECT_EQ(acc["tokens"], 8 * 4 * 32) << j.dump();
    EXPECT_TRUE(acc["stderr"].is_number()) << j.dump();
    EXPECT_TRUE(j["runs"]["run"]["evals"]["ppl/bits_per_byte"]["value"].is_number()) << j.dump();
    EXPECT_FALSE(j["runs"]["run"]["evals"].contains("mc/chance")) << j.dump();
    r = test::run_command(fmt::format("{} compare --store {} --runs run --out {}", HLAT_BINARY, store(),
                                      small_->dir.file("report.html")));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("checkpoint evaluations"), std::string::npos) << r.output;
    std::ifstream report(small_->dir.file("report.html"));
    std::string html((std::istreambuf_iterator<char>(report)), {});
    EXPECT_NE(html.find("ppl/bits_per_byte by tokens seen"), std::string::npos);
}

TEST_F(EvalRun, AWatcherToldToStopMidCheckpointStoresNothingOfIt) {
    // SIGTERM sets the flag; here the first scored item does. The watcher must
    // not finish the checkpoint first (a large one takes minutes), and what it
    // had scored must not reach the store as if the checkpoint were done.
    const std::string copy = small_->dir.file("stop.db");
    fs::copy_file(unscored_store(), copy);
    auto evals_in = [&] {
        telemetry::Reader reader(copy);
        return reader.evals(reader.find_run("run")->id).size();
    };
    const size_t before = evals_in();
    std::vector<eval::TaskFile> files;
    for (const char* name : {"mc.jsonl", "cloze.jsonl", "ppl.jsonl"}) files.push_back(eval::read_task_file(small_->dir.file(name)));
    eval::WatchOptions watch;
    watch.run_dir = run_dir_;
    watch.store = copy;
    watch.poll_seconds = 0.1;
    watch.exit_when_done = true;
    std::atomic<bool> stop{false};
    int items = 0;
    eval::TaskOptions options;
    options.on_sample = [&](const nlohmann::json&) {
        items++;
        stop = true;
    };
    EXPECT_EQ(eval::watch_run(files, watch, options, stop), 0);
    EXPECT_EQ(items, 1) << "scoring went on after the stop";
    EXPECT_EQ(evals_in(), before);

    // The next watcher scores it whole.
    stop = false;
    options.on_sample = nullptr;
    EXPECT_EQ(eval::watch_run(files, watch, options, stop), 2);
    EXPECT_GT(evals_in(), before);
}

TEST_F(EvalRun, BadTaskFilesAndOptionsFailWithTheReason) {
    std::string bad = small_->dir.file("bad.jsonl");
    std::ofstream(bad) << R"({"context": "a", "choices": ["b", "c", "d", "e"], "gold": 4})" "\n";
    auto r = test::run_command(fmt::format("{} eval --checkpoint {} --tasks {}", HLAT_BINARY, checkpoint(8), bad));
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.output.find("bad.jsonl:1: gold index 4 is out of range for 4 choices"), std::string::npos) << r.output;
    r = test::run_command(fmt::format("{} eval --tasks {}", HLAT_BINARY, tasks()));
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.output.find("exactly one of --checkpoint and --watch"), std::string::npos) << r.output;
    r = test::run_command(fmt::format("{} eval --checkpoint {} --tasks {}", HLAT_BINARY, small_->dir.file("nowhere"), tasks()));
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.output.find("has no readable manifest"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace hlat
