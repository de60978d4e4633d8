// The JSON API of `hlat serve` (version 1, under /api/v1), as plain functions
// from a request to a response so it can be tested without sockets. Its
// routes are web/routes.h's table; docs/api.md says what each answers.
// State changes need the server's token in the X-HLAT-Token header (or
// Authorization: Bearer TOKEN). Every parameter is validated; errors are JSON
// {"error": "..."} with 400, 401, 404, 405, 409, 500, or 503 while the store
// cannot be written for now (locked by another process, disk full:
// telemetry/writer.h).
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
struct Route;

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
    Response handle_run(const Request& r, const Route& route, const std::string& run);
    Response halt(const Request& r, const telemetry::RunRecord& run);
    Response report(const Request& r);
    Response health();
    Response annotate(const telemetry::RunRecord& run, const std::string& body);
    std::string store_, token_;
    std::unique_ptr<IngestEndpoints> ingest_;
};

// A random 32-hex-digit token from /dev/urandom.
std::string new_token();

}  // namespace hlat::web
