//! Test fixtures: mount tables of the three layouts, and fake cgroupfs trees in temp dirs that
//! fill new directories with the files the kernel would.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use tempfile::TempDir;

use super::fsio::Fs;

/// This machine's /proc/self/mountinfo: Linux 6.18, v1 controllers each on their own hierarchy,
/// and a cgroup2 mount without controllers on /sys/fs/cgroup/unified.
pub(crate) const HYBRID: &str = "\
22 27 0:21 / /proc rw,relatime - proc proc rw
23 27 0:22 / /sys rw,relatime - sysfs sysfs rw
24 27 0:6 / /dev rw,relatime - devtmpfs devtmpfs rw,size=12334432k,nr_inodes=3083608,mode=755
25 24 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=24683652k
26 24 0:24 / /dev/pts rw,relatime - devpts devpts rw,mode=600,ptmxmode=000
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard,resv_strict,resuid=65534,resgid=65534
29 26 0:26 / /dev/pts rw,relatime - devpts devpts rw,mode=600,ptmxmode=000
30 25 0:27 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=24683652k
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
38 31 0:35 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

/// A systemd host with the unified layout.
pub(crate) const PURE_V2: &str = "\
22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro
23 22 0:21 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
24 22 0:22 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
31 23 0:27 / /sys/fs/pstore rw,nosuid,nodev,noexec,relatime shared:10 - pstore pstore rw
";

/// An older hybrid host: cpu and cpuacct co-mounted, a named systemd hierarchy, unified on the side.
pub(crate) const COMOUNTED: &str = "\
25 23 0:22 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:4 - tmpfs tmpfs ro,mode=755
26 25 0:23 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:5 - cgroup cgroup rw,xattr,name=systemd
29 25 0:26 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:12 - cgroup cgroup rw,cpu,cpuacct
30 25 0:27 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:13 - cgroup cgroup rw,memory
31 25 0:28 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,pids
32 25 0:29 / /sys/fs/cgroup/freezer rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,freezer
33 25 0:30 / /sys/fs/cgroup/net_cls,net_prio rw,nosuid,nodev,noexec,relatime shared:16 - cgroup cgroup rw,net_cls,net_prio
";

#[allow(clippy::unwrap_used)]
pub(crate) fn read_trimmed(path: &Path) -> String {
    fs::read_to_string(path).unwrap().trim().to_owned()
}

fn write_all(dir: &Path, files: &[(&str, &str)]) -> io::Result<()> {
    files.iter().try_for_each(|(name, content)| fs::write(dir.join(name), content))
}

/// A new v2 cgroup: the core files, and the files of the controllers its parent enabled for it.
pub(crate) fn populate_v2(dir: &Path) -> io::Result<()> {
    let parent = dir.parent().map(|p| p.join("cgroup.subtree_control"));
    let enabled = parent.and_then(|p| fs::read_to_string(p).ok()).unwrap_or_default();
    let enabled: Vec<&str> = enabled.split_whitespace().map(|c| c.trim_start_matches('+')).collect();
    write_all(
        dir,
        &[
            ("cgroup.controllers", &enabled.join(" ")),
            ("cgroup.subtree_control", ""),
            ("cgroup.procs", ""),
            ("cgroup.events", "populated 0\nfrozen 0\n"),
            ("cgroup.freeze", "0\n"),
            ("cgroup.kill", ""),
            ("cpu.stat", "usage_usec 0\nuser_usec 0\nsystem_usec 0\n"),
        ],
    )?;
    if enabled.contains(&"cpu") {
        write_all(dir, &[("cpu.max", "max 100000\n")])?;
    }
    if enabled.contains(&"memory") {
        write_all(
            dir,
            &[
                ("memory.max", "max\n"),
                ("memory.swap.max", "max\n"),
                ("memory.current", "0\n"),
                ("memory.peak", "0\n"),
                ("memory.events", "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n"),
            ],
        )?;
    }
    if enabled.contains(&"pids") {
        write_all(dir, &[("pids.max", "max\n"), ("pids.current", "0\n")])?;
    }
    Ok(())
}

/// Like [`populate_v2`], but `pids.max` cannot be written: creation fails half-way.
pub(crate) fn populate_v2_broken(dir: &Path) -> io::Result<()> {
    populate_v2(dir)?;
    if dir.join("pids.max").exists() {
        fs::remove_file(dir.join("pids.max"))?;
        fs::create_dir(dir.join("pids.max"))?;
    }
    Ok(())
}

/// A new v1 cgroup, its files chosen by the controllers named in its hierarchy's directory
/// (`.../cpu,cpuacct/...` has both).
pub(crate) fn populate_v1(dir: &Path) -> io::Result<()> {
    let has = |c: &str| dir.components().any(|p| p.as_os_str().to_str().is_some_and(|s| s.split(',').any(|x| x == c)));
    write_all(dir, &[("cgroup.procs", ""), ("tasks", "")])?;
    if has("memory") {
        write_all(
            dir,
            &[
                ("memory.limit_in_bytes", "9223372036854771712\n"),
                ("memory.memsw.limit_in_bytes", "9223372036854771712\n"),
                ("memory.swappiness", "60\n"),
                ("memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n"),
                ("memory.usage_in_bytes", "0\n"),
                ("memory.max_usage_in_bytes", "0\n"),
            ],
        )?;
    }
    if has("pids") {
        write_all(dir, &[("pids.max", "max\n"), ("pids.current", "0\n")])?;
    }
    if has("cpu") {
        write_all(dir, &[("cpu.cfs_period_us", "100000\n"), ("cpu.cfs_quota_us", "-1\n")])?;
    }
    if has("cpuacct") {
        write_all(dir, &[("cpuacct.usage", "0\n")])?;
    }
    if has("freezer") {
        write_all(dir, &[("freezer.state", "THAWED\n")])?;
    }
    Ok(())
}

/// [`populate_v1`] on a host without swap accounting: no `memory.memsw.*` files.
pub(crate) fn populate_v1_no_swap(dir: &Path) -> io::Result<()> {
    populate_v1(dir)?;
    match fs::remove_file(dir.join("memory.memsw.limit_in_bytes")) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// A fake cgroup2 tree: a root whose `cgroup.controllers` lists the given controllers.
pub(crate) struct FakeV2 {
    dir: TempDir,
}

#[allow(clippy::unwrap_used)]
impl FakeV2 {
    pub(crate) fn new(controllers: &str) -> FakeV2 {
        let dir = tempfile::tempdir().unwrap();
        let files = [("cgroup.controllers", controllers), ("cgroup.subtree_control", ""), ("cgroup.procs", "1\n")];
        write_all(dir.path(), &files).unwrap();
        FakeV2 { dir }
    }

    pub(crate) fn root(&self) -> &Path {
        self.dir.path()
    }

    pub(crate) fn fs(&self) -> Fs {
        Fs::fake(populate_v2)
    }

    /// A mountinfo line mounting this tree.
    pub(crate) fn mountinfo(&self) -> String {
        format!("90 1 0:99 / {} rw,relatime - cgroup2 cgroup2 rw\n", self.root().display())
    }

    /// `berth/<name>`, made the way `create` would, without limits.
    pub(crate) fn leaf(&self, name: &str) -> PathBuf {
        super::v2::prepare(self.root(), std::path::Path::new("berth"), self.fs()).unwrap();
        let dir = self.root().join("berth").join(name);
        self.fs().mkdir(&dir).unwrap();
        dir
    }
}

/// A fake v1 layout: one directory per hierarchy (given as mount-point names such as
/// `cpu,cpuacct`) in a temp dir, and the mountinfo that mounts them.
#[allow(clippy::unwrap_used)]
pub(crate) fn fake_v1(hierarchies: &[&str]) -> (TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut mountinfo = String::new();
    for (i, name) in hierarchies.iter().enumerate() {
        let point = dir.path().join(name);
        fs::create_dir(&point).unwrap();
        write_all(&point, &[("cgroup.procs", ""), ("tasks", "")]).unwrap();
        let line = format!("{} 1 0:{} / {} rw - cgroup cgroup rw,{name}\n", 100 + i, 100 + i, point.display());
        mountinfo.push_str(&line);
    }
    (dir, mountinfo)
}
