//! Importing each kind of source, and checking the tree that results.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use berth_image::{ImportError, Options, SourceKind, detect, import};
use common::*;

fn opts() -> Options<'static> {
    Options { id_shift: SHIFT, ..Options::default() }
}

#[test]
fn directory_import_copies_the_tree_without_following_symlinks() {
    let s = Scratch::new();
    let src = s.tmp.path().join("src");
    std::fs::create_dir_all(src.join("etc/sub")).unwrap();
    std::fs::write(src.join("etc/hosts"), "127.0.0.1 localhost\n").unwrap();
    std::fs::hard_link(src.join("etc/hosts"), src.join("etc/hosts2")).unwrap();
    std::fs::write(s.outside.join("secret"), "secret").unwrap();
    std::os::unix::fs::symlink(s.outside.join("secret"), src.join("escape")).unwrap();
    std::os::unix::fs::symlink(&s.outside, src.join("etc/sub/outdir")).unwrap();
    std::fs::write(src.join("su"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(src.join("su"), std::fs::Permissions::from_mode(0o4755)).unwrap();
    std::os::unix::fs::chown(src.join("etc/hosts"), Some(1000), Some(1001)).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        src.join("fifo"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();

    assert_eq!(detect(&src).unwrap(), SourceKind::Directory);
    let report = import(&src, &s.dest, &opts()).unwrap();
    std::fs::remove_file(s.outside.join("secret")).unwrap();
    s.assert_untouched();

    let d = &s.dest;
    assert_eq!(
        tree(d),
        [
            "escape -> ".to_string() + &s.outside.join("secret").display().to_string(),
            "etc/".into(),
            "etc/hosts".into(),
            "etc/hosts2".into(),
            "etc/sub/".into(),
            format!("etc/sub/outdir -> {}", s.outside.display()),
            "fifo|".into(),
            "su".into(),
        ]
    );
    assert_eq!(std::fs::read_to_string(d.join("etc/hosts")).unwrap(), "127.0.0.1 localhost\n");
    assert_eq!(meta(&d.join("etc/hosts")).ino(), meta(&d.join("etc/hosts2")).ino(), "hard links are kept");
    assert_eq!((meta(&d.join("etc/hosts")).uid(), meta(&d.join("etc/hosts")).gid()), (SHIFT + 1000, SHIFT + 1001));
    assert_eq!(meta(d).uid(), SHIFT);
    assert_eq!(mode(&d.join("su")), 0o755);
    assert!(report.rejected.iter().any(|r| r.path == "su" && r.reason.contains("setuid")));
    assert_eq!(report.kind, SourceKind::Directory);
    assert_eq!(report.bytes, 20 + 10);
}

#[test]
fn gzip_and_zstd_rootfs_tarballs() {
    let layer = Tar::new()
        .dir("./")
        .dir("./bin/")
        .file("./bin/sh", "shell")
        .symlink("./bin/bash", "sh")
        .raw(b"./etc/", tar::EntryType::Directory, b"", b"", 0o700, 5)
        .file("./etc/passwd", "root:x:0:0::/root:/bin/sh\n")
        .bytes();
    for (name, data) in [("rootfs.tar.gz", gzip(&layer)), ("rootfs.tar.zst", zstd(&layer)), ("rootfs.tar", layer)] {
        let s = Scratch::new();
        let source = s.write(name, &data);
        assert_eq!(detect(&source).unwrap(), SourceKind::Tarball);
        let report = import(&source, &s.dest, &opts()).unwrap();
        assert_eq!(tree(&s.dest), ["bin/", "bin/bash -> sh", "bin/sh", "etc/", "etc/passwd"]);
        assert!(report.rejected.is_empty(), "{:?}", report.rejected);
        assert_eq!(std::fs::read_to_string(s.dest.join("bin/sh")).unwrap(), "shell");
        assert_eq!(mode(&s.dest.join("etc")), 0o700);
        assert_eq!(meta(&s.dest.join("etc")).uid(), SHIFT + 5);
        assert_eq!(meta(&s.dest.join("bin/bash")).uid(), SHIFT, "symlinks are chowned, not their targets");
        assert_eq!(meta(&s.dest.join("bin/sh")).mtime(), 1_700_000_000);
        assert_eq!(meta(&s.dest.join("etc")).mtime(), 1_700_000_000, "directory times are set last");
        assert_eq!((report.files, report.layers), (5, 1));
    }
}

/// Two layers: the second deletes `c` and `a/gone`, and makes `b` opaque after writing `b/new` and
/// `b/sub/x` (which must survive, while `b/old` and `b/sub/old` from layer 1 go).
fn two_layers() -> Vec<Layer> {
    let one = Tar::new()
        .dir("a/")
        .file("a/keep", "1")
        .file("a/gone", "1")
        .dir("b/")
        .file("b/old", "1")
        .dir("b/sub/")
        .file("b/sub/old", "1")
        .file("c", "1")
        .dir("d/")
        .file("d/x", "1")
        .bytes();
    let two = Tar::new()
        .file(".wh.c", "")
        .file("a/.wh.gone", "")
        .dir("b/")
        .file("b/new", "2")
        .file("b/sub/x", "2")
        .file("b/.wh..wh..opq", "")
        .file("b/after", "2")
        .file(".wh.d", "")
        .file("d", "now a file")
        .bytes();
    vec![plain_layer(one), gz_layer(two)]
}

const TWO_LAYER_TREE: [&str; 8] = ["a/", "a/keep", "b/", "b/after", "b/new", "b/sub/", "b/sub/x", "d"];

fn two_layer_layout(s: &Scratch) -> std::path::PathBuf {
    let layout = s.tmp.path().join("layout");
    std::fs::create_dir(&layout).unwrap();
    let m = manifest(&layout, "amd64", &two_layers());
    finish_layout(&layout, vec![m]);
    layout
}

#[test]
fn oci_layout_with_whiteouts_and_an_opaque_directory() {
    let s = Scratch::new();
    let layout = two_layer_layout(&s);
    assert_eq!(detect(&layout).unwrap(), SourceKind::OciLayout);
    let seen = std::sync::Mutex::new(Vec::new());
    let progress = |p: berth_image::Progress| seen.lock().unwrap().push(p);
    let report = import(&layout, &s.dest, &Options { progress: Some(&progress), ..opts() }).unwrap();
    assert_eq!(tree(&s.dest), TWO_LAYER_TREE);
    assert_eq!(std::fs::read_to_string(s.dest.join("d")).unwrap(), "now a file");
    assert_eq!(report.layers, 2);
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);
    assert_eq!(report.config.cmd, ["/bin/sh"]);
    assert_eq!(report.config.env, ["PATH=/usr/bin:/bin"]);
    assert_eq!(report.config.workdir.as_deref(), Some("/srv/app"));
    assert_eq!(report.config.user.as_deref(), Some("1000"));
    let seen = seen.lock().unwrap();
    assert!(seen.iter().any(|p| p.layer == 2 && p.layers == 2 && p.bytes_done == p.bytes_total && p.bytes_total > 0));
}

#[test]
fn oci_layout_as_a_tar_and_as_a_gzipped_tar() {
    let s = Scratch::new();
    let layout = two_layer_layout(&s);
    let plain = tar_of_dir(&layout);
    for (name, data) in [("image.tar", plain.clone()), ("image.tar.gz", gzip(&plain))] {
        let s = Scratch::new();
        let source = s.write(name, &data);
        assert_eq!(detect(&source).unwrap(), SourceKind::OciLayout);
        let report = import(&source, &s.dest, &opts()).unwrap();
        assert_eq!(tree(&s.dest), TWO_LAYER_TREE, "{name}");
        assert_eq!(report.config.cmd, ["/bin/sh"]);
    }
}

/// A classic docker save: `manifest.json`, `<id>/layer.tar` (the second gzip'd, which docker labels the
/// same), the config named by its digest with `diff_ids`, and a shared layer stored as a symlink.
fn docker_save(dir: &std::path::Path, corrupt_diff_id: bool) {
    let layers = two_layers();
    let plain: Vec<Vec<u8>> = vec![layers[0].blob.clone(), Tar::new().file("b/extra", "3").bytes()];
    let mut diff_ids: Vec<String> = plain.iter().map(|l| format!("sha256:{}", sha256(l))).collect();
    if corrupt_diff_id {
        diff_ids[1] = format!("sha256:{}", "0".repeat(64));
    }
    let ids = ["1".repeat(64), "2".repeat(64), "3".repeat(64)];
    for (id, data) in ids.iter().zip([plain[0].clone(), gzip(&plain[1])]) {
        std::fs::create_dir_all(dir.join(id)).unwrap();
        std::fs::write(dir.join(id).join("layer.tar"), data).unwrap();
    }
    std::fs::create_dir_all(dir.join(&ids[2])).unwrap();
    std::os::unix::fs::symlink(format!("../{}/layer.tar", ids[0]), dir.join(&ids[2]).join("layer.tar")).unwrap();
    let mut config: serde_json::Value = serde_json::from_slice(&config_json("amd64")).unwrap();
    diff_ids.push(diff_ids[0].clone());
    config["rootfs"]["diff_ids"] = serde_json::json!(diff_ids);
    let config = serde_json::to_vec(&config).unwrap();
    let config_name = format!("{}.json", sha256(&config));
    std::fs::write(dir.join(&config_name), &config).unwrap();
    let layer_names: Vec<String> = ids.iter().map(|id| format!("{id}/layer.tar")).collect();
    let manifest = serde_json::json!([{"Config": config_name, "RepoTags": ["x:latest"], "Layers": layer_names}]);
    std::fs::write(dir.join("manifest.json"), serde_json::to_vec(&manifest).unwrap()).unwrap();
}

#[test]
fn docker_save_archive_directory_and_tar() {
    let s = Scratch::new();
    let saved = s.tmp.path().join("src");
    std::fs::create_dir(&saved).unwrap();
    docker_save(&saved, false);
    let expected = ["a/", "a/gone", "a/keep", "b/", "b/extra", "b/old", "b/sub/", "b/sub/old", "c", "d/", "d/x"];
    assert_eq!(detect(&saved).unwrap(), SourceKind::DockerSave);
    let report = import(&saved, &s.dest, &opts()).unwrap();
    assert_eq!(tree(&s.dest), expected);
    assert_eq!((report.kind, report.layers), (SourceKind::DockerSave, 3));
    assert_eq!(report.config.entrypoint, Vec::<String>::new());

    let s2 = Scratch::new();
    let archive = s2.write("saved.tar", &tar_of_dir(&saved));
    assert_eq!(detect(&archive).unwrap(), SourceKind::DockerSave);
    import(&archive, &s2.dest, &opts()).unwrap();
    assert_eq!(tree(&s2.dest), expected);
}

#[test]
fn docker_save_layer_that_does_not_match_its_diff_id_is_refused() {
    let s = Scratch::new();
    let saved = s.tmp.path().join("src");
    std::fs::create_dir(&saved).unwrap();
    docker_save(&saved, true);
    let err = import(&saved, &s.dest, &opts()).unwrap_err();
    assert!(matches!(err, ImportError::DigestMismatch { .. }), "{err}");
    assert!(tree(&s.dest).is_empty(), "nothing is written before every layer is verified");
}

#[test]
fn newer_docker_save_that_is_also_an_oci_layout() {
    let s = Scratch::new();
    let layout = two_layer_layout(&s);
    let index: serde_json::Value = serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
    let manifest_digest = index["manifests"][0]["digest"].as_str().unwrap().trim_start_matches("sha256:");
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(layout.join("blobs/sha256").join(manifest_digest)).unwrap()).unwrap();
    let blob =
        |d: &serde_json::Value| format!("blobs/sha256/{}", d["digest"].as_str().unwrap().trim_start_matches("sha256:"));
    let layers: Vec<String> = m["layers"].as_array().unwrap().iter().map(blob).collect();
    let docker = serde_json::json!([{"Config": blob(&m["config"]), "RepoTags": ["x:1"], "Layers": layers}]);
    std::fs::write(layout.join("manifest.json"), serde_json::to_vec(&docker).unwrap()).unwrap();
    let archive = s.write("saved.tar", &tar_of_dir(&layout));
    assert_eq!(detect(&archive).unwrap(), SourceKind::DockerSave);
    let report = import(&archive, &s.dest, &opts()).unwrap();
    assert_eq!(tree(&s.dest), TWO_LAYER_TREE);
    assert_eq!(report.kind, SourceKind::DockerSave);
}

#[test]
fn multi_platform_index_picks_the_platform() {
    let s = Scratch::new();
    let layout = s.tmp.path().join("layout");
    std::fs::create_dir(&layout).unwrap();
    let mut per_arch = Vec::new();
    for (arch, variant) in [("amd64", None), ("arm64", Some("v8")), ("arm", Some("v7"))] {
        let tar = Tar::new().file("arch", arch).bytes();
        let layer = match arch {
            "arm" => Layer { blob: zstd(&tar), media_type: "application/vnd.oci.image.layer.v1.tar+zstd" },
            _ => plain_layer(tar),
        };
        let mut m = manifest(&layout, arch, &[layer]);
        m["platform"] = serde_json::json!({"os": "linux", "architecture": arch, "variant": variant});
        per_arch.push(m);
    }
    // An attestation that claims no platform must not be picked over the real image.
    let attestation = plain_layer(Tar::new().file("attestation", "x").bytes());
    let mut att = manifest(&layout, "unknown", &[attestation]);
    att["annotations"] = serde_json::json!({"vnd.docker.reference.type": "attestation-manifest"});
    per_arch.push(att);
    let inner = serde_json::json!({"schemaVersion": 2, "manifests": per_arch});
    let inner = blob(&layout, "application/vnd.oci.image.index.v1+json", &serde_json::to_vec(&inner).unwrap());
    finish_layout(&layout, vec![inner]);

    for (platform, expected) in [(None, "amd64"), (Some("linux/arm64"), "arm64"), (Some("linux/arm/v7"), "arm")] {
        let s = Scratch::new();
        let o = Options { platform: platform.map(String::from), ..opts() };
        import(&layout, &s.dest, &o).unwrap();
        assert_eq!(tree(&s.dest), ["arch"]);
        assert_eq!(std::fs::read_to_string(s.dest.join("arch")).unwrap(), expected);
    }
    let s = Scratch::new();
    let err = import(&layout, &s.dest, &Options { platform: Some("linux/s390x".into()), ..opts() }).unwrap_err();
    assert!(matches!(err, ImportError::NoPlatform { .. }), "{err}");
    assert!(err.to_string().contains("linux/arm64/v8"), "{err}");
}

#[test]
fn digest_mismatch_is_an_error_and_writes_nothing() {
    let s = Scratch::new();
    let layout = two_layer_layout(&s);
    // Flip a byte in the largest blob (a layer).
    let blobs = layout.join("blobs/sha256");
    let mut largest: Vec<_> = std::fs::read_dir(&blobs).unwrap().map(|e| e.unwrap().path()).collect();
    largest.sort_by_key(|p| std::fs::metadata(p).unwrap().len());
    let victim = largest.last().unwrap();
    let mut data = std::fs::read(victim).unwrap();
    data[600] ^= 1;
    std::fs::write(victim, data).unwrap();
    let err = import(&layout, &s.dest, &opts()).unwrap_err();
    assert!(matches!(err, ImportError::DigestMismatch { .. }), "{err}");
    assert!(err.to_string().contains("does not match its digest"));
    assert!(tree(&s.dest).is_empty());
}

#[test]
fn refuses_a_destination_that_is_not_empty_and_sources_it_cannot_read() {
    let s = Scratch::new();
    std::fs::write(s.dest.join("x"), "").unwrap();
    let source = s.write("a.tar", &Tar::new().file("f", "x").bytes());
    assert!(matches!(import(&source, &s.dest, &opts()), Err(ImportError::DestinationNotEmpty { .. })));
    let junk = s.write("junk.tar", &[7u8; 2000]);
    assert!(matches!(detect(&junk), Err(ImportError::UnknownFormat { .. })));
    let xz = s.write("x.tar.gz", b"\xfd7zXZ\0rest");
    assert!(matches!(detect(&xz), Err(ImportError::UnsupportedCompression { format: "xz", .. })));
    let bad = Options { platform: Some("amd64".into()), ..opts() };
    assert!(matches!(import(&source, &s.dest, &bad), Err(ImportError::BadPlatform { .. })));
}
