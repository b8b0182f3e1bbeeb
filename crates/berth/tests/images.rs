//! Image import through the daemon: an OCI layout with whiteouts and an opaque directory becomes the right
//! tree, sandboxes run on it, a hostile archive is reported and writes nothing outside, and images in use
//! cannot be removed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Command;

use common::daemon::Daemon;
use common::text;
use serde_json::Value;

/// Build archives with Python's tarfile (installed by the test set-up): an OCI layout whose second layer
/// deletes a file and makes a directory opaque, and a hostile rootfs tarball.
const BUILD: &str = r#"
import hashlib, io, json, os, sys, tarfile
out, berth = sys.argv[1], sys.argv[2]

def layer(entries):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for e in entries:
            info = tarfile.TarInfo(e["name"])
            info.mode = e.get("mode", 0o644)
            info.type = e.get("type", tarfile.REGTYPE)
            info.linkname = e.get("link", "")
            data = e.get("data", b"")
            if info.type == tarfile.REGTYPE:
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
            else:
                t.addfile(info)
    return buf.getvalue()

def blob(root, data):
    d = hashlib.sha256(data).hexdigest()
    os.makedirs(os.path.join(root, "blobs", "sha256"), exist_ok=True)
    open(os.path.join(root, "blobs", "sha256", d), "wb").write(data)
    return {"digest": "sha256:" + d, "size": len(data)}

exe = open(berth, "rb").read()
dirs = [{"name": n, "type": tarfile.DIRTYPE, "mode": 0o755} for n in ["bin", "etc", "opt", "opt/dir"]]
l1 = layer(dirs + [
    {"name": "bin/berth", "data": exe, "mode": 0o755},
    {"name": "etc/keep", "data": b"kept\n"},
    {"name": "etc/gone", "data": b"deleted by layer 2\n"},
    {"name": "opt/dir/a", "data": b"a\n"},
    {"name": "opt/dir/b", "data": b"b\n"},
])
l2 = layer([
    {"name": "etc/.wh.gone"},
    {"name": "opt/dir/.wh..wh..opq"},
    {"name": "opt/dir/c", "data": b"c\n"},
    {"name": "etc/keep", "data": b"kept, layer 2\n"},
])
oci = os.path.join(out, "oci")
os.makedirs(oci)
open(os.path.join(oci, "oci-layout"), "w").write(json.dumps({"imageLayoutVersion": "1.0.0"}))
config = blob(oci, json.dumps({"architecture": "amd64", "os": "linux",
    "config": {"Env": ["PATH=/bin", "IMAGE_FLAVOUR=test"], "Cmd": ["/bin/berth"], "WorkingDir": "/"},
    "rootfs": {"type": "layers", "diff_ids": []}}).encode())
config["mediaType"] = "application/vnd.oci.image.config.v1+json"
layers = []
for l in (l1, l2):
    d = blob(oci, l)
    d["mediaType"] = "application/vnd.oci.image.layer.v1.tar"
    layers.append(d)
manifest = blob(oci, json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": config, "layers": layers}).encode())
manifest["mediaType"] = "application/vnd.oci.image.manifest.v1+json"
manifest["platform"] = {"architecture": "amd64", "os": "linux"}
open(os.path.join(oci, "index.json"), "w").write(json.dumps({"schemaVersion": 2, "manifests": [manifest]}))

hostile = layer([
    {"name": "ok", "data": b"fine\n"},
    {"name": "../../escaped", "data": b"outside\n"},
    {"name": "link", "type": tarfile.SYMTYPE, "link": "/"},
    {"name": "link/written-through", "data": b"through the link\n"},
    {"name": "dev", "type": tarfile.CHRTYPE},
    {"name": "suid", "data": b"x", "mode": 0o4755},
])
open(os.path.join(out, "hostile.tar"), "wb").write(hostile)
"#;

fn build(dir: &Path) {
    let out = Command::new("python3")
        .args(["-c", BUILD, dir.to_str().unwrap(), env!("CARGO_BIN_EXE_berth")])
        .output()
        .unwrap();
    assert!(out.status.success(), "building the archives: {}", text(&out.stderr));
}

fn names(d: &Daemon, id: &str, path: &str) -> Vec<String> {
    let (status, v) = d.json("GET", id, "files", path, "", b"");
    assert_eq!(status, 200, "{v}");
    let mut n: Vec<String> = v.as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap().to_string()).collect();
    n.sort();
    n
}

#[test]
fn an_oci_layout_with_whiteouts_imports_to_the_right_tree_and_runs() {
    let d = Daemon::start();
    let src = d.dir.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    build(&src);
    let out = d.berth(&["image", "import", "tiny", src.join("oci").to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let image: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(image["kind"], "oci");
    assert_eq!(image["layers"], 2);

    let id = d.create(&["--image", "tiny"]);
    assert_eq!(names(&d, &id, "/opt/dir"), ["c"], "the opaque directory hides layer 1's entries");
    assert!(!names(&d, &id, "/etc").contains(&"gone".to_string()), "the whiteout deletes etc/gone");
    let (_, keep) = d.files("GET", &id, "files", "/etc/keep", "", b"");
    assert_eq!(text(&keep), "kept, layer 2\n");
    // The image's own binary runs, as root inside, with the image's environment.
    let probe = d.berth(&["exec", &id, "--", "/bin/berth", "probe"]);
    assert!(probe.status.success(), "{}", text(&probe.stderr));
    let report: Value = serde_json::from_slice(&probe.stdout).unwrap();
    assert_eq!(report["uid"], 0, "{report}");
    let journal: Value = serde_json::from_slice(&d.berth(&["journal", &id, "--json"]).stdout).unwrap();
    let names = &journal[0]["args"]["env_names"];
    assert!(names.as_array().unwrap().iter().any(|n| n == "IMAGE_FLAVOUR"), "the image's Env applies: {names}");

    let in_use = d.berth(&["image", "rm", "tiny"]);
    assert!(text(&in_use.stderr).contains("used by"), "{}", text(&in_use.stderr));
    let taken = d.berth(&["image", "import", "tiny", src.join("oci").to_str().unwrap()]);
    assert!(text(&taken.stderr).contains("already exists"), "{}", text(&taken.stderr));
    assert!(d.berth(&["rm", &id]).status.success());
    assert!(d.berth(&["image", "rm", "tiny"]).status.success());
    assert!(!d.root().join("images/tiny").exists());
    assert_eq!(d.http("DELETE", "/v1/images/host", "").0, 409, "the built-in image stays");
    assert_eq!(d.http("DELETE", "/v1/images/tiny", "").0, 404);
}

#[test]
fn a_hostile_archive_is_reported_and_writes_nothing_outside_the_image() {
    let d = Daemon::start();
    let src = d.dir.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    build(&src);
    let out = d.berth(&["image", "import", "bad", src.join("hostile.tar").to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let image: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rejected: Vec<String> = image["rejected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| format!("{} {}", r["path"].as_str().unwrap(), r["reason"].as_str().unwrap()))
        .collect();
    for path in ["../../escaped", "link/written-through", "dev", "suid"] {
        assert!(rejected.iter().any(|r| r.starts_with(path)), "{path} not reported: {rejected:?}");
    }
    let rootfs = d.root().join("images/bad/rootfs");
    for outside in [d.root().join("images/escaped"), d.root().join("escaped"), d.dir.path().join("escaped")] {
        assert!(!outside.exists(), "{} was written", outside.display());
    }
    assert!(!Path::new("/written-through").exists());
    assert_eq!(std::fs::read_to_string(rootfs.join("ok")).unwrap(), "fine\n");
    use std::os::unix::fs::MetadataExt;
    let suid = std::fs::metadata(rootfs.join("suid"));
    assert!(suid.is_err() || suid.unwrap().mode() & 0o6000 == 0, "the setuid bit is stripped");

    // Bad input fails clearly and leaves nothing.
    let missing = d.berth(&["image", "import", "nothing", "/nonexistent/archive.tar"]);
    assert_eq!(missing.status.code(), Some(125), "{}", text(&missing.stderr));
    assert!(text(&missing.stderr).contains("/nonexistent/archive.tar: No such file"), "{}", text(&missing.stderr));
    let (status, body) = d.http("POST", "/v1/images", r#"{"name":"x","source":"relative/path"}"#);
    assert_eq!(status, 400, "{body}");
    let (status, _) = d.http("POST", "/v1/images", r#"{"name":"bad name!","source":"/tmp"}"#);
    assert_eq!(status, 400);
    let garbage = d.dir.path().join("garbage.tar");
    std::fs::write(&garbage, b"this is not an archive at all").unwrap();
    let refused = d.berth(&["image", "import", "junk", garbage.to_str().unwrap()]);
    assert_ne!(refused.status.code(), Some(0));
    assert!(!d.root().join("images/junk").exists());
    let listed = d.berth(&["image", "ls", "--json"]);
    let names: Vec<String> = serde_json::from_slice::<Value>(&listed.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["bad", "host"]);
}
