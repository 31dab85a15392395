#!/usr/bin/env bash
# The 16-core scaling table of docs/benchmarks.md on a lent machine, in one call.
#
#   bash tests/benchmarks/scaling_on_a_lent_machine.sh PARTS INSTALL OUT [BUDGET_S]
#
# PARTS: the folder holding the TensorFlow wheel's parts (part.00, ...), INSTALL: the
# install.sh that ../shared/tools/tf-wheel-parts.sh puts in the last part's folder (its
# whl/ beside it), OUT: where each group of cases writes its JSON and log, BUDGET_S: seconds
# for the measurements (default 450). The install is skipped when TensorFlow imports already;
# wheels in .whl/ (dp-accounting, dm-tree, ruptures, tomli-w) are added to it.
#
# Each group runs under `timeout -s INT` with its own --benchmark-json: at the budget pytest
# ends its session and pytest-benchmark still writes the cases done (a killed session
# writes nothing). The 100-client cases first: they are the ones the criterion fails on.
set -uo pipefail
parts=${1:?PARTS}; install=${2:?INSTALL}; out=${3:?OUT}; budget=${4:-450}
export PYTHONUNBUFFERED=1
site=/tmp/site
mkdir -p "$out" "$site"
export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
if ! python3 -c 'import tensorflow' >/dev/null 2>&1; then
  bash "$install" "$parts" "$site" || exit 1
  python3 -m compileall -q -j 0 "$site" >/dev/null 2>&1  # once, not in each of 40 processes
fi
if compgen -G '.whl/*.whl' >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .whl/*.whl || exit 1
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . || exit 1
end=$((SECONDS + budget))

group() {  # group NAME EXPRESSION
  local left=$((end - SECONDS))
  if [ "$left" -lt 30 ]; then echo "$1: no time left"; return; fi
  timeout -s INT "$left" python3 -m pytest tests/benchmarks/test_scaling.py -o addopts='' \
    -p no:cacheprovider -q -k "$2" --benchmark-json="$out/$1.json" >"$out/$1.log" 2>&1
  echo "$1: $(grep -E 'passed|failed|error|Interrupt' "$out/$1.log" | tail -1)"
}
group scaling-100c '100c and not trivial'
group scaling-1000c '1000c and not trivial'
group driver-cpu 'trivial'
