// Config validation: every bad field is an error that names it.
#include "test_util.h"
#include "trainer/config/config.h"

namespace hlat {
namespace {

using json = nlohmann::json;

std::string error_of(const json& j) {
    try {
        config_from_json(j);
    } catch (const ConfigError& e) {
        return e.what();
    }
    return "";
}

TEST(Config, EmptyObjectGivesDefaults) {
    TrainConfig c = config_from_json(json::object());
    EXPECT_EQ(c.model.dim, 256);
    EXPECT_EQ(c.optimizer.beta2, 0.95);
    EXPECT_EQ(c.schedule.max_lr, 3e-4);
    EXPECT_EQ(c.model.init_scaling, InitScaling::PerLayer);
}

TEST(Config, RoundTripsThroughJson) {
    json j = {{"model", {{"dim", 128}, {"n_heads", 8}, {"n_kv_heads", 2}, {"init_scaling", "none"}}},
              {"run", {{"activation_checkpointing", true}, {"seed", 42}}}};
    TrainConfig c = config_from_json(j);
    EXPECT_EQ(c.model.n_kv_heads, 2);
    EXPECT_EQ(c.model.init_scaling, InitScaling::None);
    EXPECT_EQ(config_to_json(config_from_json(config_to_json(c))), config_to_json(c));
}

TEST(Config, ARampNeedsItsPeakAndTheDataSeedIsItsOwn) {
    std::string e = error_of({{"schedule", {{"ramp_start", 100}}}});
    EXPECT_NE(e.find("schedule.peak_lr"), std::string::npos) << e;
    EXPECT_NE(error_of({{"schedule", {{"ramp_steps", 0}}}}).find("schedule.ramp_steps"), std::string::npos);
    EXPECT_NE(error_of({{"run", {{"data_seed", -2}}}}).find("run.data_seed"), std::string::npos);
    TrainConfig c = config_from_json({{"run", {{"seed", 1}, {"data_seed", 7}}},
                                      {"schedule", {{"ramp_start", 10}, {"peak_lr", 0.1}}}});
    EXPECT_EQ(c.run.data_seed, 7);
    EXPECT_EQ(c.schedule.ramp_start, 10);
    EXPECT_EQ(config_to_json(config_from_json(config_to_json(c))), config_to_json(c));
}

TEST(Config, WrongTypeNamesFieldAndValue) {
    std::string e = error_of({{"model", {{"dim", "big"}}}});
    EXPECT_NE(e.find("model.dim"), std::string::npos) << e;
    EXPECT_NE(e.find("\"big\""), std::string::npos) << e;
    EXPECT_NE(e.find("integer"), std::string::npos) << e;
    EXPECT_NE(error_of({{"run", {{"activation_checkpointing", 1}}}}).find("run.activation_checkpointing"),
              std::string::npos);
    EXPECT_NE(error_of({{"model", {{"n_layers", 2.5}}}}).find("model.n_layers"), std::string::npos);
}

TEST(Config, OutOfRangeNamesFieldAndRange) {
    std::string e = error_of({{"optimizer", {{"beta2", 1.5}}}});
    EXPECT_NE(e.find("optimizer.beta2"), std::string::npos) << e;
    EXPECT_NE(e.find("[0, 1]"), std::string::npos) << e;
    EXPECT_NE(error_of({{"model", {{"n_layers", 0}}}}).find("model.n_layers"), std::string::npos);
    EXPECT_NE(error_of({{"optimizer", {{"eps", 0.0}}}}).find("optimizer.eps"), std::string::npos);
    EXPECT_NE(error_of({{"run", {{"data_dtype", "int8"}}}}).find("run.data_dtype"), std::string::npos);
    EXPECT_NE(error_of({{"model", {{"init_scaling", "sqrt"}}}}).find("per_layer"), std::string::npos);
    e = error_of({{"model", {{"z_loss", -1e-4}}}});
    EXPECT_NE(e.find("model.z_loss"), std::string::npos) << e;
    EXPECT_NE(e.find("[0, 100]"), std::string::npos) << e;
    e = error_of({{"model", {{"qk_norm", "yes"}}}});
    EXPECT_NE(e.find("model.qk_norm"), std::string::npos) << e;
    EXPECT_NE(e.find("true or false"), std::string::npos) << e;
}

TEST(Config, QkNormAndZLossAreOffByDefaultAndRoundTrip) {
    TrainConfig c = config_from_json(json::object());
    EXPECT_FALSE(c.model.qk_norm);
    EXPECT_EQ(c.model.z_loss, 0.0);
    c = config_from_json({{"model", {{"qk_norm", true}, {"z_loss", 1e-4}}}});
    EXPECT_TRUE(c.model.qk_norm);
    EXPECT_EQ(c.model.z_loss, 1e-4);
    TrainConfig back = config_from_json(config_to_json(c));
    EXPECT_TRUE(back.model.qk_norm);
    EXPECT_EQ(back.model.z_loss, 1e-4);
}

TEST(Config, UnknownFieldAndSectionAreRejected) {
    std::string e = error_of({{"model", {{"n_layer", 4}}}});
    EXPECT_NE(e.find("unknown config field \"model.n_layer\""), std::string::npos) << e;
    e = error_of({{"trainer", json::object()}});
    EXPECT_NE(e.find("unknown config section \"trainer\""), std::string::npos) << e;
}

TEST(Config, CrossFieldConstraints) {
    EXPECT_NE(error_of({{"model", {{"dim", 100}, {"n_heads", 3}}}}).find("must divide model.dim"),
              std::string::npos);
    EXPECT_NE(error_of({{"model", {{"n_heads", 4}, {"n_kv_heads", 3}}}}).find("n_kv_heads"),
              std::string::npos);
    EXPECT_NE(error_of({{"run", {{"seq_len", 512}}}}).find("max_seq_len"), std::string::npos);
    EXPECT_NE(error_of({{"schedule", {{"min_lr", 1.0}}}}).find("schedule.min_lr"), std::string::npos);
}

// Tensor parallelism takes fewer kv heads than ranks when each kv head goes to
// a whole number of ranks; sequence parallelism needs a group to split over
// and token rows that divide among its ranks.
TEST(Config, TensorAndSequenceParallelLayouts) {
    const json gqa = {{"n_heads", 8}, {"n_kv_heads", 2}};
    EXPECT_EQ(config_from_json({{"model", gqa}, {"parallel", {{"tp", 4}}}}).parallel.tp, 4);
    std::string e = error_of({{"model", {{"dim", 384}, {"n_heads", 12}, {"n_kv_heads", 4}}}, {"parallel", {{"tp", 6}}}});
    EXPECT_NE(e.find("parallel.tp = 6 must divide model.n_kv_heads = 4 or be a multiple of it"), std::string::npos)
        << e;
    EXPECT_TRUE(config_from_json({{"parallel", {{"tp", 2}, {"sp", true}}}}).parallel.sp);
    e = error_of({{"parallel", {{"sp", true}}}});
    EXPECT_NE(e.find("parallel.sp splits the stream across the tensor-parallel ranks: it needs parallel.tp >= 2"),
              std::string::npos)
        << e;
    e = error_of({{"model", gqa}, {"run", {{"batch_size", 1}, {"seq_len", 6}}}, {"parallel", {{"tp", 4}, {"sp", true}}}});
    EXPECT_NE(e.find("parallel.sp needs run.batch_size x run.seq_len (1 x 6) divisible by parallel.tp = 4"),
              std::string::npos)
        << e;
}

}  // namespace
}  // namespace hlat
