//! Which cgroup layout the host has and where its controllers live, found once at start-up; and
//! making, finding and listing sandboxes' cgroups in it.

use std::collections::BTreeSet;
use std::env;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::fsio::{self, Fs};
use super::handle::{self, Cgroup, Kind};
use super::mountinfo::{self, Mount};
use super::name::problem as name_problem;
use super::{CgroupError, FORCE_ENV, Limits, PARENT_DIR, Version, v1, v2, validate_name};

const MOUNTINFO: &str = "/proc/self/mountinfo";

/// How long undoing a half-made cgroup may wait on a busy directory.
const UNDO_TIMEOUT: Duration = Duration::from_millis(500);

/// The host's cgroup layout.
#[derive(Debug, Clone)]
pub struct Hierarchy {
    layout: Layout,
    fs: Fs,
    /// Where the cgroups live under each root: `berth` unless [`Hierarchy::nested`] moved them.
    parent: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Layout {
    /// The root of each controller's hierarchy.
    V1(v1::Dirs),
    /// The root of the unified tree.
    V2(PathBuf),
}

impl Hierarchy {
    /// Read `/proc/self/mountinfo` and work out the layout. `BERTH_CGROUP=v1|v2` forces one.
    pub fn detect() -> Result<Hierarchy, CgroupError> {
        let forced = match env::var(FORCE_ENV) {
            Ok(v) if v.is_empty() || v.eq_ignore_ascii_case("auto") => None,
            Ok(v) => Some(
                v.parse()
                    .map_err(|_| CgroupError::Detect { reason: format!("{FORCE_ENV}={v:?} is not v1, v2 or auto") })?,
            ),
            Err(env::VarError::NotPresent) => None,
            Err(env::VarError::NotUnicode(v)) => {
                return Err(CgroupError::Detect { reason: format!("{FORCE_ENV}={v:?} is not v1, v2 or auto") });
            }
        };
        let text = fsio::read(Path::new(MOUNTINFO))?;
        Hierarchy::detect_from(&text, forced)
    }

    /// Work out the layout from mountinfo text. Unless `forced`: v2 if /sys/fs/cgroup is a cgroup2
    /// mount; else v1 if any of memory, pids, cpu, cpuacct, freezer is on a v1 hierarchy (a hybrid
    /// host's controller-less cgroup2 mount is ignored); else v2 on any cgroup2 mount.
    pub fn detect_from(mountinfo: &str, forced: Option<Version>) -> Result<Hierarchy, CgroupError> {
        let mounts = mountinfo::parse(mountinfo);
        let version = match forced {
            Some(version) => version,
            None => auto_version(&mounts)?,
        };
        let layout = match version {
            Version::V1 => Layout::V1(v1::Dirs::find_roots(&mounts)?),
            Version::V2 => Layout::V2(v2::find_root(&mounts).ok_or_else(|| CgroupError::Detect {
                reason: format!("no cgroup2 file system is mounted (see {MOUNTINFO})"),
            })?),
        };
        Ok(Hierarchy { layout, fs: Fs::REAL, parent: PathBuf::from(PARENT_DIR) })
    }

    /// The same layout, with directories made and removed through `fs` (a fake tree in tests).
    #[cfg(test)]
    pub(crate) fn with_fs(self, fs: Fs) -> Hierarchy {
        Hierarchy { fs, ..self }
    }

    /// The same layout with the cgroups under `parent` (a relative path of valid names, such as
    /// `kubepods/pod1234`) instead of `berth/`: the containers an OCI runtime starts live where their
    /// engine says, and outside the sandboxes that [`crate::Runtime::sweep`] looks after.
    pub fn nested(&self, parent: &Path) -> Result<Hierarchy, CgroupError> {
        let mut rel = PathBuf::new();
        for part in parent.components() {
            match part {
                std::path::Component::Normal(name) => {
                    let name = name.to_str().unwrap_or("");
                    validate_name(name)?;
                    rel.push(name);
                }
                std::path::Component::RootDir | std::path::Component::CurDir => {}
                _ => {
                    return Err(CgroupError::InvalidName {
                        name: parent.display().to_string(),
                        reason: "must not be '.' or contain '..'",
                    });
                }
            }
        }
        if rel.as_os_str().is_empty() {
            return Err(CgroupError::InvalidName { name: parent.display().to_string(), reason: "empty" });
        }
        Ok(Hierarchy { parent: rel, ..self.clone() })
    }

    pub fn version(&self) -> Version {
        match self.layout {
            Layout::V1(_) => Version::V1,
            Layout::V2(_) => Version::V2,
        }
    }

    /// The `berth/` directories that hold the sandboxes' cgroups (one per hierarchy on v1).
    pub fn parent_dirs(&self) -> Vec<PathBuf> {
        match &self.layout {
            Layout::V1(roots) => roots.join(&self.parent).distinct(),
            Layout::V2(root) => vec![root.join(&self.parent)],
        }
    }

    /// Make `berth/<name>` (in every hierarchy, on v1) and apply `limits`. The `berth/` parent is
    /// made if missing; a cgroup of that name must not exist yet. On failure, whatever this call
    /// made for the cgroup is removed again.
    pub fn create(&self, name: &str, limits: &Limits) -> Result<Cgroup, CgroupError> {
        validate_name(name)?;
        limits.check()?;
        match &self.layout {
            Layout::V1(roots) => v1::prepare(roots, &self.parent, self.fs)?,
            Layout::V2(root) => v2::prepare(root, &self.parent, self.fs)?,
        }
        let cgroup = self.open(name);
        let mut made: Vec<&Path> = Vec::new();
        for dir in cgroup.paths() {
            if let Err(source) = self.fs.mkdir(dir) {
                self.undo(&made);
                return Err(CgroupError::Create { path: dir.clone(), source });
            }
            made.push(dir);
        }
        let configured = match cgroup.kind() {
            Kind::V1(dirs) => v1::configure(dirs, limits),
            Kind::V2(dir) => v2::configure(dir, limits),
            Kind::Invalid { .. } => Ok(Vec::new()),
        };
        match configured {
            Ok(warnings) => Ok(cgroup.with_warnings(warnings)),
            Err(e) => {
                self.undo(&made);
                Err(e)
            }
        }
    }

    /// Best-effort removal of directories `create` made; the error that made it give up matters more.
    fn undo(&self, made: &[&Path]) {
        let deadline = Instant::now() + UNDO_TIMEOUT;
        for dir in made {
            let _ = handle::remove_tree(self.fs, dir, deadline);
        }
    }

    /// A handle on the cgroup `name`, which may or may not exist (e.g. a leftover from a crash).
    /// Nothing is checked on disk. If `name` is not a valid name the handle has no directories:
    /// it does not exist, and its fallible methods fail with [`CgroupError::InvalidName`].
    pub fn open(&self, name: &str) -> Cgroup {
        let rel = self.parent.join(name);
        let kind = match (name_problem(name), &self.layout) {
            (Some(reason), _) => Kind::Invalid { version: self.version(), reason },
            (None, Layout::V1(roots)) => Kind::V1(roots.join(&rel)),
            (None, Layout::V2(root)) => Kind::V2(root.join(rel)),
        };
        Cgroup::new(name, kind, self.fs)
    }

    /// The names of the cgroups under `berth/` (in any hierarchy, on v1), sorted. Directories whose
    /// names berth would not have made, and unreadable or missing parents, are left out.
    pub fn list(&self) -> Vec<String> {
        let mut names = BTreeSet::new();
        for parent in self.parent_dirs() {
            for dir in fsio::subdirs(&parent).unwrap_or_default() {
                if let Some(name) = dir.file_name().and_then(|n| n.to_str())
                    && validate_name(name).is_ok()
                {
                    names.insert(name.to_owned());
                }
            }
        }
        names.into_iter().collect()
    }
}

fn auto_version(mounts: &[Mount]) -> Result<Version, CgroupError> {
    let on_default_root = mounts.iter().rfind(|m| m.mount_point == Path::new(v2::DEFAULT_ROOT));
    if on_default_root.is_some_and(Mount::is_v2) {
        return Ok(Version::V2);
    }
    if mounts.iter().any(|m| v1::CONTROLLERS.iter().any(|c| m.is_v1_with(c))) {
        return Ok(Version::V1);
    }
    if mounts.iter().any(Mount::is_v2) {
        return Ok(Version::V2);
    }
    Err(CgroupError::Detect { reason: format!("no cgroup file system is mounted (see {MOUNTINFO})") })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::fixtures::{COMOUNTED, HYBRID, PURE_V2};
    use super::*;

    fn detect(text: &str, forced: Option<Version>) -> Result<Hierarchy, CgroupError> {
        Hierarchy::detect_from(text, forced)
    }

    #[test]
    fn a_nested_hierarchy_puts_cgroups_where_the_engine_says_and_nowhere_else() {
        let h = detect(HYBRID, None).unwrap().nested(Path::new("/kubepods/pod1")).unwrap();
        assert_eq!(h.parent_dirs()[0], Path::new("/sys/fs/cgroup/memory/kubepods/pod1"));
        assert!(h.open("c1").paths().contains(&PathBuf::from("/sys/fs/cgroup/pids/kubepods/pod1/c1")));
        let v2 = detect(PURE_V2, None).unwrap().nested(Path::new("k8s.io")).unwrap();
        assert_eq!(v2.open("c1").paths(), [PathBuf::from("/sys/fs/cgroup/k8s.io/c1")]);
        for bad in ["", "/", "../x", "a/../b", "a/./b/..", "a b/c"] {
            assert!(detect(HYBRID, None).unwrap().nested(Path::new(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn hybrid_is_v1_with_a_root_per_controller() {
        let h = detect(HYBRID, None).unwrap();
        assert_eq!(h.version(), Version::V1);
        let parents = h.parent_dirs();
        assert_eq!(parents.len(), 5);
        assert_eq!(parents[0], Path::new("/sys/fs/cgroup/memory/berth"));
        assert_eq!(parents[4], Path::new("/sys/fs/cgroup/freezer/berth"));
        let cg = h.open("sb-1");
        assert_eq!(cg.version(), Version::V1);
        assert!(cg.paths().contains(&PathBuf::from("/sys/fs/cgroup/cpuacct/berth/sb-1")));
    }

    #[test]
    fn pure_v2_uses_sys_fs_cgroup() {
        let h = detect(PURE_V2, None).unwrap();
        assert_eq!(h.version(), Version::V2);
        assert_eq!(h.parent_dirs(), [PathBuf::from("/sys/fs/cgroup/berth")]);
        assert_eq!(h.open("x").paths(), [PathBuf::from("/sys/fs/cgroup/berth/x")]);
    }

    #[test]
    fn comounted_hierarchies_share_directories() {
        let h = detect(COMOUNTED, None).unwrap();
        assert_eq!(h.version(), Version::V1);
        let cg = h.open("x");
        assert_eq!(cg.paths().len(), 4);
        assert!(cg.paths().contains(&PathBuf::from("/sys/fs/cgroup/cpu,cpuacct/berth/x")));
    }

    #[test]
    fn forcing_a_version() {
        let h = detect(HYBRID, Some(Version::V2)).unwrap();
        assert_eq!(h.parent_dirs(), [PathBuf::from("/sys/fs/cgroup/unified/berth")]);
        let err = detect(PURE_V2, Some(Version::V1)).unwrap_err();
        assert!(matches!(err, CgroupError::MissingController { .. }), "{err}");
        let err = detect(COMOUNTED, Some(Version::V2)).unwrap_err();
        assert!(matches!(err, CgroupError::Detect { .. }), "{err}");
    }

    #[test]
    fn nothing_mounted_is_an_error() {
        let err = detect("22 1 8:1 / / rw - ext4 /dev/sda1 rw\n", None).unwrap_err();
        assert!(err.to_string().contains("no cgroup file system is mounted"), "{err}");
    }

    #[test]
    fn names_are_checked_before_anything_is_touched() {
        let h = detect(PURE_V2, None).unwrap();
        for bad in ["../../etc", "a/b", "", ".."] {
            let cg = h.open(bad);
            assert!(cg.paths().is_empty() && !cg.exists(), "{bad:?}");
            assert_eq!(cg.version(), Version::V2);
            for result in [cg.remove(), cg.kill_all(), cg.freeze(), cg.thaw(), cg.add_process(1)] {
                assert!(matches!(result, Err(CgroupError::InvalidName { .. })), "{bad:?}");
            }
            assert!(matches!(cg.procs(), Err(CgroupError::InvalidName { .. })));
            assert!(matches!(cg.usage(), Err(CgroupError::InvalidName { .. })));
            let err = h.create(bad, &Limits::default()).unwrap_err();
            assert!(matches!(err, CgroupError::InvalidName { .. }), "{bad:?}: {err}");
        }
        let err = h.create("ok", &Limits { cpu_millis: Some(1), ..Limits::default() }).unwrap_err();
        assert!(matches!(err, CgroupError::InvalidLimit { .. }), "{err}");
    }
}
