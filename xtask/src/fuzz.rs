//! `cargo xtask fuzz [SECONDS]`: every fuzz target for a while, through
//! `fuzz/run.sh` (which installs cargo-fuzz if needed, writes the seed corpus
//! and replays the regression inputs). `cargo xtask test` runs the same with a
//! short budget per target, so CI exercises the targets and their regressions.

use std::fs;
use std::process::Command;

use crate::steps::{Failure, Workspace, run};

/// Seconds per target when `cargo xtask fuzz` is given none.
pub const DEFAULT_SECONDS: u64 = 120;

/// Seconds per target inside `cargo xtask test`.
pub const SMOKE_SECONDS: u64 = 15;

/// The fuzz targets: one per file in `fuzz/fuzz_targets/` (the only list of
/// them; `fuzz/Cargo.toml` declares each as a `[[bin]]` of the same name, and
/// `cargo fuzz run` refuses a name it does not declare).
pub fn targets(ws: &Workspace) -> Result<Vec<String>, Failure> {
    let dir = ws.root.join("fuzz").join("fuzz_targets");
    let fail = |reason: String| Failure::new("list fuzz targets", reason);
    let entries = fs::read_dir(&dir).map_err(|e| fail(format!("{}: {e}", dir.display())))?;
    let mut targets = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|e| fail(format!("{}: {e}", dir.display())))?
            .path();
        if path.extension().is_some_and(|ext| ext == "rs")
            && let Some(stem) = path.file_stem().and_then(|s| s.to_str())
        {
            targets.push(stem.to_owned());
        }
    }
    if targets.is_empty() {
        return Err(fail(format!("no `*.rs` target in {}", dir.display())));
    }
    targets.sort();
    Ok(targets)
}

/// Runs each target for `seconds`.
pub fn run_all(ws: &Workspace, seconds: u64) -> Result<(), Failure> {
    for target in targets(ws)? {
        let mut cmd = Command::new("bash");
        cmd.arg(ws.root.join("fuzz/run.sh"))
            .arg(&target)
            .arg(seconds.to_string())
            .current_dir(&ws.root);
        run(&format!("fuzz {target} for {seconds} s"), &mut cmd)?;
    }
    Ok(())
}

/// Parses the optional SECONDS argument.
pub fn seconds(rest: &[String]) -> Result<u64, Failure> {
    match rest {
        [] => Ok(DEFAULT_SECONDS),
        [s] => s.parse().ok().filter(|&n| n > 0).ok_or_else(|| {
            Failure::new(
                "arguments",
                format!("SECONDS must be a positive integer, got {s:?}"),
            )
        }),
        _ => Err(Failure::new(
            "arguments",
            format!("`fuzz` takes at most one argument (SECONDS), got {rest:?}"),
        )),
    }
}
