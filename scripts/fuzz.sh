#!/usr/bin/env bash
# Runs every cargo fuzz target (fuzz/fuzz_targets/) for SECONDS each (default 60), on its corpus
# in fuzz/corpus/<target> (kept between runs; git ignores it). A crash stops the script and leaves
# its input in fuzz/artifacts/<target>/: turn it into a regression test.
#   scripts/fuzz.sh [SECONDS] [TARGET...]
# Needs cargo-fuzz (cargo install cargo-fuzz --locked) and a C++ compiler; it builds with the
# project's stable toolchain (RUSTC_BOOTSTRAP lets cargo fuzz pass its -Z flags) and without a
# sanitizer, so that libFuzzer's coverage guidance and the targets' assertions do the work.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds=${1:-60}
shift || true
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked --quiet
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cargo fuzz list)
fi
export RUSTC_BOOTSTRAP=1
cargo fuzz build --sanitizer none --release "${targets[@]/#/--bin=}" 2>/dev/null \
  || cargo fuzz build --sanitizer none --release
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  echo "fuzz: $t for ${seconds}s" >&2
  cargo fuzz run --sanitizer none --release "$t" "corpus/$t" -- \
    -max_total_time="$seconds" -rss_limit_mb=4096 -print_final_stats=1 2>&1 | tail -n 3
done
