//! The codec feature checks of `cargo xtask test`: the pure-Rust build of
//! the store compiles no C, and passes its tests; DEFLATE stores written by
//! the libdeflate and the flate2 builds read in the other.

use std::fs;

use crate::steps::{self, Failure, Workspace};

/// The feature set that must build without a C compiler.
const NO_C_FEATURES: &str = "deflate-flate2,lz4";

/// Crates that compile C (or link a C library built from source).
const C_BUILDERS: [&str; 4] = ["cc", "cmake", "pkg-config", "bindgen"];

/// `-sys` crates that hold no C: Rust declarations of the kernel's types
/// and constants, with no build script (`build = false`) and nothing
/// linked (rustix's, behind loaderx-store's inotify watches).
const PURE_RUST_SYS: [&str; 1] = ["linux-raw-sys"];

/// The store's tests the no-C build runs: the unit tests (every codec's
/// round trips among them) and the integration tests that use a codec
/// chosen by feature or DEFLATE (which this build decodes with flate2):
/// codecs, stores, hostile and damaged input, the model, the 0.5.4
/// fixtures, both formats and run tables. The rest (crashes, locks, processes, image
/// stores) runs once, in the default build.
const NO_C_TESTS: [&str; 21] = [
    "--lib",
    "--test",
    "codecs",
    "--test",
    "store",
    "--test",
    "hostile",
    "--test",
    "damage",
    "--test",
    "model",
    "--test",
    "fixtures_054",
    "--test",
    "compat",
    "--test",
    "v2",
    "--test",
    "raw_runs",
    "--test",
    "run_table",
];

/// `cargo tree` of `loaderx-store` with only `deflate-flate2,lz4` lists no
/// C build helper among its normal and build dependencies; then that build
/// runs the store's codec-related tests ([`NO_C_TESTS`]).
pub fn no_c_build(ws: &Workspace) -> Result<(), Failure> {
    let name = "no-C build of loaderx-store (deflate-flate2,lz4): cargo tree has no C build helper";
    steps::banner(&format!("==> {name}"));
    let mut cmd = ws.cargo_command(&[
        "tree",
        "-p",
        "loaderx-store",
        "--no-default-features",
        "--features",
        NO_C_FEATURES,
        "-e",
        "normal,build",
        "--prefix",
        "none",
        "--format",
        "{p}",
    ]);
    let tree = steps::capture(&mut cmd)
        .ok_or_else(|| Failure::new(name, "`cargo tree` failed".to_owned()))?;
    let found: Vec<&str> = tree
        .lines()
        .filter(|line| {
            let krate = line.split_whitespace().next().unwrap_or("");
            C_BUILDERS.contains(&krate)
                || (krate.ends_with("-sys") && !PURE_RUST_SYS.contains(&krate))
        })
        .collect();
    if !found.is_empty() {
        return Err(Failure::new(
            name,
            format!("the no-C feature set pulls in: {}", found.join(", ")),
        ));
    }
    println!(
        "--- {name}: ok ({} crates, none builds C)",
        tree.lines().count()
    );
    // A C compiler that always fails: a build script reaching for one
    // (through `cc` or by hand) breaks this step.
    let args = [
        &[
            "test",
            "--profile",
            steps::TEST_PROFILE,
            "-p",
            "loaderx-store",
            "--no-default-features",
            "--features",
            NO_C_FEATURES,
        ][..],
        &NO_C_TESTS[..],
    ]
    .concat();
    let mut cmd = ws.cargo_command(&args);
    cmd.env("CC", "false").env("CXX", "false");
    steps::run(
        &format!(
            "cargo test --profile checked -p loaderx-store --no-default-features --features deflate-flate2,lz4 {} (CC=false)",
            NO_C_TESTS.join(" ")
        ),
        &mut cmd,
    )
}

/// The libdeflate build writes DEFLATE stores, the flate2 build writes its
/// own and reads them, and the libdeflate build reads the flate2 ones.
pub fn deflate_cross(ws: &Workspace) -> Result<(), Failure> {
    let name = "DEFLATE stores cross libdeflate <-> flate2";
    let dir = ws.target_dir().join("deflate-cross");
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir)
        .map_err(|e| Failure::new(name, format!("create {}: {e}", dir.display())))?;
    let libdeflate: &[&str] = &[
        "test",
        "--profile",
        steps::TEST_PROFILE,
        "-p",
        "loaderx-store",
        "--test",
        "deflate_cross",
    ];
    let flate2 = &[
        libdeflate,
        &["--no-default-features", "--features", NO_C_FEATURES],
    ]
    .concat();
    for (step, args) in [
        ("libdeflate writes", libdeflate),
        ("flate2 writes, reads libdeflate's", flate2),
        ("libdeflate reads flate2's", libdeflate),
    ] {
        let mut cmd = ws.cargo_command(args);
        cmd.env("LOADERX_CROSS_DIR", &dir);
        steps::run(&format!("{name}: {step}"), &mut cmd)?;
    }
    for marker in ["flate2-read-libdeflate", "libdeflate-read-flate2"] {
        if !dir.join(marker).is_file() {
            return Err(Failure::new(
                name,
                format!("the {marker} check did not run"),
            ));
        }
    }
    Ok(())
}
