#!/bin/bash
# `tether bench --size small --no-peak` synchronous against asynchronous (rollout.max_staleness=1),
# three rounds in rotation: sync with 2 trainer threads; async with 2 trainer threads and the
# worker's 1 (3 threads on the 2 cores); async with 1 trainer thread and the worker's 1 (2 in all).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
for r in 1 2 3; do
  tether bench --size small --no-peak --iterations 6 --threads 2 > "$here/sync_t2_r$r.json"
  tether bench --size small --no-peak --iterations 6 --threads 2 --max-staleness 1 > "$here/async_t2w1_r$r.json"
  tether bench --size small --no-peak --iterations 6 --threads 1 --max-staleness 1 > "$here/async_t1w1_r$r.json"
done
