// The metric catalogue as `hlat serve` serves it: the table's documented
// entries, an entry derived from the name of a key nobody catalogued, a
// family's pattern, a stored run's keys (per-rank ones included) each with a
// chart, the page's default layout unchanged, and the bounds of the
// tokenless `?keys=` form.
#include "telemetry/metric_catalogue.h"
#include "telemetry/writer.h"
#include "api_requests.h"
#include "test_util.h"
#include "web/api.h"
#include "web/catalogue_api.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>

namespace hlat {
namespace {

using json = nlohmann::json;
using namespace telemetry;

using test::get;

json get_json(web::Api& api, const std::string& path, std::map<std::string, std::string> query = {}) {
    web::Response r = api.handle(get(path, std::move(query)));
    EXPECT_EQ(r.status, 200) << r.body;
    return json::parse(r.body);
}

// The table row with this key (a pattern for a family), or null.
json row(const json& catalogue, const std::string& key, bool per_rank = false) {
    for (const json& r : catalogue["table"])
        if (r["key"] == key && r["per_rank"] == per_rank) return r;
    return nullptr;
}

class Catalogue : public ::testing::Test {
  protected:
    // A run with hlat's keys, a key the catalogue does not know, a tensor
    // norm, and two rank metrics: one the page's old list knew, one it did not.
    static void SetUpTestSuite() {
        dir_ = new test::ScratchDir("catalogue");
        Writer w(dir_->file("s.db"));
        int64_t id = w.open_run(RunRecord{.name = "run", .source = "hlat"}, false);
        std::vector<MetricPoint> pts;
        for (const char* key : {"loss", "heldout_loss", "grad_norm", "lr", "data_s", "forward_s", "step_s",
                                "attn/entropy_min", "grad_norm/layers.0.qkv_proj"})
            pts.push_back({key, 0, 1.0, 1000.0});
        w.metrics(id, std::move(pts));
        for (int rank = 0; rank < 2; rank++) {
            w.rank_metric(id, {"rank/compute_s", 0, rank, 0.5, 1000.0});
            w.rank_metric(id, {"rank/io_wait_s", 0, rank, 0.25, 1000.0});
        }
    }
    static void TearDownTestSuite() { delete dir_; }
    static test::ScratchDir* dir_;
    web::Api api{dir_->file("s.db"), "secret-token"};
};
test::ScratchDir* Catalogue::dir_ = nullptr;

TEST_F(Catalogue, ServesTheDocumentedEntries) {
    json c = get_json(api, "/api/v1/catalogue");
    EXPECT_EQ(row(c, "loss"), json({{"key", "loss"}, {"per_rank", false}, {"title", "loss"}, {"unit", "nats"},
                                    {"group", "training"}, {"panel", "loss"}, {"shown", true}, {"derived", false}}));
    EXPECT_EQ(row(c, "heldout_loss")["panel"], "loss") << "held-out loss shares the loss chart";
    EXPECT_EQ(row(c, "tokens_per_s")["unit"], "tokens/s");
    EXPECT_EQ(row(c, "data_s")["panel"], "step_time");
    EXPECT_EQ(row(c, "step_s")["shown"], false) << "the total is not on the default view; its parts are";
    EXPECT_EQ(row(c, "grad_norm/<tensor>")["group"], "tensor norms");
    EXPECT_EQ(row(c, "lost_updates/kind/<kind>")["panel"], "lost_updates/kind");
    EXPECT_EQ(row(c, "rank/compute_s", true)["panel"], "rank:rank/compute_s");
    EXPECT_EQ(row(c, "health/allreduce_us", true)["unit"], "µs");
    EXPECT_EQ(row(c, "tp_drift", true)["title"], "per rank: TP drift of the replicated weights");
    EXPECT_EQ(row(c, "tp_drift")["panel"], "tp_drift") << "a run metric may share a rank metric's name";
    json grad = nullptr;
    for (const json& p : c["shared_panels"])
        if (p["id"] == "grad_norm") grad = p;
    EXPECT_EQ(grad["shade"], "grad_norm") << "the grad-norm chart shades spike episodes";
    EXPECT_FALSE(c["rule"].get<std::string>().empty());
}

TEST_F(Catalogue, AKeyOutsideTheTableGetsAnEntryFromItsName) {
    json c = get_json(api, "/api/v1/catalogue",
                      {{"keys", "train/custom_metric,io_wait_ms,grad_norm/kind/o_proj,grad_norm/layers.3.w1"},
                       {"rank_keys", "rank/io_wait_s,disk_gb"}});
    EXPECT_EQ(c["metrics"]["train/custom_metric"],
              json({{"title", "train/custom_metric"}, {"unit", ""}, {"group", "train"},
                    {"panel", "key:train/custom_metric"}, {"shown", false}, {"derived", true}}));
    EXPECT_EQ(c["metrics"]["io_wait_ms"]["group"], "metrics");
    EXPECT_EQ(c["metrics"]["io_wait_ms"]["unit"], "ms");
    // A family's key: the pattern's entry with the name filled in.
    EXPECT_EQ(c["metrics"]["grad_norm/kind/o_proj"]["title"], "grad norm: o_proj (all layers)");
    EXPECT_EQ(c["metrics"]["grad_norm/kind/o_proj"]["panel"], "grad_norm/kind");
    EXPECT_EQ(c["metrics"]["grad_norm/layers.3.w1"]["panel"], "key:grad_norm/layers.3.w1");
    EXPECT_EQ(c["metrics"]["grad_norm/layers.3.w1"]["derived"], false);
    EXPECT_EQ(c["rank_metrics"]["rank/io_wait_s"],
              json({{"title", "per rank: rank/io_wait_s"}, {"unit", "s"}, {"group", "rank"},
                    {"panel", "rank:rank/io_wait_s"}, {"shown", true}, {"derived", true}}));
    EXPECT_EQ(c["rank_metrics"]["disk_gb"]["group"], "per rank");
    EXPECT_EQ(c["rank_metrics"]["disk_gb"]["unit"], "GB");
}

TEST_F(Catalogue, EveryKeyOfARunIsOnAChartPerRankKeysIncluded) {
    json k = get_json(api, "/api/v1/runs/run/keys");
    EXPECT_EQ(k["rank_keys"], json({"rank/compute_s", "rank/io_wait_s"}));
    std::vector<std::pair<std::string, json>> panels;
    for (const json& p : k["panels"]) panels.push_back({p["id"], p["keys"]});
    // Shared charts in the table's order, then charts of keys outside it, then per rank.
    std::vector<std::pair<std::string, json>> expected = {
        {"loss", {"loss", "heldout_loss"}},
        {"grad_norm", {"grad_norm"}},
        {"lr", {"lr"}},
        {"step_time", {"data_s", "forward_s", "step_s"}},
        {"key:grad_norm/layers.0.qkv_proj", {"grad_norm/layers.0.qkv_proj"}},
        {"key:attn/entropy_min", {"attn/entropy_min"}},
        {"rank:rank/compute_s", {"rank/compute_s"}},
        {"rank:rank/io_wait_s", {"rank/io_wait_s"}},
    };
    EXPECT_EQ(panels, expected);
    EXPECT_EQ(k["panels"][3]["title"], "step time split (s)");
    EXPECT_EQ(k["panels"][3]["unit"], "s");
    EXPECT_EQ(k["panels"][7]["title"], "per rank: rank/io_wait_s");
    EXPECT_EQ(k["panels"][7]["per_rank"], true);
    EXPECT_EQ(k["metrics"]["attn/entropy_min"]["derived"], true);
    EXPECT_EQ(k["rank_metrics"]["rank/io_wait_s"]["shown"], true) << "a per-rank key nobody catalogued is drawn";
}

// The page's default view of a run trained by hlat, as its hard-coded list
// drew it before the catalogue: the same charts and keys, in order, titled as
// since (the TP titles name collectives and group leaders since sequence
// parallelism and shared kv heads).
TEST(CatalogueLayout, TheDefaultViewIsThePagesOldLayout) {
    const std::vector<std::pair<std::string, std::vector<std::string>>> old_panels = {
        {"loss", {"loss", "heldout_loss"}},
        {"grad norm (before clipping)", {"grad_norm"}},
        {"param norm", {"param_norm"}},
        {"learning rate", {"lr"}},
        {"tokens/s", {"tokens_per_s"}},
        {"MFU", {"mfu"}},
        {"step time split (s)", {"data_s", "forward_s", "backward_s", "optimizer_s"}},
        {"system: process CPU % (100 = one core), GPU utilisation %", {"cpu_pct", "gpu_util_pct"}},
        {"system: resident memory, GPU memory (MB)", {"rss_mb", "gpu_mem_mb"}},
        {"bf16 lost updates: share of weights whose non-zero update rounded away", {"lost_updates"}},
        {"communication (s): DP gradients (total, exposed), TP collectives", {"comm_s", "comm_exposed_s", "tp_comm_s"}},
        {"TP drift of replicated weights: max |w − w(group leader)|", {"tp_drift", "tp_drift_rel"}},
        {"replica consistency: DP ranks whose hash differs (0 = all agree)",
         {"replica_mismatch", "replica_grad_mismatch"}},
    };
    std::vector<std::string> keys;
    for (const auto& [title, ks] : old_panels) keys.insert(keys.end(), ks.begin(), ks.end());
    // What else an hlat run stores: on the picker, never on the default view.
    for (const char* extra : {"clipped", "tokens_seen", "step_s", "compute_s", "straggler_ratio", "straggler_rank",
                              "health_check_failures", "causality_leak", "lost_updates/kind/o_proj",
                              "tp_drift/layers.0.attn_norm", "grad_norm/kind/o_proj", "param_norm/layers.1.w2"})
        keys.push_back(extra);
    std::sort(keys.begin(), keys.end());  // as the store lists them
    std::vector<std::pair<std::string, std::vector<std::string>>> drawn;
    for (const PanelLayout& p : catalogue_layout(keys, {})) {
        std::vector<std::string> shown;
        for (const std::string& k : p.keys)
            if (catalogue_entry(k, false).shown) shown.push_back(k);
        if (!shown.empty()) drawn.push_back({p.title, shown});
    }
    EXPECT_EQ(drawn, old_panels);
    // Per rank: every key the old list knew, titled as it was, in the store's order.
    std::vector<std::string> rank_keys = {"health/allreduce_us", "health/wrong_gemm_elements", "rank/comm_wait_s",
                                          "rank/compute_s", "rank/data_wait_s", "tp_drift"};
    std::vector<PanelLayout> ranks = catalogue_layout({}, rank_keys);
    ASSERT_EQ(ranks.size(), rank_keys.size());
    for (size_t i = 0; i < ranks.size(); i++) EXPECT_EQ(ranks[i].keys, std::vector<std::string>{rank_keys[i]});
    EXPECT_EQ(ranks[3].title, "per rank: compute s (forward, backward, optimizer less communication)");
}

TEST_F(Catalogue, TheKeysFormIsBoundedAndChecked) {
    std::string many;
    for (int i = 0; i <= (int)web::kMaxCatalogueKeys; i++) many += fmt::format("k{},", i);
    EXPECT_EQ(api.handle(get("/api/v1/catalogue", {{"keys", many}})).status, 400);
    EXPECT_EQ(api.handle(get("/api/v1/catalogue", {{"keys", std::string(300, 'x')}})).status, 400);
    EXPECT_EQ(api.handle(get("/api/v1/catalogue", {{"rank_keys", "bad\x01key"}})).status, 400);
    EXPECT_EQ(api.handle({"POST", "/api/v1/catalogue", {}, "secret-token", "", "127.0.0.1"}).status, 405);
}

}  // namespace
}  // namespace hlat
