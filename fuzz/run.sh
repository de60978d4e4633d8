#!/usr/bin/env bash
# Runs each libFuzzer target for SECONDS on a fresh copy of its seed corpus
# (fuzz/corpus/T) and every input that once crashed it (fuzz/regressions/T),
# then prints one line per target: executions, coverage (edges reached, libFuzzer's
# "cov"), features, corpus size, crashes. Exits 1 if any target crashed; the
# crashing input is left in WORK/crashes for fuzz/regressions.
# Inputs grow up to MAX_LEN bytes (env, default 256 KB): long lines, bodies
# and headers are where parsers that look fine on short inputs break.
# usage: [MAX_LEN=N] fuzz/run.sh FUZZ_BUILD_DIR SECONDS WORK_DIR [TARGET...]
set -uo pipefail
build=$1 seconds=$2 work=$3
shift 3
here="$(cd "$(dirname "$0")" && pwd)"
targets=("$@")
((${#targets[@]})) || targets=(ingest_lines config_loader query_params api_router http_layer tensorboard_reader)
mkdir -p "$work/crashes"
status=0
for t in "${targets[@]}"; do
  rm -rf "$work/$t" && mkdir -p "$work/$t"
  rm -f "$work/crashes/$t-"*  # a crash from an earlier run is in fuzz/regressions or still to be fixed
  dirs=("$work/$t" "$here/corpus/$t")
  [[ -d "$here/regressions/$t" ]] && dirs+=("$here/regressions/$t")
  (cd "$work" && "$build/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len="${MAX_LEN:-262144}" -print_final_stats=1 \
     -artifact_prefix="$work/crashes/$t-" "${dirs[@]}") > "$work/$t.log" 2>&1
  rc=$?
  done_line=$(grep -E "DONE|INITED" "$work/$t.log" | tail -1)
  execs=$(grep -oE "stat::number_of_executed_units: *[0-9]+" "$work/$t.log" | grep -oE "[0-9]+$")
  cov=$(sed -nE 's/.*cov: ([0-9]+).*/\1/p' <<<"$done_line")
  ft=$(sed -nE 's/.*ft: ([0-9]+).*/\1/p' <<<"$done_line")
  corp=$(sed -nE 's/.*corp: ([0-9]+).*/\1/p' <<<"$done_line")
  crashes=$(ls "$work/crashes" | grep -c "^$t-" || true)
  echo "fuzz $t: ${execs:-0} executions in ${seconds} s, cov ${cov:-?} edges, ft ${ft:-?}, corpus ${corp:-?}, crashes $crashes"
  # A target that never ran (a missing corpus folder, a build without it) found nothing: not a pass.
  ((${execs:-0} > 0)) || { echo "fuzz $t: did not run"; tail -3 "$work/$t.log"; status=1; }
  if ((rc != 0 || crashes != 0)); then
    status=1
    grep -E "ERROR|SUMMARY|runtime error" "$work/$t.log" | head -5
  fi
done
exit $status
