//! Running one named step: a header before, a named failure after.

use std::env;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// The Cargo profile the Rust tests run in (`[profile.checked]` in the
/// workspace manifest): release optimisation with `debug_assert!` and
/// integer-overflow checks on, and no LTO.
pub const TEST_PROFILE: &str = "checked";

/// Why a step failed; `main` prints it and exits non-zero.
#[derive(Debug)]
pub struct Failure {
    pub step: String,
    pub reason: String,
}

impl Failure {
    pub fn new(step: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            step: step.into(),
            reason: reason.into(),
        }
    }
}

/// The repository this xtask belongs to.
#[derive(Debug)]
pub struct Workspace {
    pub root: PathBuf,
    cargo: OsString,
}

impl Workspace {
    /// The workspace root is the parent of this crate's manifest directory,
    /// which holds wherever `cargo xtask` is invoked from.
    pub fn locate() -> Result<Self, Failure> {
        let manifest = env!("CARGO_MANIFEST_DIR");
        let root = Path::new(manifest)
            .parent()
            .ok_or_else(|| Failure::new("locate workspace", "xtask has no parent directory"))?
            .to_path_buf();
        if !root.join("Cargo.toml").is_file() {
            return Err(Failure::new(
                "locate workspace",
                format!("{} has no Cargo.toml", root.display()),
            ));
        }
        let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        Ok(Self { root, cargo })
    }

    pub fn target_dir(&self) -> PathBuf {
        env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .map(|p| {
                if p.is_absolute() {
                    p
                } else {
                    self.root.join(p)
                }
            })
            .unwrap_or_else(|| self.root.join("target"))
    }

    /// Run `cargo <args>` at the workspace root as the step `name`.
    pub fn cargo(&self, name: &str, args: &[&str]) -> Result<(), Failure> {
        run(name, &mut self.cargo_command(args))
    }

    /// `cargo <args>` at the workspace root, for a step that needs more
    /// setting up (environment variables) before it runs.
    pub fn cargo_command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.cargo);
        cmd.args(args).current_dir(&self.root);
        cmd
    }
}

pub fn banner(text: &str) {
    let rule = "=".repeat(72);
    println!("\n{rule}\n{text}\n{rule}");
}

/// Print a header, run `cmd` with inherited stdio, and turn a non-zero exit
/// (or a failure to start) into a `Failure` naming the step.
pub fn run(name: &str, cmd: &mut Command) -> Result<(), Failure> {
    banner(&format!("==> {name}\n    $ {}", describe(cmd)));
    let started = Instant::now();
    let status = cmd.status().map_err(|err| {
        Failure::new(
            name,
            format!(
                "could not start `{}`: {err}",
                cmd.get_program().to_string_lossy()
            ),
        )
    })?;
    let secs = started.elapsed().as_secs_f64();
    if status.success() {
        println!("--- {name}: ok ({secs:.1} s)");
        Ok(())
    } else {
        Err(Failure::new(
            name,
            format!("`{}` exited with {status} after {secs:.1} s", describe(cmd)),
        ))
    }
}

/// Run `cmd` quietly and return its stdout, for probes (not steps).
pub fn capture(cmd: &mut Command) -> Option<String> {
    let out = cmd.output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn describe(cmd: &Command) -> String {
    let mut text = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        text.push(' ');
        text.push_str(&arg.to_string_lossy());
    }
    text
}
