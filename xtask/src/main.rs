//! `cargo xtask <command>`: the project's own build, test and demo driver.
//!
//! Plain std Rust on purpose: it must build in seconds on a fresh clone and
//! never needs anything beyond the Rust toolchain and a Python 3.9+ on `PATH`.
//! Everything Python-side (maturin, NumPy, pytest, mypy) is installed by this
//! tool into `<repo>/.venv`, created on first use and reused afterwards.
//!
//! Commands:
//! * `test`  — fmt check, clippy, `cargo test --workspace --release`, then the
//!   Python package built into the venv, its pytest suite and `mypy.stubtest`.
//! * `demo`  — build the package, make a synthetic image-like dataset, convert
//!   it with every codec and time the `DataLoader` over each.
//! * `bench` — build the package, make sure `target/compat-venv` holds the
//!   original loaderx 0.5.4, run the criterion benches (`loaderx-benches`),
//!   then `benches/compare.py all`: the Python-side comparison against NumPy
//!   and loaderx 0.5.4, as markdown tables (JSON under `target/bench-data`).
//! * `fuzz [SECONDS]` — every fuzz target for SECONDS each (default 120)
//!   through `fuzz/run.sh`; `test` runs them for a few seconds each too.
//! * `dist` — not yet available (exit 2).

#![forbid(unsafe_code)]

mod fuzz;
mod python;
mod steps;

use std::env;
use std::path::PathBuf;
use std::process::ExitCode;

use python::Venv;
use steps::{Failure, Workspace};

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  test            fmt check, clippy, cargo tests, Python package tests, stubtest
  demo            build the package, convert a synthetic dataset with every codec,
                  and time the DataLoader over each
  bench           criterion benches, then benches/compare.py: the Python binding
                  side by side with NumPy and loaderx 0.5.4 (target/compat-venv)
  fuzz [SECONDS]  run every fuzz target for SECONDS each (default 120);
                  installs cargo-fuzz if missing
  dist            (not yet available)

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
        "bench" => no_args(command, rest).and_then(|()| run_bench()),
        "fuzz" => fuzz::seconds(rest)
            .and_then(|s| Workspace::locate().and_then(|ws| fuzz::run_all(&ws, s))),
        "dist" => return not_yet(command),
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

/// `dist` is a placeholder until its owner lands it.
fn not_yet(command: &str) -> ExitCode {
    eprintln!("xtask {command}: not yet available (placeholder; nothing was run)");
    ExitCode::from(2)
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
    ws.cargo("cargo test", &["test", "--workspace", "--release"])?;
    let venv = python::ensure_venv(&ws)?;
    python::develop(&ws, &venv)?;
    python::pytest(&ws, &venv)?;
    python::stubtest(&ws, &venv)?;
    fuzz::run_all(&ws, fuzz::SMOKE_SECONDS)?;
    steps::banner("xtask test: all steps passed");
    Ok(())
}

fn run_demo() -> Result<(), Failure> {
    let ws = Workspace::locate()?;
    let venv = python::ensure_venv(&ws)?;
    python::develop(&ws, &venv)?;
    python::demo(&ws, &venv)?;
    steps::banner("xtask demo: done");
    Ok(())
}

fn run_bench() -> Result<(), Failure> {
    let ws = Workspace::locate()?;
    let venv = python::ensure_venv(&ws)?;
    python::develop(&ws, &venv)?;
    let original = ensure_compat_venv(&ws, &venv)?;
    criterion(&ws)?;
    compare(&ws, &venv, &original)?;
    steps::banner("xtask bench: done");
    Ok(())
}

/// The original release, which `compare.py` measures side by side with ours.
const ORIGINAL: &str = "loaderx==0.5.4";
const ORIGINAL_VERSION: &str = "0.5.4";

/// The criterion bench targets of `loaderx-benches`. Named one by one: a bare
/// `cargo bench -p loaderx-benches` (or `--benches`) also runs the library's
/// libtest harness, which rejects criterion's options.
const CRITERION_BENCHES: &[&str] = &["store", "sampler", "loader"];

/// Criterion options for `cargo xtask bench`: short runs, the whole suite in
/// a few minutes on two cores.
const CRITERION_ARGS: &[&str] = &["--warm-up-time", "1", "--measurement-time", "3"];

/// `<target>/compat-venv` holding loaderx 0.5.4 and NumPy, created from the
/// project venv's interpreter when missing. Kept apart from `.venv`: both
/// packages are called `loaderx`.
fn ensure_compat_venv(ws: &Workspace, venv: &Venv) -> Result<Venv, Failure> {
    const STEP: &str = "compat venv (loaderx 0.5.4)";
    let compat = venv_at(ws.target_dir().join("compat-venv"));
    if original_version(&compat).as_deref() == Some(ORIGINAL_VERSION) {
        println!("--- {STEP}: {} has {ORIGINAL}", compat.dir.display());
        return Ok(compat);
    }
    if steps::capture(compat.python().args(["-c", "import sys"])).is_none() {
        let mut cmd = venv.python();
        cmd.args(["-m", "venv", "--clear"]).arg(&compat.dir);
        steps::run("create target/compat-venv", &mut cmd)?;
    }
    let mut cmd = compat.python();
    cmd.args(["-m", "pip", "install", "--quiet", ORIGINAL, "numpy"]);
    steps::run(
        "pip install loaderx==0.5.4 numpy into target/compat-venv",
        &mut cmd,
    )?;
    match original_version(&compat) {
        Some(v) if v == ORIGINAL_VERSION => Ok(compat),
        found => Err(Failure::new(
            STEP,
            format!(
                "{} imports loaderx {} after installing {ORIGINAL}",
                compat.python.display(),
                found.as_deref().unwrap_or("(none)")
            ),
        )),
    }
}

/// A venv at `dir` (its interpreter laid out as `python::Venv` expects).
fn venv_at(dir: PathBuf) -> Venv {
    let python = if cfg!(windows) {
        dir.join("Scripts").join("python.exe")
    } else {
        dir.join("bin").join("python")
    };
    Venv { dir, python }
}

/// The loaderx version `venv` imports (with NumPy importable too), if any.
fn original_version(venv: &Venv) -> Option<String> {
    let probe = "import numpy, loaderx; print(loaderx.__version__)";
    steps::capture(venv.python().args(["-c", probe])).map(|out| out.trim().to_owned())
}

/// The Rust-layer benches: store, sampler and loader (criterion).
fn criterion(ws: &Workspace) -> Result<(), Failure> {
    let mut args = vec!["bench", "-p", "loaderx-benches"];
    for bench in CRITERION_BENCHES {
        args.extend_from_slice(&["--bench", bench]);
    }
    args.push("--");
    args.extend_from_slice(CRITERION_ARGS);
    ws.cargo("cargo bench -p loaderx-benches (criterion)", &args)
}

/// The Python-side comparison: ours against NumPy and loaderx 0.5.4, one run.
fn compare(ws: &Workspace, venv: &Venv, original: &Venv) -> Result<(), Failure> {
    let data = ws.target_dir().join("bench-data");
    let mut cmd = venv.python();
    cmd.arg(ws.root.join("benches").join("compare.py"))
        .arg("all")
        .arg("--original-python")
        .arg(&original.python)
        .arg("--data-dir")
        .arg(&data)
        .arg("--json")
        .arg(data.join("compare.json"))
        .current_dir(&ws.root);
    steps::run(
        "benches/compare.py all (vs NumPy and loaderx 0.5.4)",
        &mut cmd,
    )
}
