// The JSON API of `hlat serve`, as plain functions from a request to a
// response so it can be tested without sockets. Version 1, under /api/v1:
//   GET  /api/v1/runs                              runs with status, steps, last loss, tokens, uptime, alerts
//   GET  /api/v1/runs/{run}/keys                   metric keys and rank keys, with each one's catalogue
//                                                  entry and the charts they make (catalogue_api.h)
//   GET  /api/v1/catalogue[?keys=K1,K2]            the metric catalogue (catalogue_api.h)
//   GET  /api/v1/runs/{run}/series?key=K[&from=A&to=B][&points=N]
//        full points, or at most N envelope buckets (min, max, mean, last, times) over [A, B]
//   GET  /api/v1/runs/{run}/heatmap?key=K[&buckets=N][&from&to][&reduce=R]  a statistic over layers, heads
//        or tensors as element x step cells (heatmap_api.h); the keys reply lists them under "vectors"
//   GET  /api/v1/runs/{run}/episodes?key=K[&from&to]  spike episodes at full resolution
//   GET  /api/v1/runs/{run}/csv?keys=K1,K2[&from&to]  every stored point, as CSV
//   POST /api/v1/runs/{run}/annotate               token; {"tags": [...], "note": "..."}
//   GET  /api/v1/runs/{run}/alerts | events | checkpoints | evals
//   POST /api/v1/runs/{run}/halt                   token; asks the trainer to halt (the reply says how it
//                                                  reaches this kind of run; 409 when nothing would)
//   POST /api/v1/runs/{run}/start | ingest | finish, GET .../state: runs fed from outside (ingest_api.h)
//   GET  /api/v1/report?runs=A,B                   the post-mortem of `hlat compare`, as HTML
//   GET  /api/v1/health                            {"store": "ok"} (200), or "failing" with the error, since
//                                                  when, the rows kept and whether it is retried (503)
// State changes need the server's token in the X-HLAT-Token header (or
// Authorization: Bearer TOKEN). Every parameter is validated; errors are JSON
// {"error": "..."} with 400, 401, 404, 500, or 503 while the store cannot be
// written for now (locked by another process, disk full: telemetry/writer.h).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

namespace hlat::telemetry {
class Writer;
struct RunRecord;
}

namespace hlat::web {

class IngestEndpoints;

struct Request {
    std::string method;                        // GET, POST
    std::string path;                          // decoded, without the query
    std::map<std::string, std::string> query;  // decoded
    std::string token;                         // from X-HLAT-Token or Authorization: Bearer
    std::string body;
    std::string remote;                        // client address, for "who asked"
};

struct Response {
    int status = 200;
    std::string content_type = "application/json";
    std::string body;
    // A reply too long to hold (CSV of every point): the rest of the body after
    // `body`, a piece per call until nullopt. The server sends it chunked, a
    // piece read only once the one before has gone out, on its read pool.
    std::function<std::optional<std::string>()> more = nullptr;
};

// The whole body of a reply, its pieces included (for callers in-process).
std::string whole_body(Response& r);

class Api {
  public:
    // Reads open their own connection per request; state changes go through
    // one Writer owned here.
    Api(std::string store, std::string token);
    ~Api();
    // Total: every failure is a JSON error reply, never an exception.
    Response handle(const Request& r);
    // Whether a state-changing request carries the token (checked by the
    // server before it reads a body).
    bool authorized(const std::string& token) const { return !token_.empty() && token == token_; }
    // Marks external runs silent for `after_seconds` stale (see ingest_api.h).
    int mark_stale(double after_seconds);

  private:
    Response handle_run(const Request& r, const std::string& run, const std::string& what);
    Response report(const Request& r);
    Response health(const Request& r);
    Response annotate(const telemetry::RunRecord& run, const std::string& body);
    std::string store_, token_;
    std::unique_ptr<IngestEndpoints> ingest_;
};

// A random 32-hex-digit token from /dev/urandom.
std::string new_token();

}  // namespace hlat::web
