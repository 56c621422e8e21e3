#!/usr/bin/env bash
# Runs one fuzz target for a while, on the stable toolchain.
#
#   fuzz/run.sh TARGET SECONDS      TARGET: a file stem in fuzz/fuzz_targets/
#
# Installs cargo-fuzz if needed, writes the project's seed corpus, then fuzzes
# under AddressSanitizer. Plain `cargo fuzz run` passes nightly-only `-Z`
# flags, which the stable compiler refuses; RUSTC_BOOTSTRAP=1 lets stable
# accept them (about 300k execs/s with ASan on a 2-core machine). Set
# LOADERX_FUZZ_SANITIZER=none to fuzz without a sanitizer instead (about 2M
# execs/s; panics are still caught, out-of-bounds reads in unsafe code are
# not). Crashes land in fuzz/artifacts/TARGET/; turn each into a regression.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
target=${1:?usage: fuzz/run.sh TARGET SECONDS}
seconds=${2:-60}
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi
# The seeds are a few small stores: an unoptimised build writes them in no
# time and compiles in a fraction of a release build's time.
cargo run --quiet --bin gen_corpus
mkdir -p "corpus/$target" "regressions/$target"
# libFuzzer flags of one target's own. open_store opens hostile stores,
# which must never drive an allocation: any one of 1 GiB or more is a crash
# there (libFuzzer sees every malloc under a sanitizer; without one, its RSS
# limit still stops a runaway).
flags=()
case "$target" in
    open_store) flags=(-malloc_limit_mb=1024) ;;
esac
# Inputs that once failed are replayed as part of the corpus every run.
case "${LOADERX_FUZZ_SANITIZER:-address}" in
    address)
        RUSTC_BOOTSTRAP=1 cargo fuzz run "$target" "corpus/$target" "regressions/$target" \
            -- -max_total_time="$seconds" ${flags[@]+"${flags[@]}"} ;;
    none)
        cargo fuzz run --sanitizer none "$target" "corpus/$target" "regressions/$target" \
            -- -max_total_time="$seconds" ${flags[@]+"${flags[@]}"} ;;
    *)
        echo "fuzz/run.sh: LOADERX_FUZZ_SANITIZER must be 'address' or 'none', got '$LOADERX_FUZZ_SANITIZER'" >&2
        exit 2 ;;
esac
