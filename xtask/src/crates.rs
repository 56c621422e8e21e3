//! `cargo xtask check-crates`: the library crates are ready for crates.io.
//!
//! * `cargo publish --dry-run` of the four library crates together (cargo
//!   packages each, then builds each package against the others' packages,
//!   so a path-only dependency or a file missing from an `include` list
//!   fails here);
//! * a scratch crate outside the workspace that depends on `loaderx-store`
//!   alone builds, and its dependency tree holds no PyO3, NumPy or Python.
//!
//! Also home of the version helpers: the workspace's `[workspace.package]
//! version` is the project's one version (see the test below).

use std::fs;
use std::process::Command;

use crate::steps::{self, Failure, Workspace};

/// The crates published to crates.io, in dependency order.
pub const PUBLISHED: [&str; 6] = [
    "loaderx-format",
    "loaderx-image",
    "loaderx-store",
    "loaderx-remote",
    "loaderx-sampler",
    "loaderx-loader",
];

/// The `version = "..."` of the `[workspace.package]` table of a workspace
/// manifest.
pub fn package_version(manifest: &str) -> Option<String> {
    table_value(manifest, "[workspace.package]", "version")
}

/// The string value of `key` in `table` of a TOML file, for the simple
/// `key = "value"` lines the manifests here use.
fn table_value(text: &str, table: &str, key: &str) -> Option<String> {
    let mut inside = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            inside = line == table;
            continue;
        }
        if !inside {
            continue;
        }
        if let Some((k, v)) = line.split_once('=')
            && k.trim() == key
        {
            return Some(v.trim().trim_matches('"').to_owned());
        }
    }
    None
}

pub fn check(ws: &Workspace) -> Result<(), Failure> {
    let mut args = vec!["publish", "--dry-run", "--allow-dirty"];
    for krate in PUBLISHED {
        args.extend_from_slice(&["-p", krate]);
    }
    ws.cargo("cargo publish --dry-run (library crates)", &args)?;
    downstream(ws)?;
    steps::banner("xtask check-crates: passed");
    Ok(())
}

/// A crate of its own (outside this workspace) on `loaderx-store` alone.
fn downstream(ws: &Workspace) -> Result<(), Failure> {
    const STEP: &str = "downstream crate on loaderx-store";
    let dir = ws.target_dir().join("downstream-check");
    let src = dir.join("src");
    fs::create_dir_all(&src).map_err(|e| Failure::new(STEP, format!("{}: {e}", src.display())))?;
    let store = ws.root.join("crates").join("loaderx-store");
    let manifest = format!(
        "[package]\nname = \"downstream-check\"\nversion = \"0.0.0\"\nedition = \"2024\"\npublish = false\n\n\
         [dependencies]\nloaderx-store = {{ path = {:?} }}\n\n[workspace]\n",
        store.display().to_string()
    );
    let main = "\
//! Writes three records with loaderx-store and reads them back.
fn main() {
    let dir = std::env::temp_dir().join(format!(\"downstream-check-{}\", std::process::id()));
    let store: loaderx_store::Store = loaderx_store::Store::open(&dir).expect(\"open\");
    store.append_fixed(&[1, 2, 3, 4, 5, 6], 3, 2).expect(\"append\");
    let mut out = [0u8; 2];
    store.gather(&[2], &mut out, 2).expect(\"gather\");
    assert_eq!(out, [5, 6]);
    drop(store);
    std::fs::remove_dir_all(&dir).expect(\"clean up\");
    println!(\"downstream crate: wrote and read back 3 records\");
}
";
    for (path, text) in [
        (dir.join("Cargo.toml"), manifest.as_str()),
        (src.join("main.rs"), main),
    ] {
        fs::write(&path, text)
            .map_err(|e| Failure::new(STEP, format!("{}: {e}", path.display())))?;
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let manifest_path = dir.join("Cargo.toml");
    let tree = steps::capture(
        Command::new(&cargo)
            .args([
                "tree",
                "--edges",
                "normal,build",
                "--prefix",
                "none",
                "--manifest-path",
            ])
            .arg(&manifest_path),
    )
    .ok_or_else(|| Failure::new(STEP, "`cargo tree` failed on the scratch crate"))?;
    let banned: Vec<&str> = tree
        .lines()
        .filter(|l| {
            let name = l.split_whitespace().next().unwrap_or("");
            name.starts_with("pyo3") || name == "numpy" || name.contains("python")
        })
        .collect();
    if !banned.is_empty() {
        return Err(Failure::new(
            STEP,
            format!("loaderx-store pulls Python bindings into its users: {banned:?}"),
        ));
    }
    println!(
        "--- {STEP}: {} crates in its tree, none of them PyO3, NumPy or Python",
        tree.lines().filter(|l| !l.trim().is_empty()).count()
    );
    let mut run = Command::new(&cargo);
    run.args(["run", "--quiet", "--manifest-path"])
        .arg(&manifest_path);
    steps::run(&format!("{STEP}: build and run"), &mut run)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn read(rel: &str) -> String {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        fs::read_to_string(root.join(rel)).unwrap()
    }

    /// One version, in the workspace manifest: every crate inherits it, the
    /// workspace's own dependency entries on its crates carry it, and the
    /// Python package takes it from Cargo (`dynamic = ["version"]`, and
    /// `loaderx.__version__` is the native module's `CARGO_PKG_VERSION`; the
    /// Python suite and `cargo xtask dist` check the built package).
    #[test]
    fn one_version_everywhere() {
        let workspace = read("Cargo.toml");
        let version = package_version(&workspace).expect("[workspace.package] version");
        for krate in PUBLISHED {
            let line = workspace
                .lines()
                .find(|l| l.starts_with(&format!("{krate} =")))
                .unwrap_or_else(|| panic!("{krate} missing from [workspace.dependencies]"));
            assert!(
                line.contains(&format!("version = \"{version}\"")),
                "[workspace.dependencies] {line:?} does not carry version {version}"
            );
        }
        for krate in [
            "loaderx-format",
            "loaderx-store",
            "loaderx-sampler",
            "loaderx-loader",
            "loaderx-py",
        ] {
            let manifest = read(&format!("crates/{krate}/Cargo.toml"));
            assert_eq!(
                table_value(&manifest, "[package]", "version.workspace").as_deref(),
                Some("true"),
                "crates/{krate}/Cargo.toml must take `version.workspace = true`"
            );
        }
        let pyproject = read("crates/loaderx-py/pyproject.toml");
        assert_eq!(
            table_value(&pyproject, "[project]", "dynamic").as_deref(),
            Some("[\"version\"]"),
            "pyproject.toml must take its version from Cargo"
        );
        assert!(
            !pyproject
                .lines()
                .any(|l| l.trim_start().starts_with("version")),
            "pyproject.toml must not state a version of its own"
        );
        let binding = read("crates/loaderx-py/src/lib.rs");
        assert!(
            binding.contains("m.add(\"__version__\", env!(\"CARGO_PKG_VERSION\"))"),
            "the native module's __version__ must be CARGO_PKG_VERSION"
        );
        let init = read("crates/loaderx-py/python/loaderx/__init__.py");
        assert!(
            init.contains("__version__: str = _native.__version__"),
            "loaderx.__version__ must be the native module's"
        );
        let changelog = read("CHANGELOG.md");
        assert!(
            changelog.contains(&format!("## {version}")),
            "CHANGELOG.md has no section for {version}"
        );
    }

    #[test]
    fn table_values_are_read_from_their_own_table() {
        let text = "[a]\nversion = \"1\"\n[workspace.package]\nversion = \"2.3.4\"\n";
        assert_eq!(package_version(text).as_deref(), Some("2.3.4"));
        assert_eq!(package_version("[a]\nversion = \"1\"\n"), None);
    }
}
