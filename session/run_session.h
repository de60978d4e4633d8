// A run's session: the one road for a run's numbers. Every source (the
// embedded trainer, `hlat ingest` of a file or a followed log, the HTTP
// endpoint behind the Python client) opens or attaches to its run here and
// hands over each step as named points plus events. The session renames
// other trainers' names to hlat's keys (telemetry/key_aliases.h), stores the points, runs
// the detectors on those same points, routes each alert once (the log, the
// store, which the page's live stream reads, the webhook, the caller's own
// sink, and a halt), answers the run's halt state, and ends the run with a
// true status. `hlat detect` replays a stored run through the same detectors
// (step_views.h), so online, ingest, HTTP and replay raise the same alerts.
//
// A step may arrive cut across batches (a followed log read mid-step, a
// client flushing by size, a server restarted mid-step): the last step of a
// batch is held open with the detectors' state before it, and when the next
// batch brings more of it the detectors go back and see the merged step once
// (an alert its first part raised is not raised again).
//
// A step that comes again once later steps have come (a follower that reads
// its log from the start after a kill -9, a client that re-sends a batch the
// server had handled, to this server or to one restarted since) is stored
// again, not detected again, so no alert is stored twice and no halt fires
// twice: a session that caught up from the store has seen every stored step.
//
// A step that comes late, after later steps but never seen before (two
// writers of one run, a spool synced after the run went on), is judged in its
// place: the detectors go back to their state before it (kept every
// kSnapshotEvery steps judged, for the last kSnapshots of those) and judge the
// stored steps from there on in step order, raising what they had not raised
// before, so the alerts are those of in-order arrival. A step later than that
// window (more than about 1,000 judged steps behind the newest) is stored and
// not judged, said once in the log; `hlat detect` judges the stored run whole.
//
// Not thread-safe: one caller at a time (the HTTP endpoint holds a lock).
#pragma once

#include "detectors/detector.h"
#include "session/flight_recorder.h"
#include "session/step_set.h"
#include "session/webhook.h"
#include "telemetry/reader.h"
#include "telemetry/writer.h"

#include <nlohmann/json.hpp>

#include <functional>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace hlat::session {

using detectors::Fired;

// The event that opens a run's segment of training, from which uptime is
// computed: "start", or "restart" for a run that comes back.
struct Opening {
    bool resume = false;     // continue the stored run of that name (else it is replaced)
    std::string kind;        // "start" or "restart"; "" restarts a run the store had, else starts
    int64_t step = 0;
    double wall_time = 0.0;  // 0: now
    std::string detail;
};

struct SessionOptions {
    // Replay the run's stored steps through the detectors before the first
    // new one, raising nothing, so their windows are as full as if they had
    // never stopped (a feeder that comes back, a restarted server). The
    // trainer restores them from its checkpoint instead.
    bool catch_up = true;
    // Every batch holds whole steps (the trainer): no step is held open.
    bool whole_steps = false;
    // A heartbeat event this often while steps arrive; 0 never. The trainer's
    // process may die without a word: heartbeats bound the time counted as up.
    double heartbeat_seconds = 0.0;
    // Whether anything can halt this run. A log imported once cannot be: its
    // halt-policy alerts are stored and routed as warnings, and no halt
    // request is left pending on a finished run.
    bool halts = true;
    // Whether alerts go to the webhook. Off for a run judged after the fact
    // (`hlat detect --save`): its team heard of it while it ran, or chose not to.
    bool notify = true;
    // The detectors' settings to judge with instead of the run's config's
    // (`hlat detect --config`).
    std::optional<detectors::DetectorsConfig> detectors;
    // Besides the log, the store and the webhook (the trainer's metrics JSONL).
    std::function<void(const telemetry::Alert&)> on_alert;
};

// One step's points as a source measures them (the trainer's hooks add to it).
struct StepPoints {
    std::vector<std::pair<std::string, double>> values;
    std::vector<telemetry::VectorPoint> vectors;  // step and wall_time are stamped by the session
    std::vector<std::pair<std::string, std::string>> events;  // kind, detail
    void add(std::string key, double value) { values.emplace_back(std::move(key), value); }
    void add(std::string key, std::vector<float> values_,
             std::shared_ptr<const std::vector<std::string>> labels = nullptr) {
        vectors.push_back({std::move(key), 0, std::move(values_), 0.0, std::move(labels)});
    }
    void note(std::string kind, std::string detail) { events.emplace_back(std::move(kind), std::move(detail)); }
};

class RunSession {
  public:
    // Creates the run (or, with opening.resume, continues the stored one) and
    // writes its opening event. `writer` may be null: a run with no store
    // (detection, the log and the webhook only).
    static std::unique_ptr<RunSession> open(telemetry::Writer* writer, const telemetry::RunRecord& run,
                                            const Opening& opening, SessionOptions options = {});
    // A run the store has (stored.id set), fed again: catches up from `reader`.
    static std::unique_ptr<RunSession> attach(telemetry::Writer& writer, telemetry::Reader& reader,
                                              const telemetry::RunRecord& stored, SessionOptions options = {});
    ~RunSession();
    RunSession(const RunSession&) = delete;

    // A batch of points (any steps, in order), events and statistics over
    // layers, heads or tensors: stored, detected, alerts routed. Returns the
    // alerts raised. Flushes nothing. A vector without labels takes the
    // key's labels from earlier in the run; one whose length does not match
    // them is dropped with a warning naming the key. A vector whose key
    // begins "rank/" is a value per rank (element r: rank r's, NaN: none):
    // stored as rank points, and "rank/compute_s" also summarised for the
    // straggler detector (straggler_ratio, _rank, _compute_s at its step),
    // as the embedded trainer does: an external job's client sends its
    // ranks' numbers so (docs/external-trainers.md).
    std::vector<Fired> ingest(std::vector<telemetry::MetricPoint> points, std::vector<telemetry::Event> events = {},
                              std::vector<telemetry::VectorPoint> vectors = {});
    // One whole step, stamped now.
    std::vector<Fired> step(int64_t step, const StepPoints& points);
    // One value per rank of a key (stored; no detector reads them).
    void rank_values(int64_t step, const std::string& key, const std::vector<double>& per_rank);
    // An alert raised outside the detectors (a halt asked for from the page):
    // routed like the detectors' alerts; a halting one halts with `reason`
    // and files no request (it answers one). Returns the alert as routed
    // (its data with the window and attribution added).
    telemetry::Alert raise(telemetry::Alert alert, detectors::Policy policy, const std::string& reason);
    // Alerts judged after the fact from the stored run (`hlat detect --save`),
    // each routed as it would have been online: dated by its step's time,
    // with its flight-recorder window and attribution read from the
    // statistics the store kept around its step. Returns them as routed.
    std::vector<telemetry::Alert> route_judged(telemetry::Reader& reader, std::vector<Fired> fired);

    // Called with every alert before it is routed, to add what the source
    // alone knows to its data (the trainer: the batch's sequences and
    // documents, docs/provenance.md). The session adds "moved_first" itself.
    void set_annotator(std::function<void(telemetry::Alert&)> annotate) { annotate_ = std::move(annotate); }
    // A step's batch provenance, stored (and an external trainer's batch ids).
    void batch(telemetry::BatchRecord batch, std::vector<telemetry::DocumentRecord> documents = {});

    // Who asked (from the page or the API) for this run to halt since the
    // last call; the request is then marked handled. nullopt while halting.
    std::optional<std::string> poll_halt_request();
    bool halting() const { return !halt_reason_.empty(); }
    // The first halt-policy alert as a sentence ("detector grad_spike at step
    // 40: ..."); "" while none.
    const std::string& halt_reason() const { return halt_reason_; }
    // When the halt is rewind_skip's: the plan the "rewind" event stored
    // (docs/provenance.md): {"alert_step", "kind", "restart_at_or_before",
    // "skip_steps", "skip_batches" (the embedded trainer's stream indices),
    // "skip_batch_ids" (an external trainer's ids)}; null otherwise.
    const nlohmann::json& rewind_plan() const { return rewind_plan_; }
    // Records that the run halts now (its "halt" event; the end status follows in finish).
    void halt(int64_t step, const std::string& reason);

    // An event of the run, dated `wall_time` (0 = now).
    void event(const std::string& kind, int64_t step, const std::string& detail, double wall_time = 0.0);
    void checkpoint(int64_t step, const std::string& path);
    void eval(telemetry::EvalRecord record);
    // Ends the run: finished, stopped, halted, crashed or stale, with its
    // event (dated `wall_time`, 0 = now), and marks any halt request handled.
    void finish(const std::string& status, int64_t step, const std::string& detail, double wall_time = 0.0);
    // A crash seen from outside the job (`hlat run`'s supervisor): its event
    // and status. A halt request pending stays pending: the relaunched job
    // answers it, so a halt pressed just before a crash still halts.
    void crashed(int64_t step, const std::string& detail, double wall_time);
    // Waits until everything so far is committed.
    void flush();

    // The detectors' windows, for checkpoints; restore() takes what it gave.
    nlohmann::json detector_state() const { return suite_.state(); }
    void restore_detectors(const nlohmann::json& state) { suite_.restore(state); }
    // When no point has fed a detector once the run had two steps, the
    // sentence that said so (logged and stored once); "" otherwise.
    const std::string& unwatched_notice() const { return unwatched_notice_; }
    int64_t run_id() const { return run_.id; }
    // The stored steps through the detectors, raising nothing, so their
    // windows are as full as if the feeder had never stopped (what
    // SessionOptions::catch_up does at open and attach).
    void catch_up();

    // Detector states kept for steps that arrive late (see above).
    static constexpr int64_t kSnapshotEvery = 128;
    static constexpr size_t kSnapshots = 9;

  private:
    RunSession(telemetry::Writer* writer, telemetry::RunRecord run, SessionOptions options,
               const detectors::DetectorsConfig& config);
    void catch_up(telemetry::Reader& reader);
    void rename_aliases(std::vector<telemetry::MetricPoint>& points);
    std::vector<Fired> detect(std::vector<detectors::StepView> steps);
    // The earliest of `steps` that came late and can be judged in its place, if any.
    std::optional<int64_t> late_step(const std::vector<detectors::StepView>& steps) const;
    std::vector<Fired> rejudge(int64_t late_step);
    // Stored steps from `first` on through the detectors, the last held open;
    // alerts whose raised_key() is in *raised are not raised again, and with
    // `fired` null none is raised.
    void judge_stored(telemetry::Reader& reader, int64_t first, std::set<std::string>& raised,
                      std::vector<Fired>* fired);
    // Before a step goes through the detectors for the first time: counts it
    // judged, and keeps the detectors' state every kSnapshotEvery steps.
    void before_judging(int64_t step);
    void drop_unjudgeable(std::vector<detectors::StepView>& steps);
    void store(std::vector<telemetry::MetricPoint> points, std::vector<telemetry::Event> events,
               std::vector<telemetry::VectorPoint> vectors);
    void note_times(const std::vector<telemetry::MetricPoint>& points, const std::vector<telemetry::Event>& events);
    double source_time(int64_t step) const;
    void route(Fired& fired, const std::string& halt_reason = "");
    void plan_rewind(const telemetry::Alert& a);
    void note_keys(const std::vector<telemetry::MetricPoint>& points);
    void resolve_labels(std::vector<telemetry::VectorPoint>& vectors);
    void take_rank_vectors(std::vector<telemetry::MetricPoint>& points, std::vector<telemetry::VectorPoint>& vectors);
    // Stores the flight recorder's window with an alert and names it in its
    // data, with the tensor that moved first (data.attribution.moved_first).
    void attach_window(telemetry::Alert& a);
    void recall_window(telemetry::Reader& reader, int64_t step);
    void recall_time(telemetry::Reader& reader, int64_t step);
    void store_event(telemetry::Event e);
    static std::string raised_key(const telemetry::Alert& a);

    // The last step seen, which the next batch may carry more of: the
    // detectors' state before it and the alerts it raised (not raised again).
    struct OpenStep {
        detectors::StepView view;
        nlohmann::json before;
        std::set<std::string> raised;  // raised_key()s: a note may be dated a step back
    };

    telemetry::Writer* writer_;
    telemetry::RunRecord run_;
    SessionOptions options_;
    detectors::DetectorSuite suite_;
    std::unique_ptr<Webhook> webhook_;
    int flight_recorder_steps_;
    FlightRecorder flight_recorder_;
    // Each vector key's element names, as first sent (or as stored, for a run caught up).
    std::map<std::string, std::shared_ptr<const std::vector<std::string>>> labels_;
    std::set<std::string> refused_keys_;  // warned once each
    std::optional<OpenStep> open_;
    std::unique_ptr<telemetry::Reader> halt_reader_;  // polls for halt requests
    std::string halt_reason_;
    bool halt_event_written_ = false;
    bool watched_ = false;
    std::set<std::string> seen_keys_;  // for the unwatched notice, bounded
    std::set<std::string> aliases_used_;
    std::map<int64_t, double> source_times_;  // step -> its time by the source's clock, for the batch being ingested
    int64_t steps_seen_ = 0, last_step_ = -1;
    // The newest step through the detectors. Below it, a step judged before
    // (a client's batch re-sent after a timeout, a follower re-reading its
    // log) is stored again but not judged again; one never judged came late.
    int64_t newest_judged_ = -1;
    StepSet judged_;  // steps judged, from the oldest snapshot's on
    struct Snapshot {
        int64_t step;                     // the detectors' state before this step...
        std::vector<std::uint8_t> state;  // ...as MessagePack (a third of its JSON text)
    };
    std::deque<Snapshot> snapshots_;
    int64_t judged_since_snapshot_ = 0;
    bool said_too_late_ = false;
    std::string unwatched_notice_;
    double last_heartbeat_ = 0.0;
    std::function<void(telemetry::Alert&)> annotate_;
    detectors::RewindConfig rewind_config_;
    nlohmann::json rewind_plan_;
    std::deque<telemetry::BatchRecord> recent_batches_;  // what rewind_skip skips
};

// The run's detector settings: its config's "detectors" section, or the
// defaults. Throws DetectorConfigError for a bad section.
detectors::DetectorsConfig detectors_of(const telemetry::RunRecord& run);

// "finished" -> "stop", "crashed" -> "crash", "halted" -> "halt", "stale" -> "stale", ...
const char* end_event_kind(const std::string& status);

// A run's end written without a session (one that is not being fed): its end
// event (dated `wall_time`, 0 = now), status, and any halt request handled.
void write_end(telemetry::Writer& writer, int64_t run, const std::string& status, int64_t step,
               const std::string& detail, double wall_time = 0.0);

}  // namespace hlat::session
