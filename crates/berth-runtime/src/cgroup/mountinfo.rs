//! The mount table as cgroup detection reads it (parsed by `berth_sys::mountinfo`).

use std::path::{Path, PathBuf};

/// One mount, as much of it as berth looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mount {
    /// The directory of the mounted file system that appears at `mount_point` (`/` for a whole one).
    pub root: PathBuf,
    pub mount_point: PathBuf,
    pub fstype: String,
    /// Per-superblock options; for cgroup v1 these name the controllers (`rw,cpu,cpuacct`).
    pub super_options: Vec<String>,
}

impl Mount {
    pub fn has_super_option(&self, option: &str) -> bool {
        self.super_options.iter().any(|o| o == option)
    }

    /// A cgroup v1 hierarchy with `controller` attached.
    pub fn is_v1_with(&self, controller: &str) -> bool {
        self.fstype == "cgroup" && self.has_super_option(controller)
    }

    pub fn is_v2(&self) -> bool {
        self.fstype == "cgroup2"
    }

    pub fn is_whole(&self) -> bool {
        self.root == Path::new("/")
    }
}

/// Parse mountinfo text; lines that do not have the expected shape are skipped.
pub(crate) fn parse(text: &str) -> Vec<Mount> {
    berth_sys::mountinfo::parse(text)
        .into_iter()
        .map(|m| Mount { root: m.root, mount_point: m.mount_point, fstype: m.fstype, super_options: m.super_options })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_fields_and_skips_optional_ones() {
        let text = "36 35 98:0 /mnt1 /mnt/parent rw,noatime master:1 shared:7 - ext3 /dev/root rw,errors=continue\n\
                    garbage line\n\
                    41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate\n";
        let mounts = parse(text);
        assert_eq!(mounts.len(), 2);
        assert_eq!(mounts[0].root, Path::new("/mnt1"));
        assert_eq!(mounts[0].mount_point, Path::new("/mnt/parent"));
        assert_eq!(mounts[0].fstype, "ext3");
        assert_eq!(mounts[0].super_options, ["rw", "errors=continue"]);
        assert!(mounts[1].is_v2() && mounts[1].is_whole());
        assert!(mounts[1].has_super_option("nsdelegate"));
    }

    #[test]
    fn v1_controllers_come_from_super_options() {
        let line = "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct";
        let m = parse(line).pop().unwrap();
        assert!(m.is_v1_with("cpu") && m.is_v1_with("cpuacct"));
        assert!(!m.is_v1_with("memory") && !m.is_v1_with("rw,cpu"));
        assert_eq!(m.mount_point, Path::new("/sys/fs/cgroup/cpu,cpuacct"));
    }
}
