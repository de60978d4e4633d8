// One colour per run wherever several runs are drawn together: run i of a
// comparison is kRunPalette[i], in the report as on the page's compare view
// (web/static/palette.js holds the same list; tests/telemetry/test_episodes.cpp checks
// they agree). 24 colours picked for the largest smallest CIEDE2000 distance
// between any two, dark enough to read on white.
#pragma once

#include <array>

namespace hlat::report {

inline constexpr std::array<const char*, 24> kRunPalette = {
    "#1f6feb", "#d4770c", "#00cc44", "#224422", "#880033", "#ff77aa", "#00bbcc", "#aa00cc",
    "#664422", "#888800", "#444455", "#ee1122", "#bb99ff", "#008866", "#117788", "#2233aa",
    "#996688", "#33aaff", "#ff22ff", "#dd8877", "#662266", "#337700", "#dd1166", "#991100",
};

}  // namespace hlat::report
