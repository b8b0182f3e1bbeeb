//! Secrets for tests: setting them, and looking for their values where they must not be.

use std::io::Write;
use std::process::Stdio;

use super::daemon::Daemon;
use super::text;

/// `berth secret set NAME` with `value` on its standard input.
pub fn set(d: &Daemon, name: &str, value: &str) {
    let mut child = d.cmd(&["secret", "set", name]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(format!("{value}\n").as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// Every file under `dir`, searched for `needle`.
pub fn files_containing(dir: &std::path::Path, needle: &[u8]) -> Vec<String> {
    let mut hits = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let p = e.path();
            let Ok(meta) = std::fs::symlink_metadata(&p) else { continue };
            if meta.is_dir() {
                // The sandboxes' own files are the sandboxes' business.
                if !p.ends_with("pool") {
                    stack.push(p);
                }
            } else if p.ends_with("pool.img") {
                // The pool's file system, mounted on `pool`: the same files, as blocks.
                continue;
            } else if meta.is_file() && std::fs::read(&p).is_ok_and(|c| c.windows(needle.len()).any(|w| w == needle)) {
                hits.push(p.display().to_string());
            }
        }
    }
    hits
}

/// A certificate authority and a server certificate for `name`, made with the openssl command.
pub fn tls_files(dir: &std::path::Path, name: &str) {
    let run = |args: &[&str]| {
        let out = std::process::Command::new("openssl").args(args).current_dir(dir).output().unwrap();
        assert!(out.status.success(), "openssl {args:?}: {}", text(&out.stderr));
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=test upstream CA",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        &format!("/CN={name}"),
    ]);
    std::fs::write(dir.join("ext.cnf"), format!("subjectAltName=DNS:{name}\n")).unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
    ]);
}
