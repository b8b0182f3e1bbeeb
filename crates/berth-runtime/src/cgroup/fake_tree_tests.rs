//! The whole life of a cgroup — create, add, usage, freeze, kill, list, remove — on fake cgroupfs
//! trees: v2, and v1 with co-mounted cpu,cpuacct (neither of which this host has for real).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::fixtures::{self, FakeV2, read_trimmed};
use super::fsio::{Fs, Populate};
use super::{CgroupError, Hierarchy, Limits, Usage, Version};

const LIMITS: Limits = Limits { memory_bytes: Some(64 << 20), pids: Some(32), cpu_millis: Some(1500) };

fn v2(tree: &FakeV2, populate: Populate) -> Hierarchy {
    Hierarchy::detect_from(&tree.mountinfo(), None).unwrap().with_fs(Fs::fake(populate))
}

#[test]
fn v2_create_writes_limits_and_delegates() {
    let tree = FakeV2::new("cpuset cpu io memory hugetlb pids rdma misc");
    let h = v2(&tree, fixtures::populate_v2);
    assert_eq!(h.version(), Version::V2);
    let cg = h.create("sb1", &LIMITS).unwrap();

    let dir = tree.root().join("berth/sb1");
    assert_eq!(cg.paths(), std::slice::from_ref(&dir));
    assert_eq!(cg.name(), "sb1");
    assert!(cg.warnings().is_empty());
    assert_eq!(read_trimmed(&tree.root().join("cgroup.subtree_control")), "+cpu +memory +pids");
    assert_eq!(read_trimmed(&tree.root().join("berth/cgroup.subtree_control")), "+cpu +memory +pids");
    assert_eq!(read_trimmed(&dir.join("memory.max")), "67108864");
    assert_eq!(read_trimmed(&dir.join("memory.swap.max")), "0");
    assert_eq!(read_trimmed(&dir.join("pids.max")), "32");
    assert_eq!(read_trimmed(&dir.join("cpu.max")), "150000 100000");

    cg.add_process(4242).unwrap();
    assert_eq!(read_trimmed(&dir.join("cgroup.procs")), "4242");
    assert_eq!(cg.procs().unwrap(), [4242]);
    assert_eq!(cg.usage().unwrap(), Usage::default());

    // An empty cgroup (the usual case at teardown) needs no kill at all.
    fs::write(dir.join("cgroup.procs"), "").unwrap();
    cg.kill_all().unwrap();
    assert_eq!(read_trimmed(&dir.join("cgroup.kill")), "");

    assert_eq!(h.list(), ["sb1"]);
    assert_eq!(h.open("sb1").paths(), cg.paths());
    cg.remove().unwrap();
    assert!(!cg.exists() && !dir.exists());
    assert!(tree.root().join("berth").is_dir(), "the shared parent stays");
    cg.remove().unwrap();
    assert!(h.list().is_empty());
}

#[test]
fn v2_procs_include_nested_cgroups() {
    let tree = FakeV2::new("cpu memory pids");
    let h = v2(&tree, fixtures::populate_v2);
    let cg = h.create("outer", &Limits::default()).unwrap();
    let inner = tree.root().join("berth/outer/inner");
    Fs::fake(fixtures::populate_v2).mkdir(&inner).unwrap();
    fs::write(tree.root().join("berth/outer/cgroup.procs"), "7\n").unwrap();
    fs::write(inner.join("cgroup.procs"), "9\n3\n").unwrap();
    assert_eq!(cg.procs().unwrap(), [3, 7, 9]);
    fs::write(inner.join("cgroup.procs"), "").unwrap();
    fs::write(tree.root().join("berth/outer/cgroup.procs"), "").unwrap();
    cg.remove().unwrap();
    assert!(!cg.exists());
}

#[test]
fn v2_failure_half_way_removes_the_new_cgroup() {
    let tree = FakeV2::new("cpu memory pids");
    let h = v2(&tree, fixtures::populate_v2_broken);
    let err = h.create("half", &LIMITS).unwrap_err();
    match &err {
        CgroupError::SetLimit { file, value, .. } => {
            assert!(file.ends_with("pids.max"), "{err}");
            assert_eq!(value, "32");
        }
        other => panic!("expected SetLimit, got {other}"),
    }
    assert!(!tree.root().join("berth/half").exists());
    assert!(tree.root().join("berth").is_dir());
}

#[test]
fn an_existing_cgroup_is_not_reused_or_removed() {
    let tree = FakeV2::new("cpu memory pids");
    let h = v2(&tree, fixtures::populate_v2);
    let first = h.create("dup", &Limits::default()).unwrap();
    let err = h.create("dup", &LIMITS).unwrap_err();
    match &err {
        CgroupError::Create { path, source } => {
            assert_eq!(path, &tree.root().join("berth/dup"));
            assert_eq!(source.kind(), io::ErrorKind::AlreadyExists);
        }
        other => panic!("expected Create, got {other}"),
    }
    assert!(first.exists());
    assert_eq!(read_trimmed(&first.paths()[0].join("pids.max")), "max");
    first.remove().unwrap();
}

#[test]
fn v2_missing_controller_creates_nothing() {
    let tree = FakeV2::new("cpu io memory");
    let err = v2(&tree, fixtures::populate_v2).create("x", &LIMITS).unwrap_err();
    assert!(matches!(&err, CgroupError::MissingController { name, .. } if name == "pids"), "{err}");
    assert!(!tree.root().join("berth").exists());
}

fn v1(hierarchies: &[&str], populate: Populate) -> (tempfile::TempDir, Hierarchy) {
    let (dir, mountinfo) = fixtures::fake_v1(hierarchies);
    let h = Hierarchy::detect_from(&mountinfo, None).unwrap().with_fs(Fs::fake(populate));
    (dir, h)
}

#[test]
fn v1_comounted_cpu_cpuacct_is_made_once() {
    let (tmp, h) = v1(&["memory", "pids", "cpu,cpuacct", "freezer"], fixtures::populate_v1);
    assert_eq!(h.version(), Version::V1);
    let cg = h.create("sb2", &LIMITS).unwrap();
    let at = |hier: &str| tmp.path().join(hier).join("berth/sb2");
    let expected: Vec<PathBuf> = ["memory", "pids", "cpu,cpuacct", "freezer"].iter().map(|h| at(h)).collect();
    assert_eq!(cg.paths(), expected);
    assert!(cg.warnings().is_empty());

    assert_eq!(read_trimmed(&at("memory").join("memory.limit_in_bytes")), "67108864");
    assert_eq!(read_trimmed(&at("memory").join("memory.memsw.limit_in_bytes")), "67108864");
    assert_eq!(read_trimmed(&at("memory").join("memory.swappiness")), "60");
    assert_eq!(read_trimmed(&at("pids").join("pids.max")), "32");
    assert_eq!(read_trimmed(&at("cpu,cpuacct").join("cpu.cfs_period_us")), "100000");
    assert_eq!(read_trimmed(&at("cpu,cpuacct").join("cpu.cfs_quota_us")), "150000");

    cg.add_process(77).unwrap();
    for dir in cg.paths() {
        assert_eq!(read_trimmed(&dir.join("cgroup.procs")), "77");
    }
    fs::write(at("cpu,cpuacct").join("cpuacct.usage"), "123456789\n").unwrap();
    fs::write(at("memory").join("memory.oom_control"), "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n").unwrap();
    let usage = cg.usage().unwrap();
    assert_eq!((usage.cpu_ns, usage.oom_kills), (123_456_789, 2));
    assert_eq!(cg.oom_kills().unwrap(), 2);
    fs::write(
        at("memory").join("memory.usage_in_bytes"),
        "4096
",
    )
    .unwrap();
    fs::write(
        at("memory").join("memory.max_usage_in_bytes"),
        "8192
",
    )
    .unwrap();
    let counters = cg.counters().unwrap();
    assert_eq!((counters.cpu_ns, counters.memory_bytes, counters.peak_memory_bytes), (123_456_789, 4096, 8192));

    cg.freeze().unwrap();
    assert_eq!(read_trimmed(&at("freezer").join("freezer.state")), "FROZEN");
    assert!(cg.is_frozen().unwrap());
    cg.thaw().unwrap();
    assert_eq!(read_trimmed(&at("freezer").join("freezer.state")), "THAWED");
    assert!(!cg.is_frozen().unwrap());
    // A fake file takes what is written at once: the freeze settles on the first look.
    assert!(cg.try_freeze(std::time::Duration::ZERO).unwrap());
    assert!(cg.is_frozen().unwrap());
    cg.thaw().unwrap();

    assert_eq!(h.list(), ["sb2"]);
    cg.remove().unwrap();
    assert!(!cg.exists());
    assert!(h.list().is_empty());
}

#[test]
fn v1_without_swap_accounting_sets_swappiness_and_says_so() {
    let (tmp, h) = v1(&["memory", "pids", "cpu", "cpuacct", "freezer"], fixtures::populate_v1_no_swap);
    let cg = h.create("noswap", &LIMITS).unwrap();
    let memory = tmp.path().join("memory/berth/noswap");
    assert_eq!(read_trimmed(&memory.join("memory.limit_in_bytes")), "67108864");
    assert_eq!(read_trimmed(&memory.join("memory.swappiness")), "0");
    assert_eq!(cg.warnings().len(), 1, "{:?}", cg.warnings());
    assert!(cg.warnings()[0].contains("swap accounting is off"));
    cg.remove().unwrap();
}

#[test]
fn v1_list_merges_hierarchies_and_skips_foreign_names() {
    let (tmp, h) = v1(&["memory", "pids", "cpu", "cpuacct", "freezer"], fixtures::populate_v1);
    h.create("b", &Limits::default()).unwrap();
    // A leftover present in one hierarchy only, and a directory berth would not have made.
    fs::create_dir_all(tmp.path().join("pids/berth/a")).unwrap();
    fs::create_dir_all(tmp.path().join("memory/berth/not ours")).unwrap();
    assert_eq!(h.list(), ["a", "b"]);
    let leftover = h.open("a");
    assert!(leftover.exists());
    leftover.remove().unwrap();
    assert!(!leftover.exists());
    assert!(Path::new(&tmp.path().join("pids/berth")).is_dir());
}

#[test]
fn v2_a_freeze_that_does_not_settle_is_undone() {
    // cgroup.events never says "frozen 1" (a task held in the kernel): after the timeout the freeze is
    // taken back, so the cgroup is not left half frozen.
    let tree = FakeV2::new("cpu memory pids");
    let h = v2(&tree, fixtures::populate_v2);
    let cg = h.create("stuck", &LIMITS).unwrap();
    let dir = tree.root().join("berth/stuck");
    fs::write(dir.join("cgroup.events"), "populated 1\nfrozen 0\n").unwrap();
    assert!(matches!(cg.freeze(), Err(CgroupError::Freeze { .. })));
    assert_eq!(read_trimmed(&dir.join("cgroup.freeze")), "0");
}
