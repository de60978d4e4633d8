#!/usr/bin/env bash
# The main job: trains the default model on the Python docs with the store and
# detectors on, scores each checkpoint in a separate process (`hlat eval
# --watch`, one thread, low priority) and serves the page while it trains. The
# page stays up after training ends, until Ctrl-C (which also stops a training
# still running, after a checkpoint). A second run resumes from the last
# checkpoint; checkpoints already scored are not scored again.
set -euo pipefail
HLAT=${HLAT:-build/cli/hlat}
STORE=runs/hlat.db
PORT=${PORT:-8080}
mkdir -p runs

"$HLAT" train --config configs/demo.json --resume --store "$STORE" &
trainer=$!
evaluator=
trap 'kill -INT $trainer $evaluator 2>/dev/null || true; wait $trainer $evaluator 2>/dev/null || true' INT TERM EXIT

for _ in $(seq 1 600); do  # the trainer creates the store before its first step
  [[ -s "$STORE" ]] && break
  kill -0 $trainer 2>/dev/null || break
  sleep 0.1
done
[[ -s "$STORE" ]] || { wait $trainer; exit 1; }
# The watcher starts once this trainer has registered the run as running, so a
# resumed demo is not taken for the previous one, which had ended.
for _ in $(seq 1 600); do
  "$HLAT" runs --store "$STORE" 2>/dev/null | awk '$1 == "demo" && $2 == "running" { found = 1 } END { exit !found }' && break
  kill -0 $trainer 2>/dev/null || break
  sleep 0.2
done
nice -n 10 "$HLAT" eval --watch runs/demo --store "$STORE" --threads 1 --exit-when-done >runs/demo-eval.log 2>&1 &
evaluator=$!
echo "scoring checkpoints in the background: runs/demo-eval.log"
"$HLAT" serve --store "$STORE" --port "$PORT"
