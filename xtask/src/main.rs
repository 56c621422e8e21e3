//! `cargo xtask <command>`: the project's own build, test and demo driver.
//!
//! Plain std Rust on purpose: it must build in seconds on a fresh clone and
//! never needs anything beyond the Rust toolchain and a Python 3.9+ on `PATH`.
//! Everything Python-side (maturin, NumPy, pytest, mypy) is installed by this
//! tool into `<repo>/.venv`, created on first use and reused afterwards.
//!
//! Commands:
//! * `test`  — fmt check, clippy, rustdoc of the library crates with warnings
//!   as errors, `cargo test --workspace` in the `checked` profile (optimised,
//!   debug assertions and overflow checks on, no LTO), the codec feature
//!   checks (`codecs` below), then the Python package built into the venv
//!   (release), its pytest suite, the 2.8 API tests against loaderx 2.8.19
//!   (`target/compat28-venv`), `mypy.stubtest`, a smoke run of the benchmark
//!   scripts and a short run of every fuzz target under AddressSanitizer.
//! * `codecs` — the codec feature checks alone: the pure-Rust build of
//!   `loaderx-store` (`deflate-flate2,lz4`) has no C build helper in its
//!   `cargo tree` and passes the store's codec tests with `CC=false`; DEFLATE
//!   stores written by the libdeflate and the flate2 builds read in the
//!   other.
//! * `demo`  — build the package, make a synthetic image-like dataset, convert
//!   it with every codec and time the `DataLoader` over each.
//! * `bench [all|typed]` — build the package, make sure `target/compat-venv`
//!   holds the original loaderx 0.5.4, run the criterion benches
//!   (`loaderx-benches`), then `benches/compare.py all`: the Python-side
//!   comparison against NumPy and loaderx 0.5.4 (JSON in
//!   `docs/bench/latest.json`); then `benches/typed.py`: the typed containers
//!   against loaderx 2.4.0 from `target/compat24-venv` (JSON in
//!   `docs/bench/typed.json`), `benches/field.py` and `benches/convert.py`
//!   (parallel conversion and collections, `docs/bench/convert.json`).
//!   `bench typed`, `bench field` and `bench convert` run one section. The
//!   docs' tables are regenerated from the kept runs
//!   (`benches/tables.py --write`).
//! * `fuzz [SECONDS]` — every fuzz target (each file in `fuzz/fuzz_targets/`)
//!   for SECONDS each (default 120) through `fuzz/run.sh`, under
//!   AddressSanitizer; `test` runs them for a few seconds each too.
//! * `stress [SCALE]` — the store's multi-process stress test and random
//!   power-loss histories, SCALE times longer than in `test` (default 30:
//!   about a minute; the stress test's store stays the same size, so the
//!   time grows linearly with SCALE).
//! * `cross-test [windows|aarch64|all]` — the test suites of
//!   `loaderx-format` and `loaderx-store` for `x86_64-pc-windows-gnu` under
//!   Wine and for `aarch64-unknown-linux-gnu` under qemu-user (installs the
//!   cross tools and Rust targets it needs, or says which are missing).
//! * `dist [--target NAME ...]` — the release artefacts in `target/dist/`:
//!   abi3 wheels for every platform that can be built here, and the sdist,
//!   each checked (tag, architecture, shared libraries, contents, metadata);
//!   the host wheel and the aarch64 one pass a smoke test in a fresh venv.
//!   `dist --host` builds and checks the host wheel only (what CI runs).
//! * `check-crates` — `cargo publish --dry-run` of the library crates and a
//!   scratch downstream crate on `loaderx-store` alone (no PyO3 in its tree).

#![forbid(unsafe_code)]

mod bench;
mod codecs;
mod crates;
mod cross;
mod dist;
mod fuzz;
mod python;
mod steps;
mod tools;

use std::env;
use std::process::ExitCode;

use steps::{Failure, Workspace};

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  test            fmt check, clippy, rustdoc, cargo tests (the `checked` profile:
                  optimised, debug assertions on, no LTO), Python package tests,
                  stubtest, benchmark-script smoke run, fuzz smoke run
  codecs          the codec feature checks alone: the no-C build of loaderx-store
                  (deflate-flate2,lz4) and its codec tests; libdeflate <-> flate2 stores
  demo            build the package, convert a synthetic dataset with every codec,
                  and time the DataLoader over each
  bench [all|typed|field|remote|convert|store|loader|smoke]
                  all (default): criterion benches, benches/compare.py (the
                  Python binding vs NumPy and loaderx 0.5.4), typed.py (typed
                  containers vs loaderx 2.4.0) and field.py (stores and loaders
                  of the field: HDF5, LMDB, Arrow, Parquet, ArrayRecord, Lance,
                  torch, Grain, jax-dataloader, each from its own venv under
                  target/), then remote.py (S3 on loopback through a latency
                  proxy: s3s-fs and moto; boto3, s3fs, obstore, Lance, MDS,
                  LitData) and convert.py (Ray, Spark, our converter, MDS and
                  LitData converting; 1,000-part collections against one
                  store); typed, field, remote or convert alone; store or
                  loader: field.py's section alone, printed only; smoke: every
                  script on tiny data. LOADERX_BENCH_SCALE=F scales field.py's,
                  remote.py's and convert.py's record counts. Keeps
                  the runs in docs/bench/*.json and regenerates the tables of
                  docs/BENCHMARKS.md and README.md from them
  fuzz [SECONDS]  run every fuzz target for SECONDS each (default 120);
                  installs cargo-fuzz if missing
  stress [SCALE]  the store's multi-process stress test and random power-loss
                  histories, SCALE times as long as in `test` (default 30)
  cross-test [windows|aarch64|all]
                  loaderx-format and loaderx-store tests for x86_64-pc-windows-gnu
                  under Wine and aarch64-unknown-linux-gnu under qemu-user
  dist [--host | --target NAME ...]
                  checked abi3 wheels for every platform buildable here, plus the
                  sdist, into target/dist/ (names: manylinux-x86_64,
                  manylinux-aarch64, musllinux-x86_64, musllinux-aarch64,
                  windows-x64, windows-arm64, macos-x86_64, macos-arm64, sdist);
                  --host: the host wheel only, checked and smoke-tested
  check-crates    cargo publish --dry-run of the library crates, and a scratch
                  crate on loaderx-store alone builds without PyO3

environment:
  PYTHON          interpreter used to create the venv (default: python3)
";

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let Some(command) = args.first() else {
        eprint!("{USAGE}");
        return ExitCode::from(2);
    };
    let rest = &args[1..];

    let result = match command.as_str() {
        "test" => no_args(command, rest).and_then(|()| run_test()),
        "demo" => no_args(command, rest).and_then(|()| run_demo()),
        "codecs" => no_args(command, rest).and_then(|()| {
            let ws = Workspace::locate()?;
            codecs::no_c_build(&ws)?;
            codecs::deflate_cross(&ws)
        }),
        "bench" => bench::Section::parse(rest).and_then(run_bench),
        "stress" => stress_scale(rest).and_then(run_stress),
        "fuzz" => fuzz::seconds(rest)
            .and_then(|s| Workspace::locate().and_then(|ws| fuzz::run_all(&ws, s))),
        "cross-test" => cross::platforms(rest)
            .and_then(|p| Workspace::locate().and_then(|ws| cross::run(&ws, &p))),
        "dist" => dist::Selection::parse(rest)
            .and_then(|sel| Workspace::locate().and_then(|ws| dist::run(&ws, &sel))),
        "check-crates" => no_args(command, rest)
            .and_then(|()| Workspace::locate().and_then(|ws| crates::check(&ws))),
        "help" | "-h" | "--help" => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        other => {
            eprintln!("xtask: unknown command `{other}`\n");
            eprint!("{USAGE}");
            return ExitCode::from(2);
        }
    };

    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("\nxtask {command}: FAILED at step `{}`", failure.step);
            eprintln!("  {}", failure.reason);
            ExitCode::FAILURE
        }
    }
}

fn no_args(command: &str, rest: &[String]) -> Result<(), Failure> {
    if rest.is_empty() {
        Ok(())
    } else {
        Err(Failure::new(
            "arguments",
            format!("`{command}` takes no arguments, got {rest:?}"),
        ))
    }
}

fn run_test() -> Result<(), Failure> {
    let ws = Workspace::locate()?;
    ws.cargo("cargo fmt --check", &["fmt", "--all", "--", "--check"])?;
    ws.cargo(
        "cargo clippy",
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
    )?;
    library_docs(&ws)?;
    ws.cargo(
        "cargo test --workspace --profile checked",
        &["test", "--workspace", "--profile", steps::TEST_PROFILE],
    )?;
    codecs::no_c_build(&ws)?;
    codecs::deflate_cross(&ws)?;
    let venv = python::ensure_venv(&ws)?;
    python::develop(&ws, &venv)?;
    python::pytest(&ws, &venv)?;
    python::api28_reference(&ws, &venv)?;
    python::stubtest(&ws, &venv)?;
    bench::smoke(&ws, &venv)?;
    if cfg!(target_os = "linux") {
        fuzz::run_all(&ws, fuzz::SMOKE_SECONDS)?;
    } else {
        println!(
            "--- fuzz smoke run skipped: fuzz/run.sh (bash, AddressSanitizer through \
             RUSTC_BOOTSTRAP) is set up for Linux only"
        );
    }
    steps::banner("xtask test: all steps passed");
    Ok(())
}

/// `cargo <command> -p <each library crate> <rest>`: the crates other code
/// builds on (the ones published to crates.io).
fn library_args<'a>(command: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![command];
    for krate in crates::PUBLISHED {
        args.extend_from_slice(&["-p", krate]);
    }
    args.extend_from_slice(rest);
    args
}

/// `cargo doc --no-deps` of the library crates, private items included, with
/// rustdoc warnings (broken intra-doc links, bad code blocks) as errors.
fn library_docs(ws: &Workspace) -> Result<(), Failure> {
    let mut cmd = ws.cargo_command(&library_args(
        "doc",
        &["--no-deps", "--document-private-items"],
    ));
    cmd.env("RUSTDOCFLAGS", "-D warnings");
    steps::run(
        "cargo doc (library crates, RUSTDOCFLAGS=-D warnings)",
        &mut cmd,
    )
}

fn run_demo() -> Result<(), Failure> {
    let ws = Workspace::locate()?;
    let venv = python::ensure_venv(&ws)?;
    python::develop(&ws, &venv)?;
    python::demo(&ws, &venv)?;
    steps::banner("xtask demo: done");
    Ok(())
}

/// The store tests whose length `LOADERX_STRESS_SCALE` multiplies.
const STRESS_TESTS: &[&str] = &["multiprocess", "powerloss"];

fn stress_scale(rest: &[String]) -> Result<u32, Failure> {
    match rest {
        [] => Ok(30),
        [n] => n.parse().map_err(|_| {
            Failure::new(
                "arguments",
                format!("`stress` takes a whole number, got {n:?}"),
            )
        }),
        _ => Err(Failure::new(
            "arguments",
            format!("`stress` takes at most one argument, got {rest:?}"),
        )),
    }
}

fn run_stress(scale: u32) -> Result<(), Failure> {
    let ws = Workspace::locate()?;
    let mut args = vec!["test", "-p", "loaderx-store", "--release"];
    for test in STRESS_TESTS {
        args.extend_from_slice(&["--test", test]);
    }
    args.extend_from_slice(&["--", "--nocapture"]);
    let mut cmd = ws.cargo_command(&args);
    cmd.env("LOADERX_STRESS_SCALE", scale.to_string());
    steps::run(&format!("store stress tests at scale {scale}"), &mut cmd)?;
    steps::banner("xtask stress: done");
    Ok(())
}

fn run_bench(section: bench::Section) -> Result<(), Failure> {
    let ws = Workspace::locate()?;
    let venv = python::ensure_venv(&ws)?;
    python::develop(&ws, &venv)?;
    bench::run(&ws, &venv, section)?;
    steps::banner("xtask bench: done");
    Ok(())
}
