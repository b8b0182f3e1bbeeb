//! Reading `/proc/self/mountinfo`, for whoever needs to know what is mounted where (cgroup detection, the
//! storage pool).
//!
//! A line is `ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS`; paths have
//! space, tab, newline and backslash escaped as `\ooo` octal.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

/// One mount, as much of it as berth looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountInfo {
    /// The directory of the mounted file system that appears at `mount_point` (`/` for a whole one).
    pub root: PathBuf,
    pub mount_point: PathBuf,
    pub fstype: String,
    /// What is mounted: a device, or a name for file systems without one.
    pub source: String,
    /// Per-superblock options; for cgroup v1 these name the controllers (`rw,cpu,cpuacct`).
    pub super_options: Vec<String>,
}

/// Parse mountinfo text, in its order (later mounts on a path cover earlier ones); lines that do not have the
/// expected shape are skipped.
pub fn parse(text: &str) -> Vec<MountInfo> {
    text.lines().filter_map(parse_line).collect()
}

/// Read and parse this process's mount table.
pub fn read() -> std::io::Result<Vec<MountInfo>> {
    Ok(parse(&std::fs::read_to_string("/proc/self/mountinfo")?))
}

fn parse_line(line: &str) -> Option<MountInfo> {
    let mut fields = line.split_ascii_whitespace();
    let root = fields.nth(3)?;
    let mount_point = fields.next()?;
    // Skip the mount options and the optional fields, up to the "-" separator.
    fields.by_ref().find(|f| *f == "-")?;
    let fstype = fields.next()?;
    let source = fields.next()?;
    let super_options = fields.next().unwrap_or("");
    Some(MountInfo {
        root: unescape(root),
        mount_point: unescape(mount_point),
        fstype: fstype.to_owned(),
        source: unescape(source).to_string_lossy().into_owned(),
        super_options: super_options.split(',').map(str::to_owned).collect(),
    })
}

/// Undo the kernel's `\ooo` octal escapes.
pub fn unescape(field: &str) -> PathBuf {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match (bytes[i], octal) {
            (b'\\', Some(d)) => {
                let value = d.iter().fold(0u32, |acc, b| acc * 8 + u32::from(b - b'0'));
                out.push(u8::try_from(value).unwrap_or(b'?'));
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    PathBuf::from(OsString::from_vec(out))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn parses_fields_and_skips_optional_ones() {
        let text = "36 35 98:0 /mnt1 /mnt/parent rw,noatime master:1 shared:7 - ext3 /dev/root rw,errors=continue\n\
                    garbage line\n\
                    41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate\n\
                    90 22 0:50 / /var/lib/my\\040root/pool rw,nosuid - btrfs /dev/loop3 rw,space_cache=v2\n";
        let mounts = parse(text);
        assert_eq!(mounts.len(), 3);
        assert_eq!(mounts[0].root, Path::new("/mnt1"));
        assert_eq!(mounts[0].mount_point, Path::new("/mnt/parent"));
        assert_eq!(mounts[0].fstype, "ext3");
        assert_eq!(mounts[0].source, "/dev/root");
        assert_eq!(mounts[0].super_options, ["rw", "errors=continue"]);
        assert_eq!(mounts[1].fstype, "cgroup2");
        assert_eq!(mounts[2].mount_point, Path::new("/var/lib/my root/pool"));
        assert_eq!(mounts[2].source, "/dev/loop3");
    }

    #[test]
    fn unescapes_octal() {
        assert_eq!(unescape(r"/a\040b\011c\134d"), Path::new("/a b\tc\\d"));
        assert_eq!(unescape(r"/trailing\04"), Path::new(r"/trailing\04"));
        assert_eq!(unescape(r"/not\999octal"), Path::new(r"/not\999octal"));
    }
}
