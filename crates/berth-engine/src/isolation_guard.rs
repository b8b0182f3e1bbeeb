//! Nothing outside the backends decides by the isolation kind: the engine, the shim, the transports, the
//! command line and the runtime's own lifecycle ask `berth_runtime::backend(kind)` and what it `supports()`.
//! This test reads every crate's sources and fails on a new branch on the kind (a variant of `Isolation`
//! named, or gVisor's module used) outside the files allowed below; a third backend then needs no change
//! outside berth-runtime's backends.

use std::path::{Path, PathBuf};

/// Where the kind may be named (paths below `crates/`), and why.
const ALLOWED: &[(&str, &str)] = &[
    ("berth-api/src/isolation.rs", "the type itself"),
    ("berth-api/src/openapi_tests/", "examples of the API's documents"),
    ("berth-runtime/src/backend/", "the trait, `backend()` and the namespaces backend"),
    ("berth-runtime/src/gvisor.rs", "the gVisor backend"),
    ("berth-runtime/src/gvisor_backend.rs", "the gVisor backend"),
    ("berth-runtime/src/gvisor_checkpoint.rs", "the gVisor backend"),
    ("berth-runtime/src/checkpoint.rs", "the namespaces backend's CRIU half: its manifests say whose they are"),
    ("berth-bench/src/exec.rs", "a benchmark of each backend against its native peer"),
    ("berth-bench/src/gvisor.rs", "a benchmark of gVisor against raw runsc"),
    ("berth-bench/src/lib.rs", "the dispatch to that benchmark (its module is named gvisor)"),
    ("berth-bench/src/hibernate.rs", "a benchmark of each backend's hibernation"),
    ("berth-bench/src/hibernate_gvisor.rs", "a benchmark of gVisor against raw runsc"),
    ("berth-engine/src/isolation_guard.rs", "this test"),
];

/// What names a kind: one of its variants, or gVisor's module.
fn names_a_kind(line: &str) -> bool {
    if line.contains("Isolation::Gvisor") || line.contains("Isolation::Namespaces") {
        return true;
    }
    line.match_indices("gvisor::")
        .any(|(at, _)| !line[..at].chars().next_back().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_'))
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_code_outside_the_backends_branches_on_the_isolation_kind() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for krate in std::fs::read_dir(&crates).into_iter().flatten().flatten() {
        sources(&krate.path().join("src"), &mut files);
    }
    assert!(files.len() > 100, "the crates' sources were not found under {}", crates.display());
    for (allowed, _) in ALLOWED {
        assert!(crates.join(allowed).exists(), "{allowed} is allowed but no longer exists: take it off the list");
    }
    let mut found = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&crates).unwrap_or(file).to_string_lossy().replace('\\', "/");
        if ALLOWED.iter().any(|(a, _)| rel.starts_with(a)) {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap_or_default();
        for (i, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if !code.starts_with("//") && names_a_kind(code) {
                found.push(format!("{rel}:{}: {}", i + 1, code));
            }
        }
    }
    assert!(
        found.is_empty(),
        "code outside the backends decides by the isolation kind; ask berth_runtime::backend(kind) and its \
         supports() instead (or, for a benchmark or a type, add the file to ALLOWED with why):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_guard_sees_a_branch_on_the_kind() {
    assert!(names_a_kind("if isolation == berth_api::Isolation::Gvisor {"));
    assert!(names_a_kind("Isolation::Namespaces => Reach::Files(pid),"));
    assert!(names_a_kind("let r = berth_runtime::gvisor::runsc();"));
    assert!(!names_a_kind("Command::Bench(args) if args.gvisor => bench_gvisor::bench_gvisor(&cli.root, args),"));
    assert!(!names_a_kind("if berth_runtime::backend(isolation).supports().command_cgroups {"));
}
