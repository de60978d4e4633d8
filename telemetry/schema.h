// The store's schema, versioned with PRAGMA user_version and moved forward by
// migrations. A file from a newer hlat is refused rather than guessed at.
#pragma once

#include "telemetry/sqlite.h"

namespace hlat::telemetry {

constexpr int kSchemaVersion = 9;

// Sets WAL mode and brings the schema to kSchemaVersion (for a writable
// connection), or checks it is readable (read-only). Throws StoreError.
void prepare_schema(Database& db, bool writable);
// PRAGMA user_version of the open store.
int schema_version(Database& db);

}  // namespace hlat::telemetry
