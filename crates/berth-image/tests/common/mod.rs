//! Builders for the archives the tests import: tar layers (with raw, hostile headers), OCI layouts and docker
//! save archives, plus a way to print a tree for exact comparison.
#![allow(clippy::unwrap_used, dead_code)]

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use tar::{EntryType, Header};

pub const SHIFT: u32 = 0x6f00_0000;

/// A tar layer under construction.
pub struct Tar {
    b: tar::Builder<Vec<u8>>,
}

impl Default for Tar {
    fn default() -> Self {
        Tar { b: tar::Builder::new(Vec::new()) }
    }
}

impl Tar {
    pub fn new() -> Self {
        Self::default()
    }

    /// An entry whose name and link name are written byte for byte, whatever they hold.
    pub fn raw(&mut self, path: &[u8], kind: EntryType, link: &[u8], data: &[u8], mode: u32, uid: u64) -> &mut Self {
        let mut h = Header::new_gnu();
        {
            let old = h.as_old_mut();
            old.name[..path.len()].copy_from_slice(path);
            old.linkname[..link.len()].copy_from_slice(link);
        }
        h.set_entry_type(kind);
        h.set_size(data.len() as u64);
        h.set_mode(mode);
        h.set_uid(uid);
        h.set_gid(uid);
        h.set_mtime(1_700_000_000);
        if matches!(kind, EntryType::Char | EntryType::Block) {
            h.set_device_major(1).unwrap();
            h.set_device_minor(3).unwrap();
        }
        h.set_cksum();
        self.b.append(&h, data).unwrap();
        self
    }

    pub fn dir(&mut self, path: &str) -> &mut Self {
        self.raw(path.as_bytes(), EntryType::Directory, b"", b"", 0o755, 0)
    }

    pub fn file(&mut self, path: &str, data: &str) -> &mut Self {
        self.raw(path.as_bytes(), EntryType::Regular, b"", data.as_bytes(), 0o644, 0)
    }

    pub fn symlink(&mut self, path: &str, target: &str) -> &mut Self {
        self.raw(path.as_bytes(), EntryType::Symlink, target.as_bytes(), b"", 0o777, 0)
    }

    pub fn hardlink(&mut self, path: &str, target: &str) -> &mut Self {
        self.raw(path.as_bytes(), EntryType::Link, target.as_bytes(), b"", 0o644, 0)
    }

    /// A PAX extended header for the next entry.
    pub fn pax(&mut self, records: &[(&str, &[u8])]) -> &mut Self {
        let mut data = Vec::new();
        for (key, value) in records {
            let body = key.len() + value.len() + 3;
            let mut len = body + body.to_string().len();
            if len.to_string().len() != body.to_string().len() {
                len += 1;
            }
            data.extend_from_slice(format!("{len} {key}=").as_bytes());
            data.extend_from_slice(value);
            data.push(b'\n');
        }
        self.raw(b"PaxHeaders/x", EntryType::XHeader, b"", &data, 0o644, 0)
    }

    pub fn bytes(&mut self) -> Vec<u8> {
        self.b.finish().unwrap();
        self.b.get_ref().clone()
    }
}

pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(data).unwrap();
    enc.finish().unwrap()
}

pub fn zstd(data: &[u8]) -> Vec<u8> {
    zstd::stream::encode_all(data, 3).unwrap()
}

pub fn sha256(data: &[u8]) -> String {
    Sha256::digest(data).iter().map(|b| format!("{b:02x}")).collect()
}

/// A scratch area: `outside/`, which nothing may ever touch, and `outside/p/dest/` to import into, placed
/// so that `../../` from the image root lands in `outside/` and a bug can only ever write into the scratch
/// area, never elsewhere on the host.
pub struct Scratch {
    pub tmp: tempfile::TempDir,
    pub dest: PathBuf,
    pub outside: PathBuf,
}

impl Scratch {
    pub fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside");
        let dest = outside.join("p/dest");
        std::fs::create_dir_all(&dest).unwrap();
        Scratch { tmp, dest, outside }
    }

    pub fn write(&self, name: &str, data: &[u8]) -> PathBuf {
        let path = self.tmp.path().join(name);
        std::fs::write(&path, data).unwrap();
        path
    }

    /// Asserts that `outside/` holds nothing but the way to `dest/` (and what the test itself put there).
    pub fn assert_untouched(&self) {
        let mut found = Vec::new();
        for entry in walkdir(&self.outside) {
            if !entry.starts_with(&self.dest) {
                found.push(entry.strip_prefix(&self.outside).unwrap().display().to_string());
            }
        }
        found.sort();
        assert_eq!(found, ["p"], "something was written outside the image");
    }
}

fn walkdir(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if std::fs::symlink_metadata(&path).unwrap().is_dir() {
            out.extend(walkdir(&path));
        }
        out.push(path);
    }
    out
}

/// The tree under `root`, sorted: `dir/`, `file`, `link -> target`, `fifo|`.
pub fn tree(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let rel = path.strip_prefix(root).unwrap().display().to_string();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        if meta.file_type().is_symlink() {
            out.push(format!("{rel} -> {}", std::fs::read_link(&path).unwrap().display()));
        } else if meta.is_dir() {
            out.push(format!("{rel}/"));
            walk(root, &path, out);
        } else if meta.file_type().is_file() {
            out.push(rel);
        } else {
            out.push(format!("{rel}|"));
        }
    }
}

pub fn meta(path: &Path) -> std::fs::Metadata {
    std::fs::symlink_metadata(path).unwrap()
}

pub fn mode(path: &Path) -> u32 {
    meta(path).mode() & 0o7777
}

/// One layer for an OCI layout: the blob bytes and the media type to put in the manifest.
pub struct Layer {
    pub blob: Vec<u8>,
    pub media_type: &'static str,
}

pub fn gz_layer(tar: Vec<u8>) -> Layer {
    Layer { blob: gzip(&tar), media_type: "application/vnd.oci.image.layer.v1.tar+gzip" }
}

pub fn plain_layer(tar: Vec<u8>) -> Layer {
    Layer { blob: tar, media_type: "application/vnd.oci.image.layer.v1.tar" }
}

/// Writes a blob into `layout/blobs/sha256/` and returns its descriptor JSON.
pub fn blob(layout: &Path, media_type: &str, data: &[u8]) -> serde_json::Value {
    let hex = sha256(data);
    let dir = layout.join("blobs/sha256");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(&hex), data).unwrap();
    serde_json::json!({"mediaType": media_type, "digest": format!("sha256:{hex}"), "size": data.len()})
}

pub fn config_json(arch: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "architecture": arch,
        "os": "linux",
        "config": {"Env": ["PATH=/usr/bin:/bin"], "Cmd": ["/bin/sh"], "WorkingDir": "/srv/app", "User": "1000"},
        "rootfs": {"type": "layers", "diff_ids": []}
    }))
    .unwrap()
}

/// Writes an image manifest (with its config and layers) as blobs and returns the manifest's descriptor.
pub fn manifest(layout: &Path, arch: &str, layers: &[Layer]) -> serde_json::Value {
    let config = blob(layout, "application/vnd.oci.image.config.v1+json", &config_json(arch));
    let layers: Vec<_> = layers.iter().map(|l| blob(layout, l.media_type, &l.blob)).collect();
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config,
        "layers": layers,
    });
    blob(layout, "application/vnd.oci.image.manifest.v1+json", &serde_json::to_vec(&manifest).unwrap())
}

/// Writes `oci-layout` and `index.json` listing `manifests`.
pub fn finish_layout(layout: &Path, manifests: Vec<serde_json::Value>) {
    std::fs::write(layout.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    let index = serde_json::json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": manifests});
    std::fs::write(layout.join("index.json"), serde_json::to_vec(&index).unwrap()).unwrap();
}

/// A tar of a directory's contents (names relative to it), as `tar -C dir -cf - .` would make.
pub fn tar_of_dir(dir: &Path) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    b.append_dir_all(".", dir).unwrap();
    b.into_inner().unwrap()
}
