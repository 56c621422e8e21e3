//! Outside tools the cross and release steps need: Rust targets (from
//! rustup) and Debian packages (from apt). Each is installed when missing and
//! possible; otherwise the step fails saying exactly what to install.

use std::process::Command;

use crate::steps::{self, Failure};

/// Whether `program --version` (or `arg`) runs.
pub fn runs(program: &str, arg: &str) -> bool {
    Command::new(program)
        .arg(arg)
        .output()
        .is_ok_and(|out| out.status.success() || !out.stdout.is_empty())
}

/// Makes sure the Rust standard library for `triple` is installed.
pub fn rust_target(triple: &str) -> Result<(), Failure> {
    let step = format!("rust target {triple}");
    let installed = steps::capture(Command::new("rustup").args(["target", "list", "--installed"]));
    let Some(installed) = installed else {
        return Err(Failure::new(
            step,
            format!(
                "rustup is not on PATH; install the `{triple}` standard library some other way"
            ),
        ));
    };
    if installed.lines().any(|l| l.trim() == triple) {
        return Ok(());
    }
    steps::run(
        &step,
        Command::new("rustup").args(["target", "add", triple]),
    )
    .map_err(|f| {
        Failure::new(
            f.step,
            format!(
                "{}; `rustup target add {triple}` must succeed (it downloads the target's \
                 standard library)",
                f.reason
            ),
        )
    })
}

/// A program (or, given as an absolute path, a file) and the Debian package
/// that provides it.
#[derive(Debug, Clone, Copy)]
pub struct Tool {
    pub program: &'static str,
    pub probe_arg: &'static str,
    pub package: &'static str,
}

impl Tool {
    fn present(&self) -> bool {
        if self.program.starts_with('/') {
            std::path::Path::new(self.program).exists()
        } else {
            runs(self.program, self.probe_arg)
        }
    }
}

/// Installs the packages of the `tools` that do not run, with apt-get when
/// running as root, or fails naming them.
pub fn debian(step: &str, tools: &[Tool]) -> Result<(), Failure> {
    let mut missing: Vec<&str> = tools
        .iter()
        .filter(|t| !t.present())
        .map(|t| t.package)
        .collect();
    missing.dedup();
    if missing.is_empty() {
        return Ok(());
    }
    let hint = format!(
        "apt-get install --no-install-recommends {}",
        missing.join(" ")
    );
    let root = steps::capture(Command::new("id").arg("-u")).is_some_and(|id| id.trim() == "0");
    if !root || !runs("apt-get", "--version") {
        return Err(Failure::new(
            step,
            format!("missing tools; install them as root with: {hint}"),
        ));
    }
    let mut cmd = Command::new("apt-get");
    cmd.args(["install", "-y", "--no-install-recommends"])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive");
    steps::run(&format!("{step}: apt-get install"), &mut cmd)
        .map_err(|f| Failure::new(f.step, format!("{}; needed: {hint}", f.reason)))?;
    match tools.iter().find(|t| !t.present()) {
        None => Ok(()),
        Some(t) => Err(Failure::new(
            step,
            format!(
                "`{}` still does not run after installing {}",
                t.program, t.package
            ),
        )),
    }
}
