//! `cargo xtask bench`: the criterion benches of the Rust layer, then
//! `benches/compare.py all`, the Python binding side by side with NumPy and
//! the original loaderx 0.5.4 (installed into `<target>/compat-venv`). The
//! run is kept whole in `docs/bench/latest.json` (compare.py's result plus
//! the criterion estimates), and `benches/tables.py --write` regenerates
//! every table of `docs/BENCHMARKS.md` and the figures of `README.md` from
//! it, so the docs quote exactly one run of the current code.
//!
//! `cargo xtask test` runs [`smoke`]: the same scripts on tiny data, which
//! checks that they work, not how fast anything is.

use std::fs;
use std::path::PathBuf;

use crate::python::Venv;
use crate::steps::{self, Failure, Workspace};

/// Where a run's raw JSON is kept, relative to the workspace root.
const RUN_JSON: &str = "docs/bench/latest.json";

/// Runs the whole pipeline; the package is already built into `venv`.
pub fn run(ws: &Workspace, venv: &Venv) -> Result<(), Failure> {
    let original = ensure_compat_venv(ws, venv)?;
    criterion(ws)?;
    compare(ws, venv, &original)?;
    tables(ws, venv, &ws.root.join(RUN_JSON), true)
}

/// `compare.py all --smoke`, then its tables printed (not written): seconds.
pub fn smoke(ws: &Workspace, venv: &Venv) -> Result<(), Failure> {
    let json = ws.target_dir().join("bench-smoke").join("smoke.json");
    let mut cmd = venv.python();
    cmd.arg(ws.root.join("benches").join("compare.py"))
        .args(["all", "--smoke", "--json"])
        .arg(&json)
        .current_dir(&ws.root);
    steps::run("benches/compare.py all --smoke", &mut cmd)?;
    tables(ws, venv, &json, false)
}

/// `benches/tables.py JSON`: print the tables of a run, or (`write`) put them
/// into the docs' generated blocks.
fn tables(ws: &Workspace, venv: &Venv, json: &std::path::Path, write: bool) -> Result<(), Failure> {
    let mut cmd = venv.python();
    cmd.arg(ws.root.join("benches").join("tables.py"))
        .arg(json)
        .current_dir(&ws.root);
    if write {
        cmd.arg("--write");
    }
    let name = if write {
        "benches/tables.py --write (docs/BENCHMARKS.md, README.md)"
    } else {
        "benches/tables.py (render only)"
    };
    steps::run(name, &mut cmd)
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

/// The Rust-layer benches: store, sampler and loader (criterion). Earlier
/// results are removed first, so that what is collected afterwards is this
/// run and nothing else.
fn criterion(ws: &Workspace) -> Result<(), Failure> {
    let results = ws.target_dir().join("criterion");
    if results.exists() {
        fs::remove_dir_all(&results).map_err(|e| {
            Failure::new(
                "clear old criterion results",
                format!("{}: {e}", results.display()),
            )
        })?;
    }
    let mut args = vec!["bench", "-p", "loaderx-benches"];
    for bench in CRITERION_BENCHES {
        args.extend_from_slice(&["--bench", bench]);
    }
    args.push("--");
    args.extend_from_slice(CRITERION_ARGS);
    ws.cargo("cargo bench -p loaderx-benches (criterion)", &args)
}

/// The Python-side comparison: ours against NumPy and loaderx 0.5.4, one run,
/// saved with the criterion estimates as the run's JSON.
fn compare(ws: &Workspace, venv: &Venv, original: &Venv) -> Result<(), Failure> {
    let data = ws.target_dir().join("bench-data");
    let mut cmd = venv.python();
    cmd.arg(ws.root.join("benches").join("compare.py"))
        .arg("all")
        .arg("--original-python")
        .arg(&original.python)
        .arg("--data-dir")
        .arg(&data)
        .arg("--criterion-dir")
        .arg(ws.target_dir().join("criterion"))
        .arg("--json")
        .arg(ws.root.join(RUN_JSON))
        .current_dir(&ws.root);
    steps::run(
        "benches/compare.py all (vs NumPy and loaderx 0.5.4)",
        &mut cmd,
    )
}
