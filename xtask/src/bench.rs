//! `cargo xtask bench [all|typed|field|remote|convert|store|loader|smoke]`.
//!
//! `all` (the default): the criterion benches of the Rust layer, then
//! `benches/compare.py all`, the Python binding side by side with NumPy and
//! the original loaderx 0.5.4 (installed into `<target>/compat-venv`), then
//! the `typed`, `field`, `remote` and `convert` sections. `typed`:
//! `benches/typed.py` alone, the typed containers (format v2) side by side
//! with loaderx 2.4.0 (installed into `<target>/compat24-venv`) and 2.8.19
//! (`<target>/compat28-venv`); when one cannot be made, the run goes on
//! without it and its tables say why it is missing. `field`:
//! `benches/field.py`, every store and loader of the field side by side (the contenders installed by
//! `benches/field_env.py` into `<target>/bench-venv-<hash of
//! benches/field-requirements.txt>`, once; one that fails to install is
//! reported missing with pip's reason), then its PNG figures
//! (`docs/img/field-*.png`). `store` and `loader`: one half of `field`,
//! printed and kept under `<target>/bench-field/`, the docs untouched.
//! `remote`: `benches/remote.py`, stores read from S3 servers on loopback
//! behind a latency proxy (0 and 25 ms), ours against boto3, s3fs,
//! obstore, Lance, MosaicML Streaming and LitData (installed by
//! `benches/field_env.py` into `<target>/remote-venv-<hash of
//! benches/remote-requirements.txt>`), served by `s3s-fs` (`S3S_FS`,
//! installed into `<target>/s3s-fs` by `cargo install` when missing; when
//! it cannot be built the run goes on with moto alone and says why).
//! `convert`: `benches/convert.py`, Ray Data, Spark and our converter
//! converting the field's img224 and tokens records against MosaicML
//! Streaming and LitData (installed by `benches/field_env.py` into
//! `<target>/convert-venv-<hash of benches/convert-requirements.txt>`),
//! then a 1,000-part collection read against one store.
//! The scripts remove the stores they wrote when they end (tens of GiB at
//! scale 1) and keep only their generated sources.
//! `smoke`: what `cargo xtask test` runs (below). `LOADERX_BENCH_SCALE=F`
//! multiplies field.py's, remote.py's and convert.py's record counts (default 1: the
//! publication run, about 2 GiB of sources; 0.1 for a quick look, its
//! tables say so).
//!
//! compare.py's run is kept in `docs/bench/latest.json` (with the criterion
//! estimates), typed.py's in `docs/bench/typed.json`, field.py's in
//! `docs/bench/field.json`, remote.py's in `docs/bench/remote.json` and
//! convert.py's in `docs/bench/convert.json`; `benches/tables.py --write`
//! regenerates every table of `docs/BENCHMARKS.md`, the figures of
//! `README.md` and the full reports
//! `docs/bench/{typed,field,remote,convert}.md` from those files, so the docs quote
//! exactly one run of each.
//!
//! `cargo xtask test` runs [`smoke`]: the same scripts on tiny data, which
//! checks that they work, not how fast anything is. It never installs
//! anything: without `<target>/compat24-venv` typed.py reports 2.4.0 missing,
//! and field.py, remote.py and convert.py measure the venvs (and the
//! s3s-fs binary) that exist (on a fresh clone, ours alone, remote.py over
//! moto) and report the others missing.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::python::Venv;
use crate::steps::{self, Failure, Workspace};

/// Where compare.py's run is kept, relative to the workspace root.
const RUN_JSON: &str = "docs/bench/latest.json";

/// Where typed.py's run is kept, relative to the workspace root.
const TYPED_JSON: &str = "docs/bench/typed.json";

/// Where field.py's run is kept, relative to the workspace root.
const FIELD_JSON: &str = "docs/bench/field.json";

/// Where convert.py's run is kept, relative to the workspace root.
const CONVERT_JSON: &str = "docs/bench/convert.json";

/// The bench venv's requirements, relative to the workspace root.
const FIELD_REQUIREMENTS: &str = "benches/field-requirements.txt";

/// Where remote.py's run is kept, relative to the workspace root.
const REMOTE_JSON: &str = "docs/bench/remote.json";

/// The remote bench venv's requirements, relative to the workspace root.
const REMOTE_REQUIREMENTS: &str = "benches/remote-requirements.txt";

/// The S3 server remote.py measures throughput against: a crate whose
/// binary serves a directory. 0.14.1 is the last release that builds on the
/// project's Rust; `cargo install` puts it under `<target>/s3s-fs`.
const S3S_FS: (&str, &str) = ("s3s-fs", "0.14.1");
/// The requirements of convert.py's contender venv (MDS, LitData),
/// relative to the workspace root.
const CONVERT_REQUIREMENTS: &str = "benches/convert-requirements.txt";

/// Where field.py's figures go, relative to the workspace root.
const FIELD_IMG: &str = "docs/img";

/// What `cargo xtask bench` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Section {
    /// Criterion, compare.py, typed.py and field.py.
    All,
    /// typed.py only.
    Typed,
    /// field.py only (stores and loaders), kept and written into the docs.
    Field,
    /// remote.py only (S3 on loopback), kept and written into the docs.
    Remote,
    /// convert.py only (conversion and collections), kept and written into
    /// the docs.
    Convert,
    /// field.py's store section only, printed.
    Store,
    /// field.py's loader section only, printed.
    Loader,
    /// The smoke run of every script (what `cargo xtask test` runs).
    Smoke,
}

impl Section {
    /// The section named by `bench`'s arguments (none: `all`).
    pub fn parse(rest: &[String]) -> Result<Self, Failure> {
        match rest {
            [] => Ok(Self::All),
            [one] => match one.as_str() {
                "all" => Ok(Self::All),
                "typed" => Ok(Self::Typed),
                "field" => Ok(Self::Field),
                "remote" => Ok(Self::Remote),
                "convert" => Ok(Self::Convert),
                "store" => Ok(Self::Store),
                "loader" => Ok(Self::Loader),
                "smoke" => Ok(Self::Smoke),
                _ => Err(Self::usage(rest)),
            },
            _ => Err(Self::usage(rest)),
        }
    }

    fn usage(rest: &[String]) -> Failure {
        Failure::new(
            "arguments",
            format!(
                "`bench` takes one of all (the default), typed, field, remote, convert, store, \
                 loader, smoke; got {rest:?}"
            ),
        )
    }
}

/// Runs `section`; the package is already built into `venv`.
pub fn run(ws: &Workspace, venv: &Venv, section: Section) -> Result<(), Failure> {
    match section {
        Section::Smoke => return smoke(ws, venv),
        Section::Store | Section::Loader => {
            let name = if section == Section::Store {
                "store"
            } else {
                "loader"
            };
            let json = ws
                .target_dir()
                .join("bench-field")
                .join(format!("{name}.json"));
            return field(ws, venv, &[name], &json);
        }
        Section::Field => {
            field(ws, venv, &["store", "loader"], &ws.root.join(FIELD_JSON))?;
            // The other blocks of the docs come from the kept runs.
            return tables(ws, venv, &kept_runs(ws), true);
        }
        Section::Remote => {
            remote(ws, venv)?;
            return tables(ws, venv, &kept_runs(ws), true);
        }
        Section::Convert => {
            convert(ws, venv, &ws.root.join(CONVERT_JSON))?;
            return tables(ws, venv, &kept_runs(ws), true);
        }
        Section::All | Section::Typed => {}
    }
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
    let original28 = crate::python::ensure_compat28(ws, venv).map_err(|failure| {
        println!(
            "--- warning: {}: {}; typed.py runs without loaderx 2.8.19",
            failure.step, failure.reason
        );
        failure.reason
    });
    typed(ws, venv, original24, original28)?;
    if section == Section::All {
        field(ws, venv, &["store", "loader"], &ws.root.join(FIELD_JSON))?;
        remote(ws, venv)?;
        convert(ws, venv, &ws.root.join(CONVERT_JSON))?;
    }
    // Every block of the docs is rewritten, so `typed` too passes the kept
    // runs of the sections it did not measure.
    tables(ws, venv, &kept_runs(ws), true)
}

/// The kept runs every generated block of the docs comes from.
fn kept_runs(ws: &Workspace) -> [PathBuf; 5] {
    [RUN_JSON, TYPED_JSON, FIELD_JSON, REMOTE_JSON, CONVERT_JSON].map(|j| ws.root.join(j))
}

/// Every script with `--smoke` (compare.py, typed.py, field.py, images.py,
/// convert.py; field.py's figures where the bench venv exists), then their
/// tables printed (not written): seconds.
pub fn smoke(ws: &Workspace, venv: &Venv) -> Result<(), Failure> {
    let dir = ws.target_dir().join("bench-smoke");
    let json = dir.join("smoke.json");
    let mut cmd = script(ws, venv.python(), "compare.py");
    cmd.args(["all", "--smoke", "--json"]).arg(&json);
    steps::run("benches/compare.py all --smoke", &mut cmd)?;
    let (mut cmd, typed_json) = smoke_script(ws, venv, &dir, "typed");
    steps::run(
        "benches/typed.py --smoke (2.4.0 only if <target>/compat24-venv exists)",
        &mut cmd,
    )?;
    let (mut cmd, field_json) = smoke_script(ws, venv, &dir, "field");
    let bench_venv = existing_venv(requirements_venv_dir(ws, FIELD_REQUIREMENTS, "bench-venv")?);
    for (flag, python) in [
        (
            "--v054-python",
            existing_venv(ws.target_dir().join(ORIGINAL_054.venv)),
        ),
        (
            "--v240-python",
            existing_venv(ws.target_dir().join(ORIGINAL_24.venv)),
        ),
        (
            "--v2819-python",
            existing_venv(ws.target_dir().join(COMPAT28_VENV)),
        ),
        ("--field-python", bench_venv.clone()),
    ] {
        if let Some(python) = python {
            cmd.arg(flag).arg(python);
        }
    }
    steps::run(
        "benches/field.py --smoke (the other contenders only where their venvs exist)",
        &mut cmd,
    )?;
    if let Some(python) = bench_venv {
        plots(ws, &python, &field_json, &dir.join("img"))?;
    }
    let mut cmd = script(ws, venv.python(), "images.py");
    cmd.arg("--smoke");
    steps::run("benches/images.py --smoke", &mut cmd)?;
    let (mut cmd, remote_json) = smoke_script(ws, venv, &dir, "remote");
    if let Some(python) = existing_venv(requirements_venv_dir(
        ws,
        REMOTE_REQUIREMENTS,
        "remote-venv",
    )?) {
        cmd.arg("--field-python").arg(python);
    }
    let s3s_fs = s3s_fs_binary(ws);
    if s3s_fs.exists() {
        cmd.arg("--s3s-fs").arg(s3s_fs);
    }
    steps::run(
        "benches/remote.py --smoke (s3s-fs and the remote bench venv only where they exist)",
        &mut cmd,
    )?;
    let (mut cmd, convert_json) = smoke_script(ws, venv, &dir, "convert");
    if let Some(python) = existing_venv(requirements_venv_dir(
        ws,
        CONVERT_REQUIREMENTS,
        "convert-venv",
    )?) {
        cmd.arg("--contender-python").arg(python);
    }
    steps::run(
        "benches/convert.py --smoke (MDS and LitData only if their venv exists)",
        &mut cmd,
    )?;
    tables(
        ws,
        venv,
        &[json, typed_json, field_json, remote_json, convert_json],
        false,
    )
}

/// `python benches/NAME`, run from the workspace root.
fn script(ws: &Workspace, mut python: Command, name: &str) -> Command {
    python
        .arg(ws.root.join("benches").join(name))
        .current_dir(&ws.root);
    python
}

/// `benches/NAME.py --smoke`, its data under `<target>/bench-NAME-smoke` and
/// its run saved as `<dir>/NAME-smoke.json` (returned with the command).
fn smoke_script(ws: &Workspace, venv: &Venv, dir: &Path, name: &str) -> (Command, PathBuf) {
    let json = dir.join(format!("{name}-smoke.json"));
    let mut cmd = script(ws, venv.python(), &format!("{name}.py"));
    cmd.arg("--smoke");
    keep_run(
        &mut cmd,
        &ws.target_dir().join(format!("bench-{name}-smoke")),
        &json,
    );
    (cmd, json)
}

/// The interpreter of the venv at `dir`, if that venv exists.
fn existing_venv(dir: PathBuf) -> Option<PathBuf> {
    let python = Venv::at(dir).python;
    python.exists().then_some(python)
}

/// A script's `--data-dir` (its stores) and `--json` (its run).
fn keep_run(cmd: &mut Command, data: &Path, json: &Path) {
    cmd.arg("--data-dir").arg(data).arg("--json").arg(json);
}

/// `<target>/<prefix>-<hash>`: the contender venv of the current
/// `requirements` file (FNV-1a of its bytes, so an edit makes a new venv).
fn requirements_venv_dir(
    ws: &Workspace,
    requirements: &str,
    prefix: &str,
) -> Result<PathBuf, Failure> {
    let path = ws.root.join(requirements);
    let bytes = fs::read(&path)
        .map_err(|e| Failure::new(prefix.to_owned(), format!("{}: {e}", path.display())))?;
    let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    Ok(ws.target_dir().join(format!("{prefix}-{hash:016x}")))
}

/// A contender venv of `requirements`, made by `benches/field_env.py` when
/// it is not complete: its interpreter, or why there is none (the script
/// then reports every contender of the venv missing).
fn ensure_requirements_venv(
    ws: &Workspace,
    venv: &Venv,
    requirements: &str,
    prefix: &str,
) -> Result<Venv, String> {
    let dir = requirements_venv_dir(ws, requirements, prefix).map_err(|f| f.reason)?;
    let mut cmd = script(ws, venv.python(), "field_env.py");
    cmd.arg(&dir).arg(ws.root.join(requirements));
    steps::run(
        &format!("benches/field_env.py (target/{prefix}-*: one pip install per contender, once)"),
        &mut cmd,
    )
    .map_err(|f| f.reason)?;
    Ok(Venv::at(dir))
}

/// `<target>/s3s-fs/bin/s3s-fs`, where [`ensure_s3s_fs`] installs it.
fn s3s_fs_binary(ws: &Workspace) -> PathBuf {
    let exe = if cfg!(windows) {
        "s3s-fs.exe"
    } else {
        "s3s-fs"
    };
    ws.target_dir().join("s3s-fs").join("bin").join(exe)
}

/// The s3s-fs binary (`S3S_FS`), installed by `cargo install --root
/// <target>/s3s-fs` when missing: its path, or why there is none.
fn ensure_s3s_fs(ws: &Workspace) -> Result<PathBuf, String> {
    let binary = s3s_fs_binary(ws);
    if binary.exists() {
        return Ok(binary);
    }
    let (name, version) = S3S_FS;
    let root = ws.target_dir().join("s3s-fs");
    let root = root.to_string_lossy();
    let args = [
        "install",
        name,
        "--version",
        version,
        "--locked",
        "--features",
        "binary",
        "--root",
        &root,
    ];
    ws.cargo(
        &format!("cargo install {name} {version} (the fast S3 server)"),
        &args,
    )
    .map_err(|f| f.reason)?;
    if binary.exists() {
        Ok(binary)
    } else {
        Err(format!("cargo install {name} left no {}", binary.display()))
    }
}

/// `benches/remote.py` with s3s-fs and the remote bench venv (each made when
/// missing; one that cannot be made is reported missing in the tables), its
/// run saved as `docs/bench/remote.json`.
fn remote(ws: &Workspace, venv: &Venv) -> Result<(), Failure> {
    let bench = ensure_requirements_venv(ws, venv, REMOTE_REQUIREMENTS, "remote-venv");
    let s3s_fs = ensure_s3s_fs(ws);
    let mut cmd = script(ws, venv.python(), "remote.py");
    if let Some(scale) = std::env::var_os("LOADERX_BENCH_SCALE") {
        cmd.arg("--scale").arg(scale);
    }
    keep_run(
        &mut cmd,
        &ws.target_dir().join("bench-remote"),
        &ws.root.join(REMOTE_JSON),
    );
    match &bench {
        Ok(b) => {
            cmd.arg("--field-python").arg(&b.python);
            cmd.arg("--field-env").arg(b.dir.join("field-env.json"));
        }
        Err(reason) => {
            cmd.arg("--field-missing")
                .arg(format!("remote bench venv: {reason}"));
        }
    }
    match &s3s_fs {
        Ok(binary) => cmd.arg("--s3s-fs").arg(binary),
        Err(reason) => cmd.arg("--s3s-fs-missing").arg(reason),
    };
    steps::run(
        "benches/remote.py (S3 on loopback, ours and the field's remote readers)",
        &mut cmd,
    )
}

/// `benches/field.py --sections ...` with every contender's interpreter,
/// its run saved as `json`.
fn field(ws: &Workspace, venv: &Venv, sections: &[&str], json: &Path) -> Result<(), Failure> {
    let bench = ensure_requirements_venv(ws, venv, FIELD_REQUIREMENTS, "bench-venv");
    let v054 = ensure_compat_venv(ws, venv, &ORIGINAL_054);
    let v240 = ensure_compat_venv(ws, venv, &ORIGINAL_24);
    let mut cmd = script(ws, venv.python(), "field.py");
    if let Some(scale) = std::env::var_os("LOADERX_BENCH_SCALE") {
        cmd.arg("--scale").arg(scale);
    }
    cmd.arg("--sections").args(sections);
    keep_run(&mut cmd, &ws.target_dir().join("bench-field"), json);
    match &bench {
        Ok(b) => {
            cmd.arg("--field-python").arg(&b.python);
            cmd.arg("--field-env").arg(b.dir.join("field-env.json"));
        }
        Err(reason) => {
            cmd.arg("--missing")
                .arg(format!("field=bench venv: {reason}"));
        }
    }
    for (flag, impl_, made) in [
        ("--v054-python", "v054", &v054),
        ("--v240-python", "v240", &v240),
    ] {
        match made {
            Ok(v) => cmd.arg(flag).arg(&v.python),
            Err(f) => cmd
                .arg("--missing")
                .arg(format!("{impl_}={}: {}", f.step, f.reason)),
        };
    }
    match crate::python::ensure_compat28(ws, venv) {
        Ok(v) => cmd.arg("--v2819-python").arg(&v.python),
        Err(f) => cmd
            .arg("--missing")
            .arg(format!("v2819={}: {}", f.step, f.reason)),
    };
    steps::run(
        "benches/field.py (stores and loaders of the field)",
        &mut cmd,
    )?;
    if let Ok(b) = &bench {
        // The docs' figures only from the run the docs keep; a half run's
        // beside its JSON.
        let dir = if json == ws.root.join(FIELD_JSON) {
            ws.root.join(FIELD_IMG)
        } else {
            json.with_file_name("img")
        };
        plots(ws, &b.python, json, &dir)?;
    }
    Ok(())
}

/// `benches/convert.py` with the MDS and LitData venv (or why it is
/// missing), its run saved as `json`.
fn convert(ws: &Workspace, venv: &Venv, json: &Path) -> Result<(), Failure> {
    let contenders = ensure_requirements_venv(ws, venv, CONVERT_REQUIREMENTS, "convert-venv");
    let mut cmd = script(ws, venv.python(), "convert.py");
    if let Some(scale) = std::env::var_os("LOADERX_BENCH_SCALE") {
        cmd.arg("--scale").arg(scale);
    }
    keep_run(&mut cmd, &ws.target_dir().join("bench-convert"), json);
    match &contenders {
        Ok(c) => {
            cmd.arg("--contender-python").arg(&c.python);
            cmd.arg("--contender-env").arg(c.dir.join("field-env.json"));
        }
        Err(reason) => {
            cmd.arg("--contender-missing")
                .arg(format!("contender venv: {reason}"));
        }
    }
    steps::run(
        "benches/convert.py (Ray, Spark and our converter vs MDS and LitData; collections)",
        &mut cmd,
    )
}

/// `benches/tables.py JSON --plots DIR` with the bench venv's
/// interpreter (matplotlib lives there): field.py's figures.
fn plots(ws: &Workspace, python: &Path, json: &Path, dir: &Path) -> Result<(), Failure> {
    let mut cmd = script(ws, Command::new(python), "tables.py");
    cmd.arg(json).arg("--plots").arg(dir);
    steps::run("benches/tables.py --plots (matplotlib figures)", &mut cmd)
}

/// `benches/tables.py JSON...`: print the tables of the runs, or (`write`)
/// put them into the docs' generated blocks.
fn tables(ws: &Workspace, venv: &Venv, jsons: &[PathBuf], write: bool) -> Result<(), Failure> {
    let mut cmd = script(ws, venv.python(), "tables.py");
    cmd.args(jsons);
    if write {
        cmd.arg("--write");
    }
    let name = if write {
        "benches/tables.py --write (docs/BENCHMARKS.md, README.md, docs/bench/*.md)"
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

/// The venv holding loaderx 2.8.19 (`python::ensure_compat28` makes it for
/// the 2.8 API tests and for `bench typed`/`field`); the smoke run uses it
/// only where it exists, as it does the other compat venvs.
const COMPAT28_VENV: &str = "compat28-venv";

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
    let compat = Venv::at(ws.target_dir().join(name));
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
    let mut cmd = script(ws, venv.python(), "compare.py");
    cmd.arg("all")
        .arg("--original-python")
        .arg(&original.python)
        .arg("--criterion-dir")
        .arg(ws.target_dir().join("criterion"));
    keep_run(&mut cmd, &data, &ws.root.join(RUN_JSON));
    steps::run(
        "benches/compare.py all (vs NumPy and loaderx 0.5.4)",
        &mut cmd,
    )
}

/// typed.py: our typed containers against loaderx 2.4.0 (`original`, or the
/// reason it is missing), saved as the typed run's JSON.
fn typed(
    ws: &Workspace,
    venv: &Venv,
    original: Result<Venv, String>,
    original28: Result<Venv, String>,
) -> Result<(), Failure> {
    let mut cmd = script(ws, venv.python(), "typed.py");
    match &original {
        Ok(original) => cmd.arg("--original-python").arg(&original.python),
        Err(reason) => cmd.arg("--original-missing").arg(reason),
    };
    match &original28 {
        Ok(v) => cmd.arg("--original28-python").arg(&v.python),
        Err(reason) => cmd.arg("--original28-missing").arg(reason),
    };
    keep_run(
        &mut cmd,
        &ws.target_dir().join("bench-typed"),
        &ws.root.join(TYPED_JSON),
    );
    steps::run(
        "benches/typed.py (typed containers vs loaderx 2.4.0)",
        &mut cmd,
    )
}
