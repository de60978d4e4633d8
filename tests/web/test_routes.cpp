// The API's one route table (web/routes.h): the routes docs/api.md lists are
// the table's, and a request's method and path find the route a user means.
#include "web/routes.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <string>
#include <utility>

namespace hlat::web {
namespace {

using MethodPath = std::pair<std::string, std::string>;

// The first `METHOD /path` of each "| `...` |" row of docs/api.md, its query
// ("?..." or "[?...]") cut off.
std::set<MethodPath> documented_routes() {
    std::ifstream in(std::string(HLAT_SOURCE_DIR) + "/docs/api.md");
    std::set<MethodPath> out;
    for (std::string line; std::getline(in, line);) {
        if (line.rfind("| `GET /api/", 0) != 0 && line.rfind("| `POST /api/", 0) != 0) continue;
        const std::string cell = line.substr(3, line.find('`', 3) - 3);
        const size_t space = cell.find(' ');
        const std::string path = cell.substr(space + 1, cell.find_first_of("?[", space) - space - 1);
        out.insert({cell.substr(0, space), path});
    }
    return out;
}

TEST(Routes, DocsListTheTablesRoutes) {
    std::set<MethodPath> table;
    for (const Route& r : routes()) table.insert({r.method, r.pattern});
    EXPECT_EQ(table.size(), routes().size()) << "a route listed twice";
    EXPECT_EQ(documented_routes(), table);
}

TEST(Routes, EveryStateChangeIsAPostThatNeedsTheToken) {
    for (const Route& r : routes()) EXPECT_EQ(r.token, std::string(r.method) == "POST") << r.pattern;
}

TEST(Routes, AMethodAndPathFindTheirRoute) {
    RouteMatch m = match_route("GET", "/api/v1/runs/lr=1e-3/seed/2/series");
    ASSERT_NE(m.route, nullptr);
    EXPECT_EQ(m.route->id, RouteId::Series);
    EXPECT_EQ(m.run, "lr=1e-3/seed/2") << "a run's name may hold '/'";
    EXPECT_FALSE(m.wrong_method);

    m = match_route("GET", "/api/v1/runs/a/halt");
    ASSERT_NE(m.route, nullptr);
    EXPECT_TRUE(m.wrong_method);
    EXPECT_STREQ(m.route->method, "POST");

    m = match_route("POST", "/api/v1/runs");
    ASSERT_NE(m.route, nullptr);
    EXPECT_TRUE(m.wrong_method);
    EXPECT_EQ(match_route("GET", "/api/v1/runs").route->id, RouteId::Runs);
    EXPECT_EQ(match_route("GET", "/api/v1/runs/x/stream").route->id, RouteId::Stream);
    EXPECT_EQ(match_route("GET", "/api/v1/runs//series").route, nullptr) << "a run needs a name";
    EXPECT_EQ(match_route("GET", "/api/v1/runs/x/nothing").route, nullptr);
    EXPECT_EQ(match_route("GET", "/api/v2/runs").route, nullptr);
}

}  // namespace
}  // namespace hlat::web
