// The writer thread's connection (internal to telemetry/): its prepared
// statements and each record's SQL, apart from the queue machinery that
// batches records into its transactions (writer.cpp).
#pragma once

#include "telemetry/schema.h"
#include "telemetry/sqlite.h"
#include "telemetry/untrusted_text.h"
#include "telemetry/writer.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace hlat::telemetry {

// Block size of metric_blocks; see schema.cpp.
constexpr int64_t kBlockSteps = 64;

// A run opened again without resume: the caller's mistake, answered to that
// caller alone (the batch around it commits).
struct RunExists : StoreError {
    using StoreError::StoreError;
};

// The writer thread's connection and prepared statements.
class Writer::Connection {
  public:
    Connection(const std::string& path, int busy_timeout_ms)
        : db(path, Database::Mode::Create, busy_timeout_ms),
          ready((prepare_schema(db, true), true)),
          insert_metric(db.prepare("INSERT OR REPLACE INTO metrics(run_id, key_id, step, value, wall_time) "
                                   "VALUES (?1, ?2, ?3, ?4, ?5)")),
          insert_rank(db.prepare("INSERT OR REPLACE INTO rank_metrics(run_id, key_id, step, rank, value, wall_time) "
                                 "VALUES (?1, ?2, ?3, ?4, ?5, ?6)")),
          refresh_block(db.prepare(
              "INSERT OR REPLACE INTO metric_blocks(run_id, key_id, block, min_value, max_value, last_step, "
              "last_value, has_nan, sum_value, n_values, first_time, last_time) "
              "SELECT ?1, ?2, ?3, min(value), max(value), max(step), "
              "(SELECT value FROM metrics WHERE run_id = ?1 AND key_id = ?2 AND step BETWEEN ?4 AND ?5 "
              "ORDER BY step DESC LIMIT 1), sum(value IS NULL) > 0, sum(value), count(value), "
              "(SELECT wall_time FROM metrics WHERE run_id = ?1 AND key_id = ?2 AND step BETWEEN ?4 AND ?5 "
              "ORDER BY step ASC LIMIT 1), "
              "(SELECT wall_time FROM metrics WHERE run_id = ?1 AND key_id = ?2 AND step BETWEEN ?4 AND ?5 "
              "ORDER BY step DESC LIMIT 1) "
              "FROM metrics WHERE run_id = ?1 AND key_id = ?2 AND step BETWEEN ?4 AND ?5")),
          insert_event(db.prepare("INSERT INTO events(run_id, kind, step, wall_time, detail) VALUES (?1, ?2, ?3, ?4, ?5)")),
          insert_alert(db.prepare("INSERT INTO alerts(run_id, kind, severity, step, message, data, wall_time) "
                                  "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)")),
          insert_checkpoint(db.prepare("INSERT OR REPLACE INTO checkpoints(run_id, step, path, wall_time) "
                                       "VALUES (?1, ?2, ?3, ?4)")),
          insert_eval(db.prepare("INSERT OR REPLACE INTO evals(run_id, step, task, metric, value, wall_time, tokens) "
                                 "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)")),
          update_status(db.prepare("UPDATE runs SET status = ?2, ended_at = ?3 WHERE id = ?1")),
          insert_vector(db.prepare("INSERT OR REPLACE INTO vectors(run_id, key_id, step, wall_time, data) "
                                   "VALUES (?1, ?2, ?3, ?4, ?5)")),
          insert_labels(db.prepare("INSERT OR REPLACE INTO vector_labels(run_id, key_id, labels) VALUES (?1, ?2, ?3)")),
          insert_batch(db.prepare("INSERT OR REPLACE INTO batches(run_id, step, wall_time, data) VALUES (?1, ?2, ?3, ?4)")),
          insert_document(db.prepare("INSERT OR REPLACE INTO documents(run_id, ref, doc_id, source, byte_offset) "
                                     "VALUES (?1, ?2, ?3, ?4, ?5)")),
          find_key(db.prepare("SELECT id FROM metric_keys WHERE name = ?1")),
          insert_key(db.prepare("INSERT INTO metric_keys(name) VALUES (?1)")) {}

    int64_t key_id(const std::string& name) {
        auto it = keys.find(name);
        if (it != keys.end()) return it->second;
        find_key.bind(1, name);
        int64_t id;
        if (find_key.step()) {
            id = find_key.column_int(0);
        } else {
            find_key.reset();
            insert_key.bind(1, name).run();
            id = db.last_insert_rowid();
        }
        find_key.reset();
        return keys[name] = id;
    }

    void write_metric(int64_t run, const MetricPoint& p) {
        int64_t key = key_id(p.key);
        insert_metric.bind(1, run).bind(2, key).bind(3, p.step).bind(4, p.value).bind(5, p.wall_time).run();
        touched.insert({run, key, p.step / kBlockSteps});
    }

    // One queued record of a run, by kind.
    void write(int64_t run, const std::vector<MetricPoint>& points) {
        for (const MetricPoint& m : points) write_metric(run, m);
    }
    void write(int64_t run, const std::vector<VectorPoint>& points) {
        for (const VectorPoint& p : points) {
            int64_t key = key_id(p.key);
            if (p.labels) write_labels(run, key, p.labels);
            insert_vector.bind(1, run).bind(2, key).bind(3, p.step).bind(4, p.wall_time)
                .bind_floats(5, p.values.data(), p.values.size()).run();
        }
    }
    // A source sends the same labels object with every point (or with the
    // first only): written when they change, not at every step.
    void write_labels(int64_t run, int64_t key, const std::shared_ptr<const std::vector<std::string>>& labels) {
        auto& known = labels_written[{run, key}];
        if (known == labels || (known && *known == *labels)) return;
        known = labels;
        insert_labels.bind(1, run).bind(2, key).bind(3, nlohmann::json(*labels).dump()).run();
    }
    void write(int64_t run, const RankMetricPoint& p) {
        insert_rank.bind(1, run).bind(2, key_id(p.key)).bind(3, p.step).bind(4, p.rank).bind(5, p.value)
            .bind(6, p.wall_time).run();
    }
    void write(int64_t run, const Event& e) {
        insert_event.bind(1, run).bind(2, e.kind).bind(3, e.step).bind(4, e.wall_time).bind(5, e.detail).run();
    }
    void write(int64_t run, const Alert& a) {
        insert_alert.bind(1, run).bind(2, a.kind).bind(3, a.severity).bind(4, a.step).bind(5, a.message)
            .bind(6, a.data).bind(7, a.wall_time).run();
    }
    void write(int64_t run, const CheckpointRecord& c) {
        insert_checkpoint.bind(1, run).bind(2, c.step).bind(3, c.path).bind(4, c.wall_time).run();
    }
    void write(int64_t run, const EvalRecord& e) {
        insert_eval.bind(1, run).bind(2, e.step).bind(3, e.task).bind(4, e.metric).bind(5, e.value)
            .bind(6, e.wall_time).bind(7, e.tokens).run();
    }
    void write(int64_t run, const Provenance& p) {
        for (const DocumentRecord& d : p.documents)
            insert_document.bind(1, run).bind(2, d.ref).bind(3, d.doc_id).bind(4, d.source).bind(5, d.offset).run();
        insert_batch.bind(1, run).bind(2, p.batch.step).bind(3, p.batch.wall_time).bind(4, p.batch.data).run();
    }
    void write(int64_t run, const Status& s) { update_status.bind(1, run).bind(2, s.status).bind(3, s.ended_at).run(); }
    void write(int64_t run, const HaltRequest& h) {
        if (h.handled)
            db.prepare("UPDATE halt_requests SET handled_at = ?2 WHERE run_id = ?1 AND handled_at = 0")
                .bind(1, run).bind(2, now_seconds()).run();
        else
            db.prepare("INSERT INTO halt_requests(run_id, requested_at, requested_by) VALUES (?1, ?2, ?3)")
                .bind(1, run).bind(2, now_seconds()).bind(3, h.who).run();
    }
    void write(int64_t run, const DeleteRun&) { delete_run(run); }

    // Writes one queued record unless its run is gone: deleted from the store
    // while it was written (by another process), which the foreign key on
    // run_id says by refusing the row (nothing of the record is written: its
    // first row is refused). The record and every later one of the run are
    // dropped, and the run is noted in newly_gone. Returns whether it wrote.
    template <class T>
    bool write_unless_deleted(int64_t run, const T& record) {
        if (gone.count(run)) return false;
        try {
            write(run, record);
            return true;
        } catch (const StoreError& e) {
            // Any other refusal (a metric key's, a run that does exist) is a bug, and stops the writer.
            if (e.code != SQLITE_CONSTRAINT_FOREIGNKEY || run_exists(run)) throw;
        }
        gone.insert(run);
        newly_gone.push_back(run);
        return false;
    }
    bool run_exists(int64_t run) {
        Statement s = db.prepare("SELECT 1 FROM runs WHERE id = ?1");
        s.bind(1, run);
        return s.step();
    }
    void write(int64_t run, const Annotation& a) {
        db.prepare("UPDATE runs SET tags = ?2, note = ?3 WHERE id = ?1").bind(1, run).bind(2, a.tags_json)
            .bind(3, a.note).run();
    }

    // Recomputes the summary of every block written in this transaction, from
    // the rows themselves, so a replaced step never leaves a stale min or max.
    void refresh_blocks() {
        for (auto [run, key, block] : touched)
            refresh_block.bind(1, run)
                .bind(2, key)
                .bind(3, block)
                .bind(4, block * kBlockSteps)
                .bind(5, block * kBlockSteps + kBlockSteps - 1)
                .run();
        touched.clear();
    }

    int64_t open_run(const RunRecord& r, bool resume) {
        Statement find = db.prepare("SELECT id FROM runs WHERE name = ?1");
        find.bind(1, r.name);
        if (find.step()) {
            int64_t id = find.column_int(0);
            if (!resume)
                throw RunExists(fmt::format("run \"{}\" already exists in store {}; resume it (--resume) or choose "
                                             "another run name",
                                             r.name, db.path()));
            // What a resuming writer does not say (an empty config, precision or meta) stays as it was.
            db.prepare("UPDATE runs SET status = 'running', ended_at = 0, "
                       "config = CASE WHEN ?2 IN ('', '{}') THEN config ELSE ?2 END, "
                       "precision = CASE WHEN ?3 = '' THEN precision ELSE ?3 END, "
                       "host = CASE WHEN ?4 = '' THEN host ELSE ?4 END, "
                       "git_revision = CASE WHEN ?5 = '' THEN git_revision ELSE ?5 END, "
                       "meta = CASE WHEN ?6 = '{}' THEN meta ELSE ?6 END WHERE id = ?1")
                .bind(1, id).bind(2, r.config).bind(3, r.precision).bind(4, r.host).bind(5, r.git_revision)
                .bind(6, r.meta).run();
            return id;
        }
        db.prepare("INSERT INTO runs(name, config, precision, status, host, git_revision, source, started_at, meta) "
                   "VALUES (?1, ?2, ?3, 'running', ?4, ?5, ?6, ?7, ?8)")
            .bind(1, r.name).bind(2, r.config).bind(3, r.precision).bind(4, r.host).bind(5, r.git_revision)
            .bind(6, r.source).bind(7, r.started_at).bind(8, r.meta).run();
        return db.last_insert_rowid();
    }

    // Every row of the run, in every table, then the run itself.
    void delete_run(int64_t id) {
        for (const char* table : {"metrics", "rank_metrics", "metric_blocks", "vectors", "vector_labels", "events",
                                  "alerts", "checkpoints", "evals", "halt_requests", "batches", "documents"})
            db.prepare(fmt::format("DELETE FROM {} WHERE run_id = ?1", table)).bind(1, id).run();
        db.prepare("DELETE FROM runs WHERE id = ?1").bind(1, id).run();
        std::erase_if(labels_written, [&](const auto& entry) { return entry.first.first == id; });
    }

    // After a rollback: what this transaction wrote is gone, metric keys it
    // added included, so their cached ids must not be used again.
    void forget_uncommitted() {
        touched.clear();
        keys.clear();
        labels_written.clear();
    }

    Database db;
    bool ready;
    Statement insert_metric, insert_rank, refresh_block, insert_event, insert_alert, insert_checkpoint, insert_eval,
        update_status, insert_vector, insert_labels, insert_batch, insert_document, find_key, insert_key;
    std::map<std::string, int64_t> keys;
    std::map<std::pair<int64_t, int64_t>, std::shared_ptr<const std::vector<std::string>>> labels_written;
    std::set<std::tuple<int64_t, int64_t, int64_t>> touched;
    std::set<int64_t> gone;            // runs found deleted: their records are dropped
    std::vector<int64_t> newly_gone;   // found since the last commit, for Writer::committed
};

}  // namespace hlat::telemetry
