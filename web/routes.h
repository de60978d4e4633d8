// Every route of `hlat serve`'s API in one table: its method, its path
// pattern ({run}: a run's name, which may hold '/'), and whether it changes
// state (and so needs the server's token). docs/api.md's table lists the same
// routes (tests/web/test_routes.cpp holds it to this one); Api::handle dispatches
// on it, and the connection asks it which requests are event streams.
#pragma once

#include <string>
#include <vector>

namespace hlat::web {

enum class RouteId {
    Runs, Catalogue, Report, Health,                                   // the store's
    Keys, RankKeys, Series, RankSeries, Heatmap, Episodes, Csv,        // a run's metrics
    Alerts, Events, Checkpoints, Evals, Stream,                        // a run's history, live
    Annotate, Halt, Start, Ingest, Finish, State,                      // a run's state
};

struct Route {
    RouteId id;
    const char* method;   // "GET" or "POST"
    const char* pattern;  // "/api/v1/runs/{run}/series"
    bool token;           // changes state: the token is required
};

const std::vector<Route>& routes();

struct RouteMatch {
    const Route* route = nullptr;  // null: no route has this path
    bool wrong_method = false;     // the path is the route's, the method is not
    std::string run;               // {run}, as the path gives it
};

// The route a method and path (without the query) take.
RouteMatch match_route(const std::string& method, const std::string& path);

}  // namespace hlat::web
