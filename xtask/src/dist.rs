//! `cargo xtask dist [--host | --target NAME ...]`: release artefacts in
//! `<target>/dist/`, each checked after it is built.
//!
//! * abi3 wheels (one per platform serves Python 3.9+), built with maturin
//!   from a tools venv (`<target>/dist-tools`, holding maturin and zig from
//!   PyPI). Linux wheels link through `zig` so that `manylinux2014` (glibc
//!   2.17) and `musllinux_1_2` hold; Windows x64 links with mingw-w64.
//!   A platform that cannot be built here (its Rust target does not install,
//!   no linker for it) is reported with the reason; only the Linux wheels
//!   and the sdist are required for success.
//! * the sdist (`maturin sdist`), checked and, in a full run, built from
//!   source into a wheel with nothing but pip, Rust and the registries.
//! * checks: `crates/loaderx-py/tools/check_dist.py` on every artefact (tags,
//!   binary header, shared libraries, glibc symbol versions, contents,
//!   metadata), `auditwheel show` on the Linux wheels, and the smoke test
//!   (`crates/loaderx-py/tools/smoke.py`) of the host wheel in a fresh venv
//!   and, under qemu-user with Debian's arm64 Python and NumPy, of the
//!   manylinux aarch64 wheel.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cross;
use crate::python::{self, Venv};
use crate::steps::{self, Failure, Workspace};
use crate::tools::{self, Tool};

/// One wheel platform.
#[derive(Debug)]
struct Wheel {
    /// The name `--target` takes.
    name: &'static str,
    triple: &'static str,
    /// Extra `maturin build` arguments.
    args: &'static [&'static str],
    /// Required: its failure fails `dist`.
    required: bool,
}

impl Wheel {
    const fn new(
        name: &'static str,
        triple: &'static str,
        args: &'static [&'static str],
        required: bool,
    ) -> Self {
        Self {
            name,
            triple,
            args,
            required,
        }
    }
}

/// Every wheel platform, one a line (a table: rustfmt would spread it).
#[rustfmt::skip]
const WHEELS: &[Wheel] = &[
    Wheel::new("manylinux-x86_64",  "x86_64-unknown-linux-gnu",   &["--zig", "--compatibility", "manylinux2014"], true),
    Wheel::new("manylinux-aarch64", "aarch64-unknown-linux-gnu",  &["--zig", "--compatibility", "manylinux2014"], true),
    Wheel::new("musllinux-x86_64",  "x86_64-unknown-linux-musl",  &["--zig", "--compatibility", "musllinux_1_2"], true),
    Wheel::new("musllinux-aarch64", "aarch64-unknown-linux-musl", &["--zig", "--compatibility", "musllinux_1_2"], true),
    Wheel::new("windows-x64",       "x86_64-pc-windows-gnu",      &[], false),
    Wheel::new("windows-arm64",     "aarch64-pc-windows-gnullvm", &["--zig"], false),
    Wheel::new("macos-x86_64",      "x86_64-apple-darwin",        &["--zig"], false),
    Wheel::new("macos-arm64",       "aarch64-apple-darwin",       &["--zig"], false),
];

/// What to build.
#[derive(Debug)]
pub struct Selection {
    wheels: Vec<&'static Wheel>,
    sdist: bool,
    /// `--host`: the host wheel only (manylinux x86_64 on this machine),
    /// checked and smoke-tested; what CI runs.
    host: bool,
}

impl Selection {
    pub fn parse(rest: &[String]) -> Result<Self, Failure> {
        let bad = |why: String| Failure::new("arguments", why);
        if rest.is_empty() {
            return Ok(Selection {
                wheels: WHEELS.iter().collect(),
                sdist: true,
                host: false,
            });
        }
        if rest == ["--host"] {
            return Ok(Selection {
                wheels: vec![host_wheel()?],
                sdist: false,
                host: true,
            });
        }
        let mut sel = Selection {
            wheels: Vec::new(),
            sdist: false,
            host: false,
        };
        let mut args = rest.iter();
        while let Some(arg) = args.next() {
            if arg != "--target" {
                return Err(bad(format!(
                    "`dist` takes --host or --target NAME ..., got {arg:?}"
                )));
            }
            let name = args
                .next()
                .ok_or_else(|| bad("--target needs a NAME".into()))?;
            if name == "sdist" {
                sel.sdist = true;
            } else {
                let wheel = WHEELS.iter().find(|w| w.name == name).ok_or_else(|| {
                    let names: Vec<&str> = WHEELS.iter().map(|w| w.name).collect();
                    bad(format!(
                        "unknown target {name:?}; one of {names:?} or \"sdist\""
                    ))
                })?;
                sel.wheels.push(wheel);
            }
        }
        Ok(sel)
    }
}

fn host_wheel() -> Result<&'static Wheel, Failure> {
    let name = match std::env::consts::ARCH {
        "x86_64" if cfg!(target_os = "linux") => "manylinux-x86_64",
        "aarch64" if cfg!(target_os = "linux") => "manylinux-aarch64",
        other => {
            return Err(Failure::new(
                "dist --host",
                format!(
                    "--host builds Linux wheels only; this is {other} {}",
                    std::env::consts::OS
                ),
            ));
        }
    };
    Ok(WHEELS.iter().find(|w| w.name == name).expect("listed"))
}

/// How one artefact went.
#[derive(Debug)]
enum Outcome {
    Built(PathBuf),
    NotBuilt(String),
}

pub fn run(ws: &Workspace, sel: &Selection) -> Result<(), Failure> {
    let dist = ws.target_dir().join("dist");
    fs::create_dir_all(&dist)
        .map_err(|e| Failure::new("dist", format!("{}: {e}", dist.display())))?;
    let tools_venv = tools_venv(ws)?;
    let version = workspace_version(ws)?;

    let mut outcomes: Vec<(&str, bool, Outcome)> = Vec::new();
    for wheel in &sel.wheels {
        let outcome = build_wheel(ws, &tools_venv, &dist, wheel);
        if let Outcome::NotBuilt(why) = &outcome {
            println!("--- dist {}: NOT BUILT: {why}", wheel.name);
        }
        outcomes.push((wheel.name, wheel.required, outcome));
    }
    if sel.sdist {
        let outcome = build_sdist(ws, &tools_venv, &dist);
        outcomes.push(("sdist", true, outcome));
    }

    // Check everything that was built, in one run of the checker.
    let built: Vec<&PathBuf> = outcomes
        .iter()
        .filter_map(|(_, _, o)| match o {
            Outcome::Built(p) => Some(p),
            Outcome::NotBuilt(_) => None,
        })
        .collect();
    let mut failures: Vec<String> = Vec::new();
    if !built.is_empty() {
        let mut check = tools_venv.python();
        check
            .arg(py_tools(ws).join("check_dist.py"))
            .args(["--version", &version])
            .args(&built);
        if let Err(f) = steps::run("check_dist.py on every artefact", &mut check) {
            failures.push(f.reason);
        }
        // auditwheel resolves a wheel's libraries on this (glibc) host, so
        // it can judge manylinux wheels only: a musllinux module's `libc.so`
        // (musl's own name for itself) would resolve to glibc's linker script.
        for path in built.iter().filter(|p| file_name(p).contains("manylinux")) {
            let mut audit = tools_venv.python();
            audit.args(["-m", "auditwheel", "show"]).arg(path);
            if let Err(f) = steps::run(&format!("auditwheel show {}", file_name(path)), &mut audit)
            {
                failures.push(f.reason);
            }
        }
    }

    // Smoke tests.
    for (name, _, outcome) in &outcomes {
        let Outcome::Built(path) = outcome else {
            continue;
        };
        let result = match *name {
            n if Some(n) == host_wheel().ok().map(|w| w.name) => smoke_host(ws, path, &version),
            "manylinux-aarch64" => smoke_aarch64(ws, path, &version),
            _ => continue,
        };
        if let Err(f) = result {
            failures.push(format!("{}: {}", f.step, f.reason));
        }
    }
    if sel.sdist
        && !sel.host
        && let Some((_, _, Outcome::Built(sdist))) = outcomes.iter().find(|(n, _, _)| *n == "sdist")
        && let Err(f) = wheel_from_sdist(ws, sdist)
    {
        failures.push(format!("{}: {}", f.step, f.reason));
    }

    // Summary: every artefact, built or not and why.
    steps::banner("xtask dist: summary");
    for (name, required, outcome) in &outcomes {
        match outcome {
            Outcome::Built(p) => println!("  {name:<18} built    {}", p.display()),
            Outcome::NotBuilt(why) => {
                let kind = if *required { "FAILED " } else { "skipped" };
                println!("  {name:<18} {kind}  {why}");
                if *required {
                    failures.push(format!("{name}: {why}"));
                }
            }
        }
    }
    if failures.is_empty() {
        println!("all built artefacts passed their checks");
        Ok(())
    } else {
        Err(Failure::new("dist", failures.join("\n  ")))
    }
}

fn py_tools(ws: &Workspace) -> PathBuf {
    ws.root.join("crates").join("loaderx-py").join("tools")
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The workspace's one version (`[workspace.package] version`).
pub fn workspace_version(ws: &Workspace) -> Result<String, Failure> {
    let manifest = ws.root.join("Cargo.toml");
    let text = fs::read_to_string(&manifest)
        .map_err(|e| Failure::new("version", format!("{}: {e}", manifest.display())))?;
    crate::crates::package_version(&text).ok_or_else(|| {
        Failure::new(
            "version",
            format!(
                "no version in [workspace.package] of {}",
                manifest.display()
            ),
        )
    })
}

/// `<target>/dist-tools`: a venv with maturin, zig and auditwheel, apart
/// from the development venv so a release build never depends on it.
fn tools_venv(ws: &Workspace) -> Result<Venv, Failure> {
    let venv = Venv::at(ws.target_dir().join("dist-tools"));
    if !venv.works() {
        let mut cmd = Command::new(python::base_python()?);
        cmd.args(["-m", "venv", "--clear"]).arg(&venv.dir);
        steps::run("dist tools venv", &mut cmd)?;
    }
    let probe = venv
        .python()
        .args(["-c", "import maturin, ziglang, auditwheel"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !probe {
        let mut cmd = venv.python();
        cmd.args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "maturin>=1.16,<2",
            "ziglang",
            "auditwheel",
        ]);
        steps::run(
            "pip install maturin ziglang auditwheel (dist tools venv)",
            &mut cmd,
        )?;
    }
    Ok(venv)
}

/// The triple and extra arguments for `wheel` on this host: on a Windows
/// host the x64 wheel is built natively with MSVC, on a macOS host the macOS
/// wheels with Apple's linker (no zig); everything else as listed.
fn native_override(wheel: &Wheel) -> (&'static str, &'static [&'static str]) {
    if cfg!(windows) && wheel.name == "windows-x64" {
        ("x86_64-pc-windows-msvc", &[])
    } else if cfg!(target_os = "macos") && wheel.name.starts_with("macos") {
        (wheel.triple, &[])
    } else {
        (wheel.triple, wheel.args)
    }
}

fn build_wheel(ws: &Workspace, venv: &Venv, dist: &Path, wheel: &Wheel) -> Outcome {
    let (triple, args) = native_override(wheel);
    if let Err(f) = tools::rust_target(triple) {
        return Outcome::NotBuilt(format!("Rust target {triple} unavailable: {}", f.reason));
    }
    if triple == "x86_64-pc-windows-gnu"
        && let Err(f) = tools::debian(
            "mingw-w64 linker",
            &[Tool {
                program: "x86_64-w64-mingw32-gcc",
                probe_arg: "--version",
                package: "gcc-mingw-w64-x86-64",
            }],
        )
    {
        return Outcome::NotBuilt(format!("no linker for {triple}: {}", f.reason));
    }
    let out = ws.target_dir().join("dist-work").join(wheel.name);
    let _ = fs::remove_dir_all(&out);
    let mut cmd = venv.python();
    cmd.args([
        "-m",
        "maturin",
        "build",
        "--release",
        "--target",
        triple,
        "--out",
    ])
    .arg(&out)
    .args(args)
    .current_dir(ws.root.join("crates").join("loaderx-py"));
    if triple == "x86_64-pc-windows-gnu" {
        cmd.env(
            cross::cargo_target_var(triple, "LINKER"),
            "x86_64-w64-mingw32-gcc",
        );
    }
    if triple == "aarch64-pc-windows-gnullvm" && args.contains(&"--zig") {
        // maturin's zig build for Windows GNU targets exports the wrong
        // module initialiser; tools/zig_exports.py says how it is mended.
        match zig_exports_wrapper(ws, venv) {
            Ok(zig) => {
                cmd.env("CARGO_ZIGBUILD_PYTHON_PATH", zig);
            }
            Err(f) => return Outcome::NotBuilt(f.reason),
        }
    }
    if let Err(f) = steps::run(&format!("maturin build wheel {}", wheel.name), &mut cmd) {
        return Outcome::NotBuilt(format!("build failed ({})", f.reason));
    }
    move_single(&out, dist, ".whl")
}

/// An executable for maturin to run zig with (as `WRAPPER -m ziglang ...`,
/// the way it runs the `ziglang` package with a Python): it runs
/// `tools/zig_exports.py` with the venv's Python. Written into the target dir.
fn zig_exports_wrapper(ws: &Workspace, venv: &Venv) -> Result<PathBuf, Failure> {
    if !cfg!(unix) {
        return Err(Failure::new(
            "zig wrapper",
            "the Windows arm64 wheel is cross-built from Linux or macOS (its zig wrapper is a shell script)",
        ));
    }
    let script = ws
        .root
        .join("crates")
        .join("loaderx-py")
        .join("tools")
        .join("zig_exports.py");
    let wrapper = ws.target_dir().join("dist-work").join("zig-exports");
    let quote = |p: &Path| format!("'{}'", p.display().to_string().replace('\'', r"'\''"));
    let text = format!(
        "#!/bin/sh\nexec {} {} \"$@\"\n",
        quote(&venv.python),
        quote(&script)
    );
    let failed = |e: std::io::Error| {
        Failure::new(
            "zig wrapper",
            format!("cannot write {}: {e}", wrapper.display()),
        )
    };
    fs::create_dir_all(wrapper.parent().unwrap_or(Path::new("."))).map_err(failed)?;
    fs::write(&wrapper, text).map_err(failed)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&wrapper, fs::Permissions::from_mode(0o755)).map_err(failed)?;
    }
    Ok(wrapper)
}

fn build_sdist(ws: &Workspace, venv: &Venv, dist: &Path) -> Outcome {
    let out = ws.target_dir().join("dist-work").join("sdist");
    let _ = fs::remove_dir_all(&out);
    let mut cmd = venv.python();
    cmd.args(["-m", "maturin", "sdist", "--out"])
        .arg(&out)
        .current_dir(ws.root.join("crates").join("loaderx-py"));
    if let Err(f) = steps::run("maturin sdist", &mut cmd) {
        return Outcome::NotBuilt(format!("build failed ({})", f.reason));
    }
    move_single(&out, dist, ".tar.gz")
}

/// Moves the one file ending in `suffix` from `out` into `dist` (replacing
/// an older artefact of the same name).
fn move_single(out: &Path, dist: &Path, suffix: &str) -> Outcome {
    let found: Vec<PathBuf> = fs::read_dir(out)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| file_name(p).ends_with(suffix))
                .collect()
        })
        .unwrap_or_default();
    let [file] = found.as_slice() else {
        return Outcome::NotBuilt(format!(
            "expected one *{suffix} in {}, found {found:?}",
            out.display()
        ));
    };
    let dest = dist.join(file_name(file));
    match fs::rename(file, &dest) {
        Ok(()) => Outcome::Built(dest),
        Err(e) => Outcome::NotBuilt(format!("move to {}: {e}", dest.display())),
    }
}

/// The smoke script copied out of the source tree, so it runs against the
/// installed package and not the sources.
fn staged_smoke(ws: &Workspace, dir: &Path) -> Result<PathBuf, Failure> {
    fs::create_dir_all(dir)
        .map_err(|e| Failure::new("smoke", format!("{}: {e}", dir.display())))?;
    let dest = dir.join("smoke.py");
    fs::copy(py_tools(ws).join("smoke.py"), &dest)
        .map_err(|e| Failure::new("smoke", format!("copy smoke.py: {e}")))?;
    Ok(dest)
}

/// Installs the host wheel into a fresh venv (binary packages only, so
/// nothing can be built from source) and runs the smoke test there.
fn smoke_host(ws: &Workspace, wheel: &Path, version: &str) -> Result<(), Failure> {
    let work = ws.target_dir().join("dist-smoke");
    let venv = Venv::at(work.join("venv"));
    let mut make = Command::new(python::base_python()?);
    make.args(["-m", "venv", "--clear"]).arg(&venv.dir);
    steps::run("smoke: fresh venv", &mut make)?;
    let mut install = venv.python();
    install
        .args(["-m", "pip", "install", "--quiet", "--only-binary", ":all:"])
        .arg(wheel);
    steps::run(
        &format!("smoke: pip install {}", file_name(wheel)),
        &mut install,
    )?;
    let script = staged_smoke(ws, &work)?;
    let mut smoke = venv.python();
    smoke.arg(&script).arg(version).current_dir(&work);
    steps::run("smoke test of the host wheel", &mut smoke)
}

/// Debian arm64 packages that make a working `python3.11` with NumPy when
/// unpacked into one directory (Debian 12's versions).
const ARM64_PACKAGES: &[&str] = &[
    "libc6",
    "libgcc-s1",
    "libstdc++6",
    "zlib1g",
    "libexpat1",
    "libffi8",
    "libbz2-1.0",
    "liblzma5",
    "libssl3",
    "libuuid1",
    "libcrypt1",
    "libsqlite3-0",
    "libncursesw6",
    "libtinfo6",
    "libreadline8",
    "libpython3.11-minimal",
    "libpython3.11-stdlib",
    "python3.11-minimal",
    "python3-numpy",
    "libblas3",
    "liblapack3",
    "libgfortran5",
];

/// The manylinux aarch64 wheel's smoke test under qemu-user, with Debian's
/// arm64 `python3.11` and NumPy unpacked into `<target>/dist-smoke/arm64`
/// (`apt-get download` + `dpkg -x`: nothing is installed into the host).
fn smoke_aarch64(ws: &Workspace, wheel: &Path, version: &str) -> Result<(), Failure> {
    const STEP: &str = "smoke (aarch64, qemu-user)";
    tools::debian(
        STEP,
        &[Tool {
            program: "qemu-aarch64",
            probe_arg: "--version",
            package: "qemu-user",
        }],
    )?;
    let work = ws.target_dir().join("dist-smoke").join("arm64");
    let root = work.join("root");
    let python = root.join("usr/bin/python3.11");
    if !python.is_file() {
        arm64_python(&work, &root)?;
    }
    // The wheel unpacked (a wheel is a zip of the installed files).
    let site = work.join("site");
    let _ = fs::remove_dir_all(&site);
    fs::create_dir_all(&site)
        .map_err(|e| Failure::new(STEP, format!("{}: {e}", site.display())))?;
    let mut unzip = Command::new(python::base_python()?);
    unzip.args(["-m", "zipfile", "-e"]).arg(wheel).arg(&site);
    steps::run("unpack the aarch64 wheel", &mut unzip)?;
    let script = staged_smoke(ws, &work)?;
    let mut smoke = Command::new("qemu-aarch64");
    // Debian installs BLAS and LAPACK under alternatives directories that
    // `dpkg -x` does not link into the loader's path; name them for the
    // guest (`-E` sets the emulated program's environment only).
    smoke
        .arg("-L")
        .arg(&root)
        .args([
            "-E",
            "LD_LIBRARY_PATH=/usr/lib/aarch64-linux-gnu/blas:/usr/lib/aarch64-linux-gnu/lapack",
        ])
        .arg(&python)
        .arg(&script)
        .arg(version)
        .env(
            "PYTHONPATH",
            format!(
                "{}:{}",
                site.display(),
                root.join("usr/lib/python3/dist-packages").display()
            ),
        )
        .env("PYTHONNOUSERSITE", "1")
        .current_dir(&work);
    steps::run(
        "smoke test of the aarch64 wheel under qemu-user",
        &mut smoke,
    )
}

/// Unpacks Debian's arm64 Python and NumPy into `root`. Needs the arm64
/// architecture known to apt (added, with an `apt-get update`, when running
/// as root).
fn arm64_python(work: &Path, root: &Path) -> Result<(), Failure> {
    const STEP: &str = "arm64 python for qemu";
    let debs = work.join("debs");
    fs::create_dir_all(&debs)
        .map_err(|e| Failure::new(STEP, format!("{}: {e}", debs.display())))?;
    let archs = steps::capture(Command::new("dpkg").arg("--print-foreign-architectures"))
        .unwrap_or_default();
    if !archs.split_whitespace().any(|a| a == "arm64") {
        steps::run(
            "dpkg --add-architecture arm64",
            Command::new("dpkg").args(["--add-architecture", "arm64"]),
        )
        .and_then(|()| {
            steps::run(
                "apt-get update (for arm64 package lists)",
                Command::new("apt-get").arg("update"),
            )
        })
        .map_err(|f| {
            Failure::new(
                STEP,
                format!(
                    "{}; as root run: dpkg --add-architecture arm64 && apt-get update",
                    f.reason
                ),
            )
        })?;
    }
    let mut download = Command::new("apt-get");
    download
        .arg("download")
        .args(ARM64_PACKAGES.iter().map(|p| format!("{p}:arm64")))
        .current_dir(&debs);
    steps::run("apt-get download arm64 python3.11 + numpy", &mut download)?;
    for entry in fs::read_dir(&debs).map_err(|e| Failure::new(STEP, e.to_string()))? {
        let deb = entry.map_err(|e| Failure::new(STEP, e.to_string()))?.path();
        if file_name(&deb).ends_with(".deb") {
            let mut x = Command::new("dpkg");
            x.arg("-x").arg(&deb).arg(root);
            steps::run(&format!("dpkg -x {}", file_name(&deb)), &mut x)?;
        }
    }
    Ok(())
}

/// Builds a wheel from the sdist with pip alone (maturin and the crates
/// come from the registries), in a fresh venv.
fn wheel_from_sdist(ws: &Workspace, sdist: &Path) -> Result<(), Failure> {
    let work = ws.target_dir().join("dist-sdist-build");
    let _ = fs::remove_dir_all(&work);
    let venv = Venv::at(work.join("venv"));
    let mut make = Command::new(python::base_python()?);
    make.args(["-m", "venv"]).arg(&venv.dir);
    steps::run("sdist: fresh venv", &mut make)?;
    let mut build = venv.python();
    build
        .args(["-m", "pip", "wheel", "--no-deps", "--wheel-dir"])
        .arg(work.join("wheel"))
        .arg(sdist)
        .env("CARGO_TARGET_DIR", work.join("target"));
    steps::run("sdist: pip wheel (build from source)", &mut build)
}
