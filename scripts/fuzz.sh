#!/usr/bin/env bash
# Fuzzing the parsers of untrusted input (tests/fuzz/README.md), in build-fuzz/ (or
# $TRIREME_FUZZ_BUILD_DIR): clang, ASan + UBSan, only the sources the harnesses need.
#   scripts/fuzz.sh build                       # configure and build the harnesses
#   scripts/fuzz.sh smoke                       # build, then the fuzz-labelled ctest tests (the test run's)
#   scripts/fuzz.sh run SECONDS [WORK_DIR] [HARNESS...]
#       each harness (default: all) for SECONDS in turn, one process at a time at the lowest
#       priority; the corpus grows in WORK_DIR/<harness>/corpus (default ~/.cache/trireme-fuzz,
#       outside the repository) and crash inputs land in WORK_DIR/<harness>/artifacts/. A run
#       goes on past a crash (libFuzzer's fork mode) and lists every artifact at the end.
#       FUZZ_FORKS=N runs N processes per harness; FUZZ_CONCURRENT=1 runs the harnesses at once
#       (on a machine with cores for them all: harnesses x FUZZ_FORKS).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${TRIREME_FUZZ_BUILD_DIR:-build-fuzz}
harnesses=(safetensors checkpoint token_shard config tokenizer store)

build() {
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DTRIREME_FUZZ=ON -DTRIREME_SANITIZE=ON -DTRIREME_WITH_CUDA=OFF -DTRIREME_BUILD_TESTS=OFF \
    -DTRIREME_BUILD_BENCH=OFF -DTRIREME_BUILD_EXAMPLES=OFF >/dev/null
  ninja -C "$build_dir" fuzzers | grep -v '^\[' || true
  test -x "$build_dir/tests/fuzz/fuzz_safetensors"
}

# After a failed smoke, what each failing harness said and the inputs it left, last in the
# output (where a log's tail shows it): the inputs in base64, so a failure seen only in a log
# can be replayed (base64 -d > input; build-fuzz/tests/fuzz/fuzz_<harness> input).
report_smoke_failures() {
  local smoke=$1 h log f
  # The lines of a finding: sanitizer and libFuzzer reports, broken properties, hangs.
  local finding='ERROR: |runtime error|SUMMARY: |fuzz property broken|out-of-memory|deadly signal|ALARM: '
  echo "fuzz smoke failed; what the harnesses reported:"
  for h in "${harnesses[@]}"; do
    for log in "$smoke/$h/fuzz.log" "$smoke/$h/replay.log"; do
      [ -f "$log" ] || continue
      grep -qE "$finding" "$log" || continue
      echo "== $h ($(basename "$log")):"
      grep -E "$finding|^    #[0-9]+ " "$log" | head -40  # and the stack frames
    done
    for f in "$smoke/$h"/artifacts/*; do
      [ -f "$f" ] || continue
      echo "== $h input $(basename "$f") ($(stat -c %s "$f") bytes, base64 of its first 8 KiB):"
      head -c 8192 "$f" | base64 -w 0
      echo
    done
  done
}

case "${1:-}" in
  build)
    build
    ;;
  smoke)
    build
    if ! ctest --test-dir "$build_dir" -L fuzz --output-on-failure -j2; then
      report_smoke_failures "$build_dir/tests/fuzz/smoke"
      exit 1
    fi
    ;;
  run)
    seconds=${2:?usage: scripts/fuzz.sh run SECONDS [WORK_DIR] [HARNESS...]}
    work=${3:-$HOME/.cache/trireme-fuzz}
    shift $(($# < 3 ? $# : 3))
    (($#)) && harnesses=("$@")
    build
    mkdir -p "$work"
    fuzz_one() {
      nice -n 19 tests/fuzz/run_harness.sh "$build_dir/tests/fuzz/fuzz_$1" "$1" "$work" \
        -max_total_time="$seconds" -fork="${FUZZ_FORKS:-1}" -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
        -print_funcs=0 >"$work/$1.log" 2>&1 || true
    }
    for h in "${harnesses[@]}"; do
      echo "fuzz: $h for ${seconds}s, ${FUZZ_FORKS:-1} process(es) (corpus $work/$h/corpus)"
      if [ -n "${FUZZ_CONCURRENT:-}" ]; then fuzz_one "$h" & else fuzz_one "$h"; fi
    done
    wait
    for h in "${harnesses[@]}"; do
      # fork mode's status lines: "#EXECS: cov: .. corp: .. exec/s N oom/timeout/crash: a/b/c time: Ts"
      echo "$h: $(grep -E '^#[0-9]+: cov' "$work/$h.log" | tail -1 || true)"
    done
    findings=$(find "$work" -path '*/artifacts/*' -type f | sort)
    if [ -n "$findings" ]; then
      echo "fuzz: findings (reproduce: $build_dir/tests/fuzz/fuzz_<harness> FILE):"
      echo "$findings"
      exit 1
    fi
    echo "fuzz: no findings"
    ;;
  *)
    sed -n '2,12p' "$0"
    exit 2
    ;;
esac
