// GET /api/v1/runs/{run}/stream?keys=K1,K2[&after=STEP]: Server-Sent Events
// of one run until the client leaves or the server stops. Event "points"
// {"key", "points": [[step, value, time], ...]} for every new point of each
// key, "alert" for each new alert, "status" when the run's status changes.
//
// A stream holds no thread: a timer on the event loop asks the stream pool
// to read what is new every 100 ms (a commit reaches the page within ~0.2 s),
// and the loop writes it. A client that stops reading for
// limits::kIdleTimeout is closed; one that leaves is noticed at once.
#pragma once

#include "web/api.h"

#include <boost/asio/ip/tcp.hpp>

#include <memory>
#include <string>
#include <variant>

namespace hlat::web {

struct ServerCore;
struct StreamState;

// Checks a stream request and opens the run's reader: the error reply, or
// what the stream needs (on a pool: it reads the store).
std::variant<Response, std::shared_ptr<StreamState>> open_stream(const std::string& store, const Request& r,
                                                                 const std::string& run);

// Sends the stream's header, then new events until the end; releases its
// place in core.open_streams when it ends.
void run_event_stream(boost::asio::ip::tcp::socket socket, ServerCore& core, std::shared_ptr<StreamState> state);

}  // namespace hlat::web
