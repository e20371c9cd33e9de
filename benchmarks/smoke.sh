#!/usr/bin/env bash
# Every benchmark in benchmarks/ (each *.py but the _helpers) in its short --smoke form, with the project's
# .venv/bin/python, from the repository root; stops at the first failure and prints each one's wall time.
# Smoke results go to scratch files outside the repository: benchmarks/results/ is left as it is.
# aiperf runs only when AIPERF names its executable, e.g. AIPERF=.venv-aiperf/bin/aiperf bash benchmarks/smoke.sh
set -euo pipefail
cd "$(dirname "$0")/.."

python=.venv/bin/python
[ -x "$python" ] || { echo "smoke.sh: no $python (create the project's venv first)" >&2; exit 1; }
extra=()
if [ -n "${AIPERF:-}" ]; then extra=(--aiperf "$AIPERF"); fi

shopt -s nullglob
benchmarks=()
for path in benchmarks/*.py; do
  [[ "$(basename "$path")" == _* ]] || benchmarks+=("$path")
done
[ "${#benchmarks[@]}" -gt 0 ] || { echo "smoke.sh: no benchmarks in benchmarks/" >&2; exit 1; }

seconds_since() {  # wall seconds since a `date +%s%N` stamp, to a tenth
  local ms=$(( ($(date +%s%N) - $1) / 1000000 ))
  printf '%d.%d' $((ms / 1000)) $((ms % 1000 / 100))
}

total_start=$(date +%s%N)
for path in "${benchmarks[@]}"; do
  echo "+ $python $path --smoke${extra[*]:+ ${extra[*]}}"
  start=$(date +%s%N)
  if ! "$python" "$path" --smoke "${extra[@]}"; then
    echo "FAILED after $(seconds_since "$start") s: $path" >&2
    exit 1
  fi
  echo "ok in $(seconds_since "$start") s: $path"
done
echo "all ${#benchmarks[@]} benchmarks ok in $(seconds_since "$total_start") s"
