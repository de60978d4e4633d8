#include "test_util.h"
#include "trainer/model/optimizer.h"

namespace hlat {
namespace {

TEST(Schedule, WarmupThenCosineToMin) {
    ScheduleConfig s{1.0, 0.1, 10, 110};
    EXPECT_DOUBLE_EQ(learning_rate(s, 0), 0.1);
    EXPECT_DOUBLE_EQ(learning_rate(s, 9), 1.0);
    EXPECT_DOUBLE_EQ(learning_rate(s, 10), 1.0);
    EXPECT_NEAR(learning_rate(s, 60), 0.55, 1e-12);  // half way: the mean of max and min
    EXPECT_DOUBLE_EQ(learning_rate(s, 110), 0.1);
    EXPECT_DOUBLE_EQ(learning_rate(s, 5000), 0.1);
    for (int i = 11; i < 110; i++) EXPECT_LE(learning_rate(s, i), learning_rate(s, i - 1));
}

// bench/early_warning's schedule: a safe rate, then geometrically to a peak.
TEST(Schedule, TrainSafelyThenRampGeometricallyToThePeak) {
    ScheduleConfig s{0.01, 0.001, 10, 1000, /*ramp_start=*/100, /*ramp_steps=*/50, /*peak_lr=*/1.0};
    EXPECT_DOUBLE_EQ(learning_rate(s, 0), 0.001);  // the warm-up as before
    EXPECT_DOUBLE_EQ(learning_rate(s, 50), 0.01);  // then the safe rate, no cosine
    EXPECT_DOUBLE_EQ(learning_rate(s, 99), 0.01);
    EXPECT_NEAR(learning_rate(s, 125), 0.1, 1e-12);  // half way in log space
    EXPECT_DOUBLE_EQ(learning_rate(s, 150), 1.0);
    EXPECT_DOUBLE_EQ(learning_rate(s, 5000), 1.0);  // the peak is held
    for (int i = 101; i <= 150; i++)  // a few percent a step: no step the update-ratio detector calls a jump
        EXPECT_NEAR(learning_rate(s, i) / learning_rate(s, i - 1), std::pow(100.0, 1.0 / 50), 1e-9);
}

// ... and with a hold, back down on a cosine: the run ends at a rate where its loss can be compared.
TEST(Schedule, AHeldPeakComesDownOnACosineToTheMinimumAtTheEnd) {
    ScheduleConfig s{0.01, 0.001, 10, 400, /*ramp_start=*/100, /*ramp_steps=*/50, /*peak_lr=*/1.0, /*ramp_hold=*/50};
    EXPECT_DOUBLE_EQ(learning_rate(s, 150), 1.0);
    EXPECT_DOUBLE_EQ(learning_rate(s, 200), 1.0);  // the last step held... and the first of the decay
    EXPECT_NEAR(learning_rate(s, 300), 0.001 + 0.5 * (1.0 - 0.001), 1e-12);  // half way down
    for (int i = 201; i < 400; i++) EXPECT_LT(learning_rate(s, i), learning_rate(s, i - 1));
    EXPECT_DOUBLE_EQ(learning_rate(s, 400), 0.001);
    EXPECT_DOUBLE_EQ(learning_rate(s, 5000), 0.001);
}

// What the attention_logit detector projects to: the largest rate from each
// step on, against a scan of every step ahead, for each kind of schedule.
TEST(Schedule, ThePeakRateAheadIsTheLargestRateTheScheduleStillGives) {
    const ScheduleConfig schedules[] = {
        {1.0, 0.1, 10, 110},
        {0.01, 0.001, 10, 400, /*ramp_start=*/100, /*ramp_steps=*/50, /*peak_lr=*/1.0},
        {0.01, 0.001, 10, 400, /*ramp_start=*/100, /*ramp_steps=*/50, /*peak_lr=*/1.0, /*ramp_hold=*/50},
        {0.01, 0.001, 10, 400, /*ramp_start=*/100, /*ramp_steps=*/50, /*peak_lr=*/1.0, /*ramp_hold=*/0},
        {0.01, 0.001, 10, 400, /*ramp_start=*/100, /*ramp_steps=*/50, /*peak_lr=*/0.001, /*ramp_hold=*/20},
    };
    for (const ScheduleConfig& s : schedules) {
        for (int step = 0; step < 450; step++) {
            double scanned = 0.0;
            for (int at = step; at < 500; at++) scanned = std::max(scanned, learning_rate(s, at));
            ASSERT_DOUBLE_EQ(peak_learning_rate_ahead(s, step), scanned) << "step " << step << " peak " << s.peak_lr;
        }
    }
    const ScheduleConfig ramp = schedules[2];
    EXPECT_DOUBLE_EQ(peak_learning_rate_ahead(ramp, 120), 1.0);    // climbing: the peak ahead
    EXPECT_DOUBLE_EQ(peak_learning_rate_ahead(ramp, 300), learning_rate(ramp, 300));  // coming down: now
}

// PyTorch's clip_grad_norm_ rule: max_norm / (norm + 1e-6), only below 1.
TEST(Clipping, ScalesOnlyAboveTheLimit) {
    EXPECT_EQ(clip_factor(5.0, 10.0), 1.0);
    EXPECT_EQ(clip_factor(5.0, 5.0), 5.0 / (5.0 + 1e-6));  // just at the limit: torch scales by a hair
    EXPECT_DOUBLE_EQ(clip_factor(5.0, 1.0), 1.0 / (5.0 + 1e-6));
    EXPECT_EQ(clip_factor(5.0, 0.0), 1.0) << "max_norm 0 disables clipping";
}

TEST(Clipping, NonFiniteNormIsReportedNotSpread) {
    EXPECT_EQ(clip_factor(NAN, 1.0), 1.0);
    EXPECT_EQ(clip_factor(INFINITY, 1.0), 1.0);
}

}  // namespace
}  // namespace hlat
