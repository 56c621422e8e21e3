//! `cargo xtask cross-test [windows|aarch64|all]`: the test suites of
//! `loaderx-format` and `loaderx-store` built for another platform and run
//! here under an emulator: `x86_64-pc-windows-gnu` under Wine,
//! `aarch64-unknown-linux-gnu` under qemu-user. Cargo is pointed at the
//! cross linker and the emulator through `CARGO_TARGET_<TRIPLE>_LINKER` and
//! `_RUNNER`, so every test binary (and every child process a test spawns
//! from its own executable) runs emulated.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::steps::{self, Failure, Workspace};
use crate::tools::{self, Tool};

/// The crates whose suites run on every platform.
const CRATES: [&str; 2] = ["loaderx-format", "loaderx-store"];

/// One emulated platform.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Platform {
    Windows,
    Aarch64,
}

/// A test left out on one platform, and why (printed before the run).
struct Skip {
    test: &'static str,
    reason: &'static str,
}

// Tests that cannot run on Windows carry `#[cfg_attr(windows, ignore =
// "reason")]` themselves (they cut or delete files a store has mapped, which
// Windows refuses, or run the original loaderx from a Unix venv), so native
// Windows runs skip them too; the test harness prints each with its reason.
const WINDOWS_SKIPS: &[Skip] = &[];

const AARCH64_SKIPS: &[Skip] = &[Skip {
    test: "a_forked_child_cannot_write_or_compact_behind_its_parent",
    reason: "fork.rs: under qemu-user the forked child exits with status 127 before it \
             reports (the emulator's fork, not the store); fork is covered natively",
}];

impl Platform {
    fn triple(self) -> &'static str {
        match self {
            Platform::Windows => "x86_64-pc-windows-gnu",
            Platform::Aarch64 => "aarch64-unknown-linux-gnu",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Platform::Windows => "windows (Wine)",
            Platform::Aarch64 => "aarch64 (qemu-user)",
        }
    }

    fn tools(self) -> &'static [Tool] {
        match self {
            Platform::Windows => &[
                Tool {
                    program: "wine",
                    probe_arg: "--version",
                    package: "wine",
                },
                // Debian's 64-bit Wine loader (not on PATH; `wine` runs it).
                Tool {
                    program: "/usr/lib/wine/wine64",
                    probe_arg: "",
                    package: "wine64",
                },
                Tool {
                    program: "x86_64-w64-mingw32-gcc",
                    probe_arg: "--version",
                    package: "gcc-mingw-w64-x86-64",
                },
            ],
            Platform::Aarch64 => &[
                Tool {
                    program: "qemu-aarch64",
                    probe_arg: "--version",
                    package: "qemu-user",
                },
                Tool {
                    program: "aarch64-linux-gnu-gcc",
                    probe_arg: "--version",
                    package: "gcc-aarch64-linux-gnu",
                },
                // The aarch64 C library qemu-user loads the tests against.
                Tool {
                    program: "/usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1",
                    probe_arg: "",
                    package: "libc6-dev-arm64-cross",
                },
            ],
        }
    }

    fn skips(self) -> &'static [Skip] {
        match self {
            Platform::Windows => WINDOWS_SKIPS,
            Platform::Aarch64 => AARCH64_SKIPS,
        }
    }
}

/// Parses `[windows|aarch64|all]` (default all).
pub fn platforms(rest: &[String]) -> Result<Vec<Platform>, Failure> {
    match rest
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        [] | ["all"] => Ok(vec![Platform::Windows, Platform::Aarch64]),
        ["windows"] => Ok(vec![Platform::Windows]),
        ["aarch64"] => Ok(vec![Platform::Aarch64]),
        _ => Err(Failure::new(
            "arguments",
            format!("`cross-test` takes one of windows, aarch64, all; got {rest:?}"),
        )),
    }
}

/// `CARGO_TARGET_<TRIPLE>_<what>` as cargo spells it.
pub fn cargo_target_var(triple: &str, what: &str) -> String {
    format!(
        "CARGO_TARGET_{}_{what}",
        triple.to_ascii_uppercase().replace(['-', '.'], "_")
    )
}

/// Runs the suites for each platform in turn; all must pass.
pub fn run(ws: &Workspace, platforms: &[Platform]) -> Result<(), Failure> {
    for &platform in platforms {
        run_one(ws, platform)?;
    }
    steps::banner(&format!(
        "xtask cross-test: passed on {}",
        platforms
            .iter()
            .map(|p| p.name())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    Ok(())
}

fn run_one(ws: &Workspace, platform: Platform) -> Result<(), Failure> {
    let triple = platform.triple();
    tools::debian(&format!("tools for {}", platform.name()), platform.tools())?;
    tools::rust_target(triple)?;

    let mut args = vec!["test", "--target", triple, "--no-fail-fast"];
    for krate in CRATES {
        args.extend_from_slice(&["-p", krate]);
    }
    let mut cmd = ws.cargo_command(&args);
    let cc_var = format!("CC_{}", triple.replace('-', "_"));
    match platform {
        Platform::Windows => {
            let prefix = wine_prefix(ws)?;
            cmd.env(cargo_target_var(triple, "LINKER"), "x86_64-w64-mingw32-gcc")
                .env(cargo_target_var(triple, "RUNNER"), "wine")
                .env(cc_var, "x86_64-w64-mingw32-gcc")
                .env("WINEPREFIX", prefix)
                .env("WINEDEBUG", "-all");
        }
        Platform::Aarch64 => {
            cmd.env(cargo_target_var(triple, "LINKER"), "aarch64-linux-gnu-gcc")
                .env(
                    cargo_target_var(triple, "RUNNER"),
                    "qemu-aarch64 -L /usr/aarch64-linux-gnu",
                )
                .env(cc_var, "aarch64-linux-gnu-gcc")
                // Tests that re-run their own binary as a child process start
                // it through the emulator too (tests/common/mod.rs).
                .env(
                    "LOADERX_TEST_CHILD_RUNNER",
                    "qemu-aarch64 -L /usr/aarch64-linux-gnu",
                )
                // Maps over each file's length, not its whole extent:
                // qemu-user books every page of every map it is asked for,
                // and the multi-process test's opener (a store opened over
                // and over) ran it out of memory (19.5 GB) with extent maps.
                .env("LOADERX_GROWING_MAPS", "1");
        }
    }
    // Test-binary arguments: the skips, each announced with its reason.
    cmd.arg("--");
    for skip in platform.skips() {
        println!(
            "--- cross-test {}: SKIPPING tests matching `{}`: {}",
            platform.name(),
            skip.test,
            skip.reason
        );
        cmd.args(["--skip", skip.test]);
    }
    steps::run(
        &format!(
            "cargo test {} for {triple} under {}",
            CRATES.join(" "),
            platform.name()
        ),
        &mut cmd,
    )
}

/// A Wine prefix of our own under the target directory, made on first use,
/// with what this Wine lacks for Rust programs added.
///
/// Rust's standard library (1.78 and later) imports `ProcessPrng` from
/// `bcryptprimitives.dll`, which Wine before 9.0 does not have: every test
/// binary would fail to start (status `c0000135`). When the prefix lacks the
/// DLL, a stand-in built from [`PRNG_SHIM`] with mingw-w64 is put in its
/// `system32`: `ProcessPrng` filled from `RtlGenRandom`, the system's
/// random source.
pub fn wine_prefix(ws: &Workspace) -> Result<PathBuf, Failure> {
    const STEP: &str = "wine prefix";
    let prefix = ws.target_dir().join("wine-prefix");
    let system32 = prefix.join("drive_c").join("windows").join("system32");
    if !system32.is_dir() {
        let mut boot = Command::new("wineboot");
        boot.arg("--init")
            .env("WINEPREFIX", &prefix)
            .env("WINEDEBUG", "-all");
        steps::run("create the wine prefix (wineboot --init)", &mut boot)?;
        if !system32.is_dir() {
            return Err(Failure::new(
                STEP,
                format!("wineboot made no {}", system32.display()),
            ));
        }
    }
    let dll = system32.join("bcryptprimitives.dll");
    if !dll.is_file() {
        build_prng_shim(&ws.target_dir().join("wine-shim"), &dll)?;
    }
    Ok(prefix)
}

/// The stand-in for Wine's missing `bcryptprimitives.dll` (see
/// [`wine_prefix`]). `ProcessPrng` is documented to always return TRUE.
const PRNG_SHIM: &str = r"/* Stand-in for bcryptprimitives.dll on Wine < 9 (written by loaderx's xtask). */
#include <windows.h>
#include <ntsecapi.h>

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
    while (len > 0) {
        ULONG part = len > 0x40000000 ? 0x40000000 : (ULONG)len;
        if (!RtlGenRandom(data, part))
            return FALSE;
        data += part;
        len -= part;
    }
    return TRUE;
}
";

fn build_prng_shim(work: &Path, dll: &Path) -> Result<(), Failure> {
    const STEP: &str = "wine: bcryptprimitives.dll stand-in";
    fs::create_dir_all(work).map_err(|e| Failure::new(STEP, format!("{}: {e}", work.display())))?;
    let source = work.join("bcryptprimitives.c");
    fs::write(&source, PRNG_SHIM)
        .map_err(|e| Failure::new(STEP, format!("{}: {e}", source.display())))?;
    let mut cc = Command::new("x86_64-w64-mingw32-gcc");
    cc.args(["-shared", "-O2", "-Wl,--kill-at", "-o"])
        .arg(dll)
        .arg(&source)
        .arg("-ladvapi32");
    println!(
        "--- this Wine has no bcryptprimitives.dll (Rust's std needs its ProcessPrng); \
         building a stand-in into the prefix"
    );
    steps::run(STEP, &mut cc)
}
