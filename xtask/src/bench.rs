//! `cargo xtask bench [all|typed]`.
//!
//! `all` (the default): the criterion benches of the Rust layer, then
//! `benches/compare.py all`, the Python binding side by side with NumPy and
//! the original loaderx 0.5.4 (installed into `<target>/compat-venv`), then
//! the `typed` section. `typed`: `benches/typed.py` alone, the typed
//! containers (format v2) side by side with loaderx 2.4.0 (installed into
//! `<target>/compat24-venv`; when that cannot be made, the run goes on with
//! ours alone and its tables say why 2.4.0 is missing).
//!
//! compare.py's run is kept in `docs/bench/latest.json` (with the criterion
//! estimates) and typed.py's in `docs/bench/typed.json`; `benches/tables.py
//! --write` regenerates every table of `docs/BENCHMARKS.md` and the figures
//! of `README.md` from those two files, so the docs quote exactly one run of
//! each.
//!
//! `cargo xtask test` runs [`smoke`]: the same scripts on tiny data, which
//! checks that they work, not how fast anything is. It never installs
//! anything: without `<target>/compat24-venv` typed.py reports 2.4.0 missing.

use std::fs;
use std::path::PathBuf;

use crate::python::Venv;
use crate::steps::{self, Failure, Workspace};

/// Where compare.py's run is kept, relative to the workspace root.
const RUN_JSON: &str = "docs/bench/latest.json";

/// Where typed.py's run is kept, relative to the workspace root.
const TYPED_JSON: &str = "docs/bench/typed.json";

/// What `cargo xtask bench` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Section {
    /// Criterion, compare.py and typed.py.
    All,
    /// typed.py only.
    Typed,
}

impl Section {
    /// The section named by `bench`'s arguments (none: `all`).
    pub fn parse(rest: &[String]) -> Result<Self, Failure> {
        match rest {
            [] => Ok(Self::All),
            [one] if one == "all" => Ok(Self::All),
            [one] if one == "typed" => Ok(Self::Typed),
            _ => Err(Failure::new(
                "arguments",
                format!("`bench` takes `all` (the default) or `typed`, got {rest:?}"),
            )),
        }
    }
}

/// Runs `section`; the package is already built into `venv`.
pub fn run(ws: &Workspace, venv: &Venv, section: Section) -> Result<(), Failure> {
    if section == Section::All {
        let original = ensure_compat_venv(ws, venv, &ORIGINAL_054)?;
        criterion(ws)?;
        compare(ws, venv, &original)?;
    }
    let original24 = ensure_compat_venv(ws, venv, &ORIGINAL_24).map_err(|failure| {
        println!(
            "--- warning: {}: {}; typed.py runs without loaderx 2.4.0",
            failure.step, failure.reason
        );
        failure.reason
    });
    typed(ws, venv, original24)?;
    tables(
        ws,
        venv,
        &[ws.root.join(RUN_JSON), ws.root.join(TYPED_JSON)],
        true,
    )
}

/// `compare.py all --smoke` and `typed.py --smoke`, then their tables
/// printed (not written): seconds.
pub fn smoke(ws: &Workspace, venv: &Venv) -> Result<(), Failure> {
    let dir = ws.target_dir().join("bench-smoke");
    let json = dir.join("smoke.json");
    let mut cmd = venv.python();
    cmd.arg(ws.root.join("benches").join("compare.py"))
        .args(["all", "--smoke", "--json"])
        .arg(&json)
        .current_dir(&ws.root);
    steps::run("benches/compare.py all --smoke", &mut cmd)?;
    let typed_json = dir.join("typed-smoke.json");
    let mut cmd = venv.python();
    cmd.arg(ws.root.join("benches").join("typed.py"))
        .args(["--smoke", "--json"])
        .arg(&typed_json)
        .current_dir(&ws.root);
    steps::run(
        "benches/typed.py --smoke (2.4.0 only if <target>/compat24-venv exists)",
        &mut cmd,
    )?;
    let mut cmd = venv.python();
    cmd.arg(ws.root.join("benches").join("images.py"))
        .arg("--smoke")
        .current_dir(&ws.root);
    steps::run("benches/images.py --smoke", &mut cmd)?;
    tables(ws, venv, &[json, typed_json], false)
}

/// `benches/tables.py JSON...`: print the tables of the runs, or (`write`)
/// put them into the docs' generated blocks.
fn tables(ws: &Workspace, venv: &Venv, jsons: &[PathBuf], write: bool) -> Result<(), Failure> {
    let mut cmd = venv.python();
    cmd.arg(ws.root.join("benches").join("tables.py"))
        .args(jsons)
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

/// An original release measured side by side with ours, and the venv under
/// the target directory that holds it.
struct Original {
    /// pip requirement.
    spec: &'static str,
    /// What `loaderx.__version__` must be.
    version: &'static str,
    /// Directory under the target directory.
    venv: &'static str,
}

/// The 0.5.x release `compare.py` measures.
const ORIGINAL_054: Original = Original {
    spec: "loaderx==0.5.4",
    version: "0.5.4",
    venv: "compat-venv",
};

/// The 2.x release `typed.py` measures.
const ORIGINAL_24: Original = Original {
    spec: "loaderx==2.4.0",
    version: "2.4.0",
    venv: "compat24-venv",
};

/// The criterion bench targets of `loaderx-benches`. Named one by one: a bare
/// `cargo bench -p loaderx-benches` (or `--benches`) also runs the library's
/// libtest harness, which rejects criterion's options.
const CRITERION_BENCHES: &[&str] = &["store", "sampler", "loader"];

/// Criterion options for `cargo xtask bench`: short runs, the whole suite in
/// a few minutes on two cores.
const CRITERION_ARGS: &[&str] = &["--warm-up-time", "1", "--measurement-time", "3"];

/// `<target>/<original.venv>` holding the original release and NumPy,
/// created from the project venv's interpreter when missing. Kept apart from
/// `.venv`: every one of these packages is called `loaderx`.
fn ensure_compat_venv(ws: &Workspace, venv: &Venv, original: &Original) -> Result<Venv, Failure> {
    let Original {
        spec,
        version,
        venv: name,
    } = original;
    let step = format!("compat venv ({spec})");
    let compat = venv_at(ws.target_dir().join(name));
    if original_version(&compat).as_deref() == Some(*version) {
        println!("--- {step}: {} has {spec}", compat.dir.display());
        return Ok(compat);
    }
    if steps::capture(compat.python().args(["-c", "import sys"])).is_none() {
        let mut cmd = venv.python();
        cmd.args(["-m", "venv", "--clear"]).arg(&compat.dir);
        steps::run(&format!("create target/{name}"), &mut cmd)?;
    }
    let mut cmd = compat.python();
    cmd.args(["-m", "pip", "install", "--quiet", spec, "numpy"]);
    steps::run(
        &format!("pip install {spec} numpy into target/{name}"),
        &mut cmd,
    )?;
    match original_version(&compat) {
        Some(v) if v == *version => Ok(compat),
        found => Err(Failure::new(
            step,
            format!(
                "{} imports loaderx {} after installing {spec}",
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

/// typed.py: our typed containers against loaderx 2.4.0 (`original`, or the
/// reason it is missing), saved as the typed run's JSON.
fn typed(ws: &Workspace, venv: &Venv, original: Result<Venv, String>) -> Result<(), Failure> {
    let mut cmd = venv.python();
    cmd.arg(ws.root.join("benches").join("typed.py"));
    match &original {
        Ok(original) => cmd.arg("--original-python").arg(&original.python),
        Err(reason) => cmd.arg("--original-missing").arg(reason),
    };
    cmd.arg("--data-dir")
        .arg(ws.target_dir().join("bench-typed"))
        .arg("--json")
        .arg(ws.root.join(TYPED_JSON))
        .current_dir(&ws.root);
    steps::run(
        "benches/typed.py (typed containers vs loaderx 2.4.0)",
        &mut cmd,
    )
}
