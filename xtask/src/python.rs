//! The project virtualenv (`<repo>/.venv`) and the Python-side steps.
//!
//! The venv is created on first use and its tools installed only when missing
//! or too old, so a rerun costs one probe instead of a round of pip installs.

use std::env;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::steps::{self, Failure, Workspace};

/// What the venv must hold, as pip requirement specifiers, with the probe
/// that decides whether each is already satisfied.
const TOOLS: &[(&str, &str)] = &[
    ("maturin", "maturin>=1.16,<2"),
    ("numpy", "numpy"),
    ("pytest", "pytest"),
    ("mypy", "mypy"),
    // The converter's sources (`loaderx[converter]`): Hugging Face
    // `datasets` (it brings pyarrow, pandas and huggingface_hub) and Pillow
    // for image folders. About 320 MB installed, ~15 s from PyPI.
    ("datasets", "datasets"),
    ("pyarrow", "pyarrow"),
    ("pillow", "pillow"),
    // The S3 server the remote-store tests start on loopback
    // (`ThreadedMotoServer`); its `server` extra brings flask.
    ("moto", "moto[server]"),
    // `loaderx.ray` and its tests (Ray Data in local mode): about 200 MB
    // installed.
    ("ray", "ray[data]"),
    // `loaderx.spark` and its tests (PySpark in local mode; they also need a
    // Java runtime: `ensure_jre`). About 320 MB installed.
    ("pyspark", "pyspark"),
    // bfloat16 and the float8 dtypes (optional for users; their tests need it).
    ("ml_dtypes", "ml-dtypes"),
    // The Azure test creates its container in Azurite (`ensure_azurite`)
    // with Microsoft's client; loaderx itself reads through object_store.
    ("azure-storage-blob", "azure-storage-blob"),
];

/// The Azure Storage emulator the Azure test starts on loopback, from npm,
/// installed under `target/azurite` (`AZURITE` pins its version).
const AZURITE: &str = "azurite@3.37.0";

/// The training frameworks the example tests run (CPU is enough). PyPI's
/// Linux torch wheel pulls in its CUDA libraries (about 2.8 GB of wheels,
/// 5 GB installed; a few minutes on a fresh venv, nothing on a rerun) and
/// the CPU-only index may be unreachable, so they are installed after
/// `TOOLS` and a failure only warns: their tests then skip, saying why.
/// `LOADERX_NO_FRAMEWORKS=1` skips installing them.
const FRAMEWORKS: &[(&str, &str)] = &[("torch", "torch"), ("jax", "jax")];

/// Prints the requirement specifiers of `TOOLS` that are missing or outside
/// their version range, one per line. Runs inside the venv.
const PROBE: &str = r#"
import sys
from importlib import metadata

def version(name):
    try:
        return tuple(int(p) for p in metadata.version(name).split(".")[:2] if p.isdigit())
    except metadata.PackageNotFoundError:
        return None

for name, spec in (a.split("=", 1) for a in sys.argv[1:]):
    found = version(name)
    if found is None or (name == "maturin" and not ((1, 16) <= found < (2, 0))):
        print(spec)
"#;

#[derive(Debug)]
pub struct Venv {
    pub dir: PathBuf,
    pub python: PathBuf,
}

impl Venv {
    pub fn at(dir: PathBuf) -> Self {
        let python = if cfg!(windows) {
            dir.join("Scripts").join("python.exe")
        } else {
            dir.join("bin").join("python")
        };
        Self { dir, python }
    }

    /// A command running the venv's interpreter with the venv activated.
    pub fn python(&self) -> Command {
        let mut cmd = Command::new(&self.python);
        let bin = self.python.parent().unwrap_or(&self.dir).to_path_buf();
        let mut path: Vec<PathBuf> = vec![bin];
        if let Some(old) = env::var_os("PATH") {
            path.extend(env::split_paths(&old));
        }
        let joined = env::join_paths(path).unwrap_or_else(|_| OsString::from(""));
        cmd.env("VIRTUAL_ENV", &self.dir)
            .env("PATH", joined)
            .env_remove("PYTHONHOME")
            .env("PIP_DISABLE_PIP_VERSION_CHECK", "1");
        cmd
    }

    pub fn works(&self) -> bool {
        steps::capture(Command::new(&self.python).args(["-c", "import sys, venv"])).is_some()
    }
}

/// Create `<repo>/.venv` if needed and install whatever tools it lacks.
pub fn ensure_venv(ws: &Workspace) -> Result<Venv, Failure> {
    const STEP: &str = "python venv";
    let venv = Venv::at(ws.root.join(".venv"));
    if !venv.works() {
        let base = base_python()?;
        let mut cmd = Command::new(&base);
        cmd.args(["-m", "venv", "--clear"]).arg(&venv.dir);
        steps::run(STEP, &mut cmd)?;
        if !venv.works() {
            return Err(Failure::new(
                STEP,
                format!("{} was created but does not run", venv.python.display()),
            ));
        }
    }

    let mut probe = venv.python();
    probe.args(["-c", PROBE]);
    probe.args(TOOLS.iter().map(|(name, spec)| format!("{name}={spec}")));
    let missing = steps::capture(&mut probe).ok_or_else(|| {
        Failure::new(
            STEP,
            format!(
                "could not probe {} for installed tools",
                venv.python.display()
            ),
        )
    })?;
    let missing: Vec<&str> = missing.split_whitespace().collect();
    if missing.is_empty() {
        println!(
            "--- {STEP}: {} has maturin, numpy, pytest, mypy, datasets, pyarrow, pillow, moto, ray, pyspark, ml-dtypes, azure-storage-blob",
            venv.dir.display()
        );
    } else {
        let mut cmd = venv.python();
        cmd.args(["-m", "pip", "install", "--quiet"]).args(&missing);
        steps::run("pip install tools into .venv", &mut cmd)?;
    }
    ensure_jre();
    ensure_azurite(ws);
    if env::var_os("LOADERX_NO_FRAMEWORKS").is_some_and(|v| v == "1") {
        println!("--- {STEP}: LOADERX_NO_FRAMEWORKS=1, not installing torch and jax");
    } else {
        install_frameworks(&venv);
    }
    Ok(venv)
}

/// The Java runtime PySpark needs (the Spark tests), from Debian on Linux
/// (`openjdk-17-jre-headless`, as root). Elsewhere, or when it cannot be
/// installed, a warning: the Spark tests then skip, saying why.
fn ensure_jre() {
    if env::var_os("JAVA_HOME").is_some() {
        return;
    }
    let java = crate::tools::Tool {
        program: "java",
        probe_arg: "-version",
        package: "openjdk-17-jre-headless",
    };
    if !cfg!(target_os = "linux") {
        return;
    }
    if let Err(failure) = crate::tools::debian("Java runtime for the Spark tests", &[java]) {
        println!(
            "--- warning: no Java runtime ({}); the Spark tests will skip",
            failure.reason
        );
    }
}

/// Azurite (`AZURITE`) under `target/azurite`, with Node.js and npm from
/// Debian when missing (as root, on Linux). When it cannot be had, a
/// warning: the Azure test then skips, saying why.
fn ensure_azurite(ws: &Workspace) {
    let prefix = ws.root.join("target").join("azurite");
    if prefix.join("node_modules/.bin/azurite-blob").exists() {
        return;
    }
    let npm = crate::tools::Tool {
        program: "npm",
        probe_arg: "--version",
        package: "npm",
    };
    if cfg!(target_os = "linux")
        && let Err(failure) = crate::tools::debian("Node.js for the Azure test", &[npm])
    {
        println!(
            "--- warning: no npm ({}); the Azure test will skip",
            failure.reason
        );
        return;
    }
    let mut cmd = Command::new("npm");
    cmd.args(["install", "--no-audit", "--no-fund", "--silent", "--prefix"])
        .arg(&prefix)
        .arg(AZURITE);
    if let Err(failure) = steps::run("npm install azurite", &mut cmd) {
        println!(
            "--- warning: Azurite could not be installed ({}); the Azure test will skip",
            failure.reason
        );
    }
}

/// Installs whatever of `FRAMEWORKS` the venv lacks; a failure is reported
/// and left to the tests that need them (they skip).
fn install_frameworks(venv: &Venv) {
    let mut probe = venv.python();
    probe.args(["-c", PROBE]);
    probe.args(
        FRAMEWORKS
            .iter()
            .map(|(name, spec)| format!("{name}={spec}")),
    );
    let missing = steps::capture(&mut probe).unwrap_or_default();
    let missing: Vec<&str> = missing.split_whitespace().collect();
    if missing.is_empty() {
        return;
    }
    let mut cmd = venv.python();
    cmd.args(["-m", "pip", "install", "--quiet"]).args(&missing);
    if let Err(failure) = steps::run("pip install torch and jax into .venv", &mut cmd) {
        println!(
            "--- warning: {missing:?} could not be installed ({}); their tests will skip",
            failure.reason
        );
    }
}

/// The interpreter that seeds the venv: `$PYTHON`, else `python3`, which must
/// be Python 3.9 or newer.
pub fn base_python() -> Result<OsString, Failure> {
    const STEP: &str = "python venv";
    let candidates: Vec<OsString> = match env::var_os("PYTHON") {
        Some(p) => vec![p],
        None if cfg!(windows) => vec!["python".into(), "py".into()],
        None => vec!["python3".into(), "python".into()],
    };
    for candidate in &candidates {
        let probe = steps::capture(Command::new(candidate).args([
            "-c",
            "import sys; print(int(sys.version_info >= (3, 9)), sys.version.split()[0])",
        ]));
        match probe
            .as_deref()
            .map(str::split_whitespace)
            .map(|mut w| (w.next(), w.next()))
        {
            Some((Some("1"), _)) => return Ok(candidate.clone()),
            Some((Some(_), version)) => {
                return Err(Failure::new(
                    STEP,
                    format!(
                        "{} is Python {}; loaderx needs Python 3.9 or newer (set PYTHON=...)",
                        candidate.to_string_lossy(),
                        version.unwrap_or("?")
                    ),
                ));
            }
            _ => continue,
        }
    }
    Err(Failure::new(
        STEP,
        format!(
            "no Python interpreter found (tried {candidates:?}); install Python 3.9+ or set PYTHON=..."
        ),
    ))
}

fn py_crate(ws: &Workspace) -> PathBuf {
    ws.root.join("crates").join("loaderx-py")
}

/// Build the extension in release mode and install the package (editable)
/// into the venv.
pub fn develop(ws: &Workspace, venv: &Venv) -> Result<(), Failure> {
    let mut cmd = venv.python();
    cmd.args(["-m", "maturin", "develop", "--release"])
        .current_dir(py_crate(ws));
    steps::run(
        "maturin develop --release (build + install loaderx into .venv)",
        &mut cmd,
    )
}

pub fn pytest(ws: &Workspace, venv: &Venv) -> Result<(), Failure> {
    let mut cmd = venv.python();
    cmd.args(["-m", "pytest", "-ra"])
        .arg(py_crate(ws).join("tests"))
        .current_dir(&ws.root);
    steps::run("pytest crates/loaderx-py/tests", &mut cmd)
}

pub fn stubtest(ws: &Workspace, venv: &Venv) -> Result<(), Failure> {
    let allowlist = py_crate(ws).join("stubtest-allowlist.txt");
    let mut cmd = venv.python();
    cmd.args(["-m", "mypy.stubtest", "loaderx"]);
    if allowlist.is_file() {
        cmd.arg("--allowlist").arg(&allowlist);
    }
    cmd.env("MYPY_CACHE_DIR", ws.target_dir().join("mypy-cache"))
        .current_dir(&ws.root);
    steps::run("python -m mypy.stubtest loaderx", &mut cmd)
}

pub fn demo(ws: &Workspace, venv: &Venv) -> Result<(), Failure> {
    let out: PathBuf = ws.target_dir().join("demo");
    let script: &Path = &py_crate(ws).join("examples").join("demo.py");
    let mut cmd = venv.python();
    cmd.arg(script).arg("--out").arg(&out).current_dir(&ws.root);
    steps::run("demo: convert + load with every codec", &mut cmd)
}

/// The loaderx 2.8 release the 2.8 API tests also run against.
const ORIGINAL_28: &str = "loaderx==2.8.19";
/// What it needs beside it: it asks for NumPy >= 2.5, which has no build for
/// every Python, and runs on 2.4 (hence `--no-deps` for loaderx itself).
/// `datasets` (with pyarrow) is its `converter` extra, which the convert
/// example of the tests needs.
const ORIGINAL_28_DEPS: &[&str] = &[
    "numpy>=2.4,<2.5",
    "msgpack",
    "ml-dtypes>=0.6",
    "pytest",
    "datasets",
];
/// The test file of the 2.8 API, written to pass against both packages.
const API28_TESTS: &str = "tests/test_api28.py";

/// `<target>/compat28-venv` holding loaderx 2.8.19 and what it needs
/// (created and filled on first use): the 2.8 API tests run against it, and
/// the benches measure it beside ours.
pub fn ensure_compat28(ws: &Workspace, venv: &Venv) -> Result<Venv, Failure> {
    let compat = Venv::at(ws.target_dir().join("compat28-venv"));
    let probe = "import loaderx, pytest, ml_dtypes, datasets; print(loaderx.__version__)";
    let found = steps::capture(compat.python().args(["-c", probe]));
    if found.as_deref().map(str::trim) != Some("2.8.19") {
        if !compat.works() {
            let mut cmd = venv.python();
            cmd.args(["-m", "venv", "--clear"]).arg(&compat.dir);
            steps::run("create target/compat28-venv", &mut cmd)?;
        }
        let mut cmd = compat.python();
        cmd.args(["-m", "pip", "install", "--quiet", "--no-deps", ORIGINAL_28]);
        steps::run(
            "pip install --no-deps loaderx==2.8.19 into target/compat28-venv",
            &mut cmd,
        )?;
        let mut cmd = compat.python();
        cmd.args(["-m", "pip", "install", "--quiet"])
            .args(ORIGINAL_28_DEPS);
        steps::run(
            "pip install its dependencies into target/compat28-venv",
            &mut cmd,
        )?;
    }
    Ok(compat)
}

/// `tests/test_api28.py` against loaderx 2.8.19 itself, in
/// `<target>/compat28-venv` ([`ensure_compat28`]): the same
/// tests the package suite runs against ours, so both read the README's
/// behaviour the same way. `--noconftest`: the suite's conftest imports
/// names of ours that 2.8 does not have.
pub fn api28_reference(ws: &Workspace, venv: &Venv) -> Result<(), Failure> {
    const STEP: &str = "test_api28.py against loaderx 2.8.19";
    let compat = ensure_compat28(ws, venv)?;
    let tests = py_crate(ws).join(API28_TESTS);
    let mut cmd = compat.python();
    cmd.args([
        "-m",
        "pytest",
        "-ra",
        "--noconftest",
        "-p",
        "no:cacheprovider",
    ])
    .arg(&tests)
    .current_dir(ws.target_dir());
    steps::run(STEP, &mut cmd)
}
