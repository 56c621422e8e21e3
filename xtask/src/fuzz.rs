//! `cargo xtask fuzz [SECONDS]`: every fuzz target for a while, through
//! `fuzz/run.sh` (which installs cargo-fuzz if needed, writes the seed corpus
//! and replays the regression inputs). `cargo xtask test` runs the same with a
//! short budget per target, so CI exercises the targets and their regressions.

use std::process::Command;

use crate::steps::{Failure, Workspace, run};

/// The targets under `fuzz/fuzz_targets/`.
pub const TARGETS: [&str; 3] = ["parse_index", "decode", "store_ops"];

/// Seconds per target when `cargo xtask fuzz` is given none.
pub const DEFAULT_SECONDS: u64 = 120;

/// Seconds per target inside `cargo xtask test`.
pub const SMOKE_SECONDS: u64 = 15;

/// Runs each target for `seconds`.
pub fn run_all(ws: &Workspace, seconds: u64) -> Result<(), Failure> {
    for target in TARGETS {
        let mut cmd = Command::new("bash");
        cmd.arg(ws.root.join("fuzz/run.sh"))
            .arg(target)
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
