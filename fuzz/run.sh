#!/usr/bin/env bash
# Runs one fuzz target for a while, on the stable toolchain.
#
#   fuzz/run.sh TARGET SECONDS      TARGET: parse_index | decode | store_ops
#
# Installs cargo-fuzz if needed, writes the project's seed corpus, then fuzzes
# without a sanitizer (plain `cargo fuzz run` needs nightly `-Z` flags; see
# shared TOOLCHAIN notes). Set LOADERX_FUZZ_ASAN=1 to run under
# AddressSanitizer through RUSTC_BOOTSTRAP instead (slower, ~300k execs/s).
# Crashes land in fuzz/artifacts/TARGET/; turn each into a regression test.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
target=${1:?usage: fuzz/run.sh TARGET SECONDS}
seconds=${2:-60}
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi
cargo run --quiet --release --bin gen_corpus
mkdir -p "corpus/$target" "regressions/$target"
# Inputs that once failed are replayed as part of the corpus every run.
if [ "${LOADERX_FUZZ_ASAN:-0}" = 1 ]; then
    RUSTC_BOOTSTRAP=1 cargo fuzz run "$target" "corpus/$target" "regressions/$target" -- -max_total_time="$seconds"
else
    cargo fuzz run --sanitizer none "$target" "corpus/$target" "regressions/$target" -- -max_total_time="$seconds"
fi
