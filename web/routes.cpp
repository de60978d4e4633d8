#include "web/routes.h"

namespace hlat::web {

const std::vector<Route>& routes() {
    static const std::vector<Route> table = {
        {RouteId::Runs, "GET", "/api/v1/runs", false},
        {RouteId::Catalogue, "GET", "/api/v1/catalogue", false},
        {RouteId::Report, "GET", "/api/v1/report", false},
        {RouteId::Health, "GET", "/api/v1/health", false},
        {RouteId::Keys, "GET", "/api/v1/runs/{run}/keys", false},
        {RouteId::RankKeys, "GET", "/api/v1/runs/{run}/rank_keys", false},
        {RouteId::Series, "GET", "/api/v1/runs/{run}/series", false},
        {RouteId::RankSeries, "GET", "/api/v1/runs/{run}/rank_series", false},
        {RouteId::Heatmap, "GET", "/api/v1/runs/{run}/heatmap", false},
        {RouteId::Episodes, "GET", "/api/v1/runs/{run}/episodes", false},
        {RouteId::Csv, "GET", "/api/v1/runs/{run}/csv", false},
        {RouteId::Alerts, "GET", "/api/v1/runs/{run}/alerts", false},
        {RouteId::Events, "GET", "/api/v1/runs/{run}/events", false},
        {RouteId::Checkpoints, "GET", "/api/v1/runs/{run}/checkpoints", false},
        {RouteId::Evals, "GET", "/api/v1/runs/{run}/evals", false},
        {RouteId::Stream, "GET", "/api/v1/runs/{run}/stream", false},
        {RouteId::State, "GET", "/api/v1/runs/{run}/state", false},
        {RouteId::Annotate, "POST", "/api/v1/runs/{run}/annotate", true},
        {RouteId::Halt, "POST", "/api/v1/runs/{run}/halt", true},
        {RouteId::Start, "POST", "/api/v1/runs/{run}/start", true},
        {RouteId::Ingest, "POST", "/api/v1/runs/{run}/ingest", true},
        {RouteId::Finish, "POST", "/api/v1/runs/{run}/finish", true},
    };
    return table;
}

namespace {

constexpr const char* kRunPrefix = "/api/v1/runs/{run}/";

// A run's route: "/api/v1/runs/" + a non-empty name + "/" + the route's last
// part; the name is everything between (a name may hold '/').
bool matches_run_route(const std::string& pattern, const std::string& path, std::string& run) {
    const std::string prefix = "/api/v1/runs/", tail = pattern.substr(std::string(kRunPrefix).size() - 1);
    if (path.size() <= prefix.size() + tail.size() || path.rfind(prefix, 0) != 0 ||
        path.compare(path.size() - tail.size(), tail.size(), tail) != 0)
        return false;
    run = path.substr(prefix.size(), path.size() - prefix.size() - tail.size());
    return true;
}

}  // namespace

RouteMatch match_route(const std::string& method, const std::string& path) {
    RouteMatch out;
    for (const Route& r : routes()) {
        const std::string pattern = r.pattern;
        std::string run;
        const bool of_run = pattern.rfind(kRunPrefix, 0) == 0;
        if (of_run ? !matches_run_route(pattern, path, run) : path != pattern) continue;
        if (method != r.method) {
            out = {&r, true, run};  // the path's route, unless another takes this method
            continue;
        }
        return {&r, false, run};
    }
    return out;
}

}  // namespace hlat::web
