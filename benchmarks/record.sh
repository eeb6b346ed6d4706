#!/usr/bin/env bash
# Run the measurements one after another (on an otherwise idle machine), keep each
# script's tables as JSON under benchmarks/results/, and draw them into docs/img/ (matplotlib).
# Run from the repository root: bash benchmarks/record.sh
set -euo pipefail
out=benchmarks/results
mkdir -p "$out"
run() {  # name, script and its arguments
    local name=$1; shift
    rm -f "$out/$name.json"
    NKIPY_BENCH_JSON="$out/$name.json" python "$@" 2>&1 | tee "$out/$name.txt"
}
run overhead benchmarks/bench_overhead.py
run eager benchmarks/bench_eager.py
run compile benchmarks/bench_compile.py --repeat 3
run forward benchmarks/bench_forward.py --sizes small large
run hf_llama benchmarks/bench_hf_llama.py
run vision benchmarks/bench_vision.py
python benchmarks/plot.py "$out"/overhead.json "$out"/eager.json "$out"/compile.json --baseline inductor --out docs/img
python benchmarks/plot.py "$out"/forward.json "$out"/hf_llama.json "$out"/vision.json --baseline eager --out docs/img
