#!/usr/bin/env bash
# Keep a long sweep's finished points in the repository, so a sweep that takes longer than one
# session (the thesis cells: about 22 minutes a point, 18 points) resumes on another machine.
#
#   scripts/sweep-points.sh pack   runs/thesis-exact-rps docs/results/thesis-exact/data/thesis-exact-rps
#   scripts/sweep-points.sh unpack docs/results/thesis-exact/data/thesis-exact-rps runs/thesis-exact-rps
#   .venv/bin/testbed sweep examples/thesis-exact-cells.yaml --out runs/thesis-exact-rps
#
# pack keeps, per finished point (status ok), what `testbed sweep` needs to skip it and
# `testbed report` needs to aggregate it: point.json, summary.json, scenario.yaml,
# iterations.csv, flows.csv, queries.csv, rounds.csv, testbed.log, each job's policy.csv, with
# several jobs each one's iterations-<job>.csv, and with interleave each rank's pace log and
# records, and an ensemble's per-model byte counters (about 0.25 MB a 12 s point, xz). Left out: links.csv (the report's utilization plot only),
# Prometheus' TSDB and each host's raw files. A point already packed is not packed again.
set -euo pipefail
usage() { echo "usage: $0 pack SWEEP_OUT DEST | unpack DEST SWEEP_OUT" >&2; exit 2; }
[ $# -eq 3 ] || usage
case "$1" in
  pack)
    src="$2/runs" dest="$3"
    [ -d "$src" ] || { echo "$0: no $src (a sweep folder has runs/)" >&2; exit 2; }
    mkdir -p "$dest"
    for run in "$src"/*/; do
      name=$(basename "$run")
      [ -f "$run/point.json" ] && [ -f "$run/summary.json" ] || continue
      python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1])).get("status") != "ok")' \
        "$run/summary.json" || continue
      [ -f "$dest/$name.tar.xz" ] && continue
      files=()
      for f in point.json summary.json scenario.yaml iterations.csv flows.csv queries.csv \
               rounds.csv testbed.log; do
        [ -f "$run/$f" ] && files+=("$name/$f")
      done
      for f in "$run"/*/policy.csv; do  # a job's policy decisions (adaptive: one a switch)
        [ -f "$f" ] && files+=("$name/${f#"$run"/}")
      done
      for f in "$run"/iterations-*.csv; do  # several jobs: one records file per job
        [ -f "$f" ] && files+=("$name/${f#"$run"/}")
      done
      for f in "$run"/*/rounds-*-bytes.json; do  # ensemble: each model's byte counters at the window's edges
        [ -f "$f" ] && files+=("$name/${f#"$run"/}")
      done
      for f in "$run"/*/iterations-*.pace.csv; do  # interleave: each rank's slots and records
        [ -f "$f" ] || continue
        files+=("$name/${f#"$run"/}" "$name/$(dirname "${f#"$run"/}")/$(basename "$f" .pace.csv).csv")
      done
      tar -C "$src" -cJf "$dest/$name.tar.xz" "${files[@]}"
      echo "packed $name ($(du -k "$dest/$name.tar.xz" | cut -f1) KB)"
    done ;;
  unpack)
    src="$2" out="$3/runs"
    mkdir -p "$out"
    for f in "$src"/*.tar.xz; do
      [ -e "$f" ] || { echo "$0: nothing packed in $src" >&2; exit 2; }
      name=$(basename "$f" .tar.xz)
      if [ -d "$out/$name" ]; then echo "kept $out/$name (already there)"; continue; fi
      tar -C "$out" -xJf "$f" && echo "unpacked $name"
    done ;;
  *) usage ;;
esac
