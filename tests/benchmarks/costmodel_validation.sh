#!/usr/bin/env bash
# Cost-model validation sweep: one fitted run predicts every other cell.
# Run by hand on a QUIET box (the figures are only as good as the box's stability):
#   bash tests/benchmarks/costmodel_validation.sh [OUT] [UPDATES]
# then: harness project --from OUT/cv-fit-10mbit-w2 --validate OUT --figures OUT/figures
# One factor at a time around the fit cell (10 Mbit/s, 2 workers, no delay, no loss, depth 0),
# spanning bandwidth 5-200 Mbit/s, workers 1-8, delay 0-100 ms, loss 0-2 %, depth 0/1; the fit
# cell is repeated at the end, so the drift of the box itself is one of the rows.
set -euo pipefail
OUT=${1:-/tmp/wan-costval}
UPDATES=${2:-20}
H=${HARNESS:-harness}
common=(--method spar --budget 1.6% --model tiny --seeds 1 --updates "$UPDATES" --eval-problems 0
        --out "$OUT" --quiet)
cell() {  # cell RUN_ID FLAGS...
  local id=$1; shift
  if grep -qs '"status": "complete"' "$OUT/$id/meta.json"; then return; fi
  rm -rf "${OUT:?}/$id"
  echo "$(date +%T) $id $*" >&2
  "$H" run "${common[@]}" --run-id "$id" "$@" >/dev/null
}
cell cv-fit-10mbit-w2     --bw 10mbit  --workers 2
cell cv-5mbit-w2          --bw 5mbit   --workers 2
cell cv-50mbit-w2         --bw 50mbit  --workers 2
cell cv-200mbit-w2        --bw 200mbit --workers 2
cell cv-10mbit-w1         --bw 10mbit  --workers 1
cell cv-10mbit-w4         --bw 10mbit  --workers 4
cell cv-10mbit-w8         --bw 10mbit  --workers 8
cell cv-10mbit-w2-25ms    --bw 10mbit  --workers 2 --delay 25ms
cell cv-10mbit-w2-100ms   --bw 10mbit  --workers 2 --delay 100ms
cell cv-20mbit-w2-loss0.5 --bw 20mbit  --workers 2 --loss 0.5%
cell cv-20mbit-w2-loss2   --bw 20mbit  --workers 2 --loss 2%
cell cv-10mbit-w2-p1      --bw 10mbit  --workers 2 --pipeline 1
cell cv-repeat-10mbit-w2  --bw 10mbit  --workers 2
echo "$OUT"
