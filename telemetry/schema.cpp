#include "telemetry/schema.h"

#include <fmt/format.h>

#include <vector>

namespace hlat::telemetry {
namespace {

// migrations[i] moves the schema from version i to i + 1. Append only.
const std::vector<const char*> kMigrations = {
    R"sql(
    CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        config TEXT NOT NULL DEFAULT '{}',
        precision TEXT NOT NULL DEFAULT '',
        status TEXT NOT NULL,
        host TEXT NOT NULL DEFAULT '',
        git_revision TEXT NOT NULL DEFAULT '',
        source TEXT NOT NULL DEFAULT 'hlat',
        started_at REAL NOT NULL,
        ended_at REAL NOT NULL DEFAULT 0
    );
    CREATE TABLE metric_keys (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE
    );
    -- value NULL is NaN: SQLite cannot store NaN itself.
    CREATE TABLE metrics (
        run_id INTEGER NOT NULL REFERENCES runs(id),
        key_id INTEGER NOT NULL REFERENCES metric_keys(id),
        step INTEGER NOT NULL,
        value REAL,
        wall_time REAL NOT NULL,
        PRIMARY KEY (run_id, key_id, step)
    ) WITHOUT ROWID;
    CREATE TABLE rank_metrics (
        run_id INTEGER NOT NULL REFERENCES runs(id),
        key_id INTEGER NOT NULL REFERENCES metric_keys(id),
        step INTEGER NOT NULL,
        rank INTEGER NOT NULL,
        value REAL,
        wall_time REAL NOT NULL,
        PRIMARY KEY (run_id, key_id, step, rank)
    ) WITHOUT ROWID;
    -- Min, max and last value of every 64-step block of a series, kept by the
    -- writer, so that a downsampled read of a long series touches 1/64 of the rows.
    CREATE TABLE metric_blocks (
        run_id INTEGER NOT NULL,
        key_id INTEGER NOT NULL,
        block INTEGER NOT NULL,
        min_value REAL,
        max_value REAL,
        last_step INTEGER NOT NULL,
        last_value REAL,
        has_nan INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (run_id, key_id, block)
    ) WITHOUT ROWID;
    CREATE TABLE events (
        id INTEGER PRIMARY KEY,
        run_id INTEGER NOT NULL REFERENCES runs(id),
        kind TEXT NOT NULL,
        step INTEGER NOT NULL,
        wall_time REAL NOT NULL,
        detail TEXT NOT NULL DEFAULT ''
    );
    CREATE INDEX events_by_run ON events(run_id, wall_time);
    CREATE TABLE alerts (
        id INTEGER PRIMARY KEY,
        run_id INTEGER NOT NULL REFERENCES runs(id),
        kind TEXT NOT NULL,
        severity TEXT NOT NULL,
        step INTEGER NOT NULL,
        message TEXT NOT NULL,
        data TEXT NOT NULL DEFAULT '{}',
        wall_time REAL NOT NULL
    );
    CREATE INDEX alerts_by_run ON alerts(run_id, step);
    CREATE TABLE checkpoints (
        run_id INTEGER NOT NULL REFERENCES runs(id),
        step INTEGER NOT NULL,
        path TEXT NOT NULL,
        wall_time REAL NOT NULL,
        PRIMARY KEY (run_id, step)
    );
    CREATE TABLE evals (
        run_id INTEGER NOT NULL REFERENCES runs(id),
        step INTEGER NOT NULL,
        task TEXT NOT NULL,
        metric TEXT NOT NULL,
        value REAL,
        wall_time REAL NOT NULL,
        PRIMARY KEY (run_id, step, task, metric)
    );
    )sql",
    // 1 -> 2: halts asked for from outside the trainer (the web page).
    R"sql(
    CREATE TABLE halt_requests (
        id INTEGER PRIMARY KEY,
        run_id INTEGER NOT NULL REFERENCES runs(id),
        requested_at REAL NOT NULL,
        requested_by TEXT NOT NULL,
        handled_at REAL NOT NULL DEFAULT 0
    );
    CREATE INDEX halt_requests_pending ON halt_requests(run_id, handled_at);
    )sql",
    // 2 -> 3: evaluations are plotted against tokens seen (issue 8).
    R"sql(
    ALTER TABLE evals ADD COLUMN tokens INTEGER NOT NULL DEFAULT 0;
    )sql",
    // 3 -> 4: what an external trainer says of itself (precision, bytes per
    // parameter, world size, how a halt reaches it), as JSON (issue 16).
    R"sql(
    ALTER TABLE runs ADD COLUMN meta TEXT NOT NULL DEFAULT '{}';
    )sql",
    // 4 -> 5: the page draws each bucket's mean and places it in wall time
    // (issue 17): blocks keep the sum and count of their non-NaN values and the
    // wall times of their first and last steps. Runs get tags and a note.
    R"sql(
    ALTER TABLE metric_blocks ADD COLUMN sum_value REAL;
    ALTER TABLE metric_blocks ADD COLUMN n_values INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE metric_blocks ADD COLUMN first_time REAL;
    ALTER TABLE metric_blocks ADD COLUMN last_time REAL;
    UPDATE metric_blocks SET
        sum_value = (SELECT sum(value) FROM metrics m WHERE m.run_id = metric_blocks.run_id
                     AND m.key_id = metric_blocks.key_id AND m.step BETWEEN block * 64 AND block * 64 + 63),
        n_values = (SELECT count(value) FROM metrics m WHERE m.run_id = metric_blocks.run_id
                    AND m.key_id = metric_blocks.key_id AND m.step BETWEEN block * 64 AND block * 64 + 63),
        first_time = (SELECT wall_time FROM metrics m WHERE m.run_id = metric_blocks.run_id
                      AND m.key_id = metric_blocks.key_id AND m.step BETWEEN block * 64 AND block * 64 + 63
                      ORDER BY step ASC LIMIT 1),
        last_time = (SELECT wall_time FROM metrics m WHERE m.run_id = metric_blocks.run_id
                     AND m.key_id = metric_blocks.key_id AND m.step BETWEEN block * 64 AND block * 64 + 63
                     ORDER BY step DESC LIMIT 1);
    ALTER TABLE runs ADD COLUMN tags TEXT NOT NULL DEFAULT '[]';
    ALTER TABLE runs ADD COLUMN note TEXT NOT NULL DEFAULT '';
    )sql",
    // 5 -> 6: statistics over layers, heads or tensors (issue 35): one row per
    // step whose value is a vector of float32 (little-endian), and the names
    // of its elements per run (a JSON array of strings).
    R"sql(
    CREATE TABLE vectors (
        run_id INTEGER NOT NULL REFERENCES runs(id),
        key_id INTEGER NOT NULL REFERENCES metric_keys(id),
        step INTEGER NOT NULL,
        wall_time REAL NOT NULL,
        data BLOB NOT NULL,
        PRIMARY KEY (run_id, key_id, step)
    ) WITHOUT ROWID;
    CREATE TABLE vector_labels (
        run_id INTEGER NOT NULL REFERENCES runs(id),
        key_id INTEGER NOT NULL REFERENCES metric_keys(id),
        labels TEXT NOT NULL,
        PRIMARY KEY (run_id, key_id)
    ) WITHOUT ROWID;
    )sql",
    // 6 -> 7: batch provenance (issue 36): what each step trained on, as JSON
    // (docs/provenance.md), and the documents its sequences name by number.
    R"sql(
    CREATE TABLE batches (
        run_id INTEGER NOT NULL REFERENCES runs(id),
        step INTEGER NOT NULL,
        wall_time REAL NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (run_id, step)
    ) WITHOUT ROWID;
    CREATE TABLE documents (
        run_id INTEGER NOT NULL REFERENCES runs(id),
        ref INTEGER NOT NULL,
        doc_id TEXT NOT NULL,
        source TEXT NOT NULL,
        byte_offset INTEGER NOT NULL,
        PRIMARY KEY (run_id, ref)
    ) WITHOUT ROWID;
    )sql",
    // 7 -> 8: a run's id is never given again (issue 52). Without AUTOINCREMENT
    // SQLite hands out the largest id + 1, so deleting the newest run gave its id
    // to the next run created, and whatever still wrote the deleted run (a
    // follower, a client's session) wrote into that one. The runs table is
    // rebuilt (SQLite cannot add AUTOINCREMENT in place; it is small), and the
    // counter starts above every run id any table holds: rows a deleted run's
    // writer left behind before foreign keys were enforced are never adopted.
    R"sql(
    CREATE TABLE runs_autoincrement (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT NOT NULL UNIQUE,
        config TEXT NOT NULL DEFAULT '{}',
        precision TEXT NOT NULL DEFAULT '',
        status TEXT NOT NULL,
        host TEXT NOT NULL DEFAULT '',
        git_revision TEXT NOT NULL DEFAULT '',
        source TEXT NOT NULL DEFAULT 'hlat',
        started_at REAL NOT NULL,
        ended_at REAL NOT NULL DEFAULT 0,
        meta TEXT NOT NULL DEFAULT '{}',
        tags TEXT NOT NULL DEFAULT '[]',
        note TEXT NOT NULL DEFAULT ''
    );
    INSERT INTO runs_autoincrement(id, name, config, precision, status, host, git_revision, source, started_at,
                                   ended_at, meta, tags, note)
        SELECT id, name, config, precision, status, host, git_revision, source, started_at, ended_at, meta, tags,
               note FROM runs;
    DROP TABLE runs;
    ALTER TABLE runs_autoincrement RENAME TO runs;
    DELETE FROM sqlite_sequence WHERE name = 'runs';
    INSERT INTO sqlite_sequence(name, seq) SELECT 'runs', coalesce(max(id), 0) FROM (
        SELECT max(id) AS id FROM runs UNION ALL SELECT max(run_id) FROM metrics
        UNION ALL SELECT max(run_id) FROM rank_metrics UNION ALL SELECT max(run_id) FROM metric_blocks
        UNION ALL SELECT max(run_id) FROM events UNION ALL SELECT max(run_id) FROM alerts
        UNION ALL SELECT max(run_id) FROM checkpoints UNION ALL SELECT max(run_id) FROM evals
        UNION ALL SELECT max(run_id) FROM halt_requests UNION ALL SELECT max(run_id) FROM vectors
        UNION ALL SELECT max(run_id) FROM vector_labels UNION ALL SELECT max(run_id) FROM batches
        UNION ALL SELECT max(run_id) FROM documents);
    )sql",
    // 8 -> 9: a value reads back as it was written, -0.0 included (issue 52).
    // A REAL column stores a double that is a whole number as an integer, and
    // -0.0 came back as 0, though the CSV export promises values as stored.
    // metrics.value and rank_metrics.value lose their declared type (no
    // affinity: a double stays a double). Only the schema's text changes, no
    // row (SQLite's documented way to change what leaves the file format as
    // it is: writable_schema); RESET reloads this connection's schema, and
    // the table made and dropped after it tells every other connection to.
    // Older rows stored as integers read back as the same doubles.
    R"sql(
    PRAGMA writable_schema = ON;
    UPDATE sqlite_schema SET sql = replace(sql, 'value REAL,', 'value,') WHERE name IN ('metrics', 'rank_metrics');
    PRAGMA writable_schema = RESET;
    CREATE TABLE schema_changed (x);
    DROP TABLE schema_changed;
    )sql",
};

}  // namespace

int schema_version(Database& db) {
    Statement s = db.prepare("PRAGMA user_version");
    s.step();
    return (int)s.column_int(0);
}

void prepare_schema(Database& db, bool writable) {
    int version = schema_version(db);
    if (version > kSchemaVersion)
        throw StoreError(fmt::format("store {} has schema version {}, newer than this hlat understands ({}); "
                                     "use a newer hlat",
                                     db.path(), version, kSchemaVersion));
    if (!writable) {
        if (version < kSchemaVersion)
            throw StoreError(fmt::format("store {} has schema version {}; open it once for writing (any hlat "
                                         "train or ingest) to migrate it to {}",
                                         db.path(), version, kSchemaVersion));
        return;
    }
    // WAL: readers never block the writer and the writer never blocks readers;
    // synchronous=NORMAL is durable up to the last commit in WAL mode on a crash
    // of the process (a power loss may lose the last commits, never corrupt).
    // Retried by hand: two processes opening a new store at once both ask for
    // the switch, and SQLite refuses one at once rather than risk a deadlock.
    db.exec_retrying_when_busy("PRAGMA journal_mode=WAL");
    db.exec("PRAGMA synchronous=NORMAL");
    // A migration may rebuild a table that others refer to (7 -> 8: runs),
    // which foreign keys would refuse half way; they are off while it runs
    // (the pragma is a no-op inside a transaction) and on again after it.
    db.exec("PRAGMA foreign_keys=OFF");
    try {
        // Version read again inside each write transaction: two processes may
        // open a new store at once, and only one may run a migration.
        for (;;) {
            Transaction t(db);
            version = schema_version(db);
            if (version >= kSchemaVersion) break;
            db.exec(kMigrations[version]);
            db.exec(fmt::format("PRAGMA user_version = {}", version + 1));
            t.commit();
        }
    } catch (...) {
        db.exec("PRAGMA foreign_keys=ON");
        throw;
    }
    db.exec("PRAGMA foreign_keys=ON");
}

}  // namespace hlat::telemetry
