//! Reading one side's file system: mount points, layer stacks, whiteouts and opaque directories.
//!
//! Every directory is opened from its layer's root with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, and every
//! entry is looked at with `AT_SYMLINK_NOFOLLOW` or opened with `O_NOFOLLOW` relative to its directory, so a
//! symbolic link written by the sandbox can never lead a read outside the layer.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{AtFlags, CWD, Dir, FileType as RawType, Mode, OFlags, Stat};
use rustix::io::Errno;

use crate::nofollow::{has_xattr, inode, is_whiteout, opaque_names, open_beneath, open_regular, utf8, vanished};
use crate::{DiffError, FileType, Meta, Tree, check_sandbox_path, is_within, join};

/// One side of a comparison with its layer roots open.
pub(crate) struct Side {
    /// "old" or "new", for messages.
    pub(crate) name: &'static str,
    mounts: Vec<Mount>,
}

struct Mount {
    at: String,
    /// Whether the top layer's whiteouts and opaque markers count: only an overlay (two layers or more) has them.
    markers: bool,
    layers: Vec<Layer>,
}

struct Layer {
    path: PathBuf,
    fd: OwnedFd,
}

/// Where a directory's entries come from.
#[derive(Debug, Clone)]
pub(crate) enum Src {
    /// The directory exists in these layers (indices into the mount's layers, top first) at `rel`, a path
    /// relative to the mount point ("" for its root).
    Layers { mount: usize, rel: String, layers: Vec<usize> },
    /// A directory that only exists because a mount point lies beneath it.
    Synthetic,
}

/// What the walk needs to know of an entry, taken from one `lstat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Info {
    pub(crate) file_type: FileType,
    /// `st_mode & S_IFMT`, to tell a FIFO from a socket.
    pub(crate) format: u32,
    pub(crate) mode: u32,
    pub(crate) size: u64,
    pub(crate) rdev: u64,
    /// Equal keys mean the same file (or an unchanged snapshot copy of it): no need to read contents.
    pub(crate) key: (u64, u64, i64, u64, i64, u64),
    /// A directory made up to reach a mount point: its mode means nothing.
    pub(crate) synthetic: bool,
}

impl Info {
    // The conversions are lossless widenings on 32-bit targets and no-ops on 64-bit ones.
    #[allow(clippy::useless_conversion)]
    fn from_stat(st: &Stat) -> Self {
        let format = st.st_mode & 0o170000;
        let file_type = match RawType::from_raw_mode(st.st_mode) {
            RawType::RegularFile => FileType::File,
            RawType::Directory => FileType::Dir,
            RawType::Symlink => FileType::Symlink,
            _ => FileType::Other,
        };
        let size = match file_type {
            FileType::File | FileType::Symlink => u64::try_from(i64::from(st.st_size)).unwrap_or(0),
            FileType::Dir | FileType::Other => 0,
        };
        Self {
            file_type,
            format,
            mode: st.st_mode & 0o7777,
            size,
            rdev: u64::from(st.st_rdev),
            key: (
                u64::from(st.st_dev),
                u64::from(st.st_ino),
                i64::from(st.st_mtime),
                u64::from(st.st_mtime_nsec),
                i64::from(st.st_ctime),
                u64::from(st.st_ctime_nsec),
            ),
            synthetic: false,
        }
    }

    fn synthetic_dir() -> Self {
        Self {
            file_type: FileType::Dir,
            format: 0o040000,
            mode: 0o755,
            size: 0,
            rdev: 0,
            key: (0, 0, 0, 0, 0, 0),
            synthetic: true,
        }
    }
}

/// An entry of a directory as the merged view shows it.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) info: Info,
    /// Index into the view's open directories of the layer the entry comes from; `None` for mount points
    /// and synthetic directories.
    slot: Option<usize>,
    /// For a directory: where its own entries come from.
    pub(crate) child: Option<Src>,
    /// While merging: a directory keeps collecting the same name from lower layers until a non-directory.
    merging: bool,
}

/// One directory of one side, open in each layer that holds it.
pub(crate) struct View<'s> {
    side: &'s Side,
    /// Sandbox path of the directory.
    path: String,
    mount: Option<usize>,
    rel: String,
    /// (layer index, open directory), top first, already cut below an opaque directory.
    dirs: Vec<(usize, Arc<OwnedFd>)>,
}

/// What [`Side::locate`] found.
pub(crate) struct Located<'s> {
    pub(crate) view: View<'s>,
    pub(crate) name: String,
    pub(crate) entry: Entry,
}

impl Side {
    /// Validates the tree and opens each layer's root.
    pub(crate) fn open(tree: &Tree, name: &'static str) -> Result<Self, DiffError> {
        let mut mounts = Vec::with_capacity(tree.mounts.len());
        for m in &tree.mounts {
            check_sandbox_path("mount point", &m.at)?;
            if m.layers.is_empty() {
                return Err(DiffError::BadMount { at: m.at.clone(), problem: "has no layers" });
            }
            if tree.mounts.iter().filter(|o| o.at == m.at).count() > 1 {
                return Err(DiffError::BadMount { at: m.at.clone(), problem: "is listed twice" });
            }
            let mut layers = Vec::with_capacity(m.layers.len());
            for path in &m.layers {
                let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
                let fd = rustix::fs::openat(CWD, path, flags, Mode::empty())
                    .map_err(|e| DiffError::OpenLayer { path: path.clone(), source: e.into() })?;
                layers.push(Layer { path: path.clone(), fd });
            }
            mounts.push(Mount { at: m.at.clone(), markers: m.layers.len() > 1, layers });
        }
        Ok(Self { name, mounts })
    }

    fn read_err(&self, path: &str, e: impl Into<std::io::Error>) -> DiffError {
        DiffError::Read { side: self.name, path: path.to_owned(), source: e.into() }
    }

    /// Whether a mount point lies strictly beneath `path`.
    pub(crate) fn has_mount_below(&self, path: &str) -> bool {
        self.mounts.iter().any(|m| m.at != path && is_within(&m.at, path))
    }

    /// The entry of a mount point itself: its top layer's root directory.
    fn mount_entry(&self, index: usize, path: &str) -> Result<Entry, DiffError> {
        let mount = &self.mounts[index];
        let top = &mount.layers[0];
        let st = rustix::fs::fstat(&top.fd).map_err(|e| self.read_err(path, e))?;
        let child = Src::Layers { mount: index, rel: String::new(), layers: (0..mount.layers.len()).collect() };
        Ok(Entry { info: Info::from_stat(&st), slot: None, child: Some(child), merging: false })
    }

    /// The sandbox root "/": a mount's root, or a synthetic directory when only deeper mounts exist.
    pub(crate) fn root(&self) -> Result<Option<Entry>, DiffError> {
        if let Some(i) = self.mounts.iter().position(|m| m.at == "/") {
            return self.mount_entry(i, "/").map(Some);
        }
        if self.mounts.is_empty() {
            return Ok(None);
        }
        Ok(Some(Entry { info: Info::synthetic_dir(), slot: None, child: Some(Src::Synthetic), merging: false }))
    }

    /// Opens the directory at sandbox path `path` in each layer `src` names. A directory whose top layer is
    /// opaque is cut there; a layer whose copy vanished in the meantime is skipped.
    pub(crate) fn open_dir(&self, src: &Src, path: &str) -> Result<View<'_>, DiffError> {
        let (mount, rel, layers) = match src {
            Src::Synthetic => {
                return Ok(View { side: self, path: path.to_owned(), mount: None, rel: String::new(), dirs: vec![] });
            }
            Src::Layers { mount, rel, layers } => (*mount, rel, layers),
        };
        let m = &self.mounts[mount];
        let mut dirs = Vec::with_capacity(layers.len());
        for &l in layers {
            match open_beneath(&m.layers[l].fd, rel) {
                Ok(fd) => {
                    let opaque = m.markers && l == 0 && has_xattr(&fd, opaque_names(), Some(b"y"));
                    dirs.push((l, Arc::new(fd)));
                    if opaque {
                        break;
                    }
                }
                Err(e) if vanished(e) => {}
                Err(e) => return Err(self.read_err(path, e)),
            }
        }
        Ok(View { side: self, path: path.to_owned(), mount: Some(mount), rel: rel.clone(), dirs })
    }

    /// Finds the entry at sandbox path `path`, resolving each component through the layers. Mount points
    /// themselves (directories) are not found.
    pub(crate) fn locate(&self, path: &str) -> Result<Option<Located<'_>>, DiffError> {
        let best = self.mounts.iter().enumerate().filter(|(_, m)| m.at != path && is_within(path, &m.at));
        let Some((index, mount)) = best.max_by_key(|(_, m)| m.at.len()) else { return Ok(None) };
        let rel = path[mount.at.len()..].trim_start_matches('/');
        let mut src = Src::Layers { mount: index, rel: String::new(), layers: (0..mount.layers.len()).collect() };
        let mut dir = mount.at.clone();
        let mut components = rel.split('/').peekable();
        while let Some(name) = components.next() {
            let view = self.open_dir(&src, &dir)?;
            let Some(entry) = view.lookup(name)? else { return Ok(None) };
            if components.peek().is_none() {
                return Ok(Some(Located { view, name: name.to_owned(), entry }));
            }
            let Some(child) = entry.child else { return Ok(None) };
            src = child;
            dir = join(&dir, name);
        }
        Ok(None)
    }
}

impl View<'_> {
    /// The on-disk identity of this view: two views with equal identities show identical contents, so the
    /// walk need not look inside.
    pub(crate) fn identity(&self) -> Option<(bool, Vec<&Path>, &str)> {
        let mount = &self.side.mounts[self.mount?];
        let markers = mount.markers && self.dirs.first().is_some_and(|(l, _)| *l == 0);
        Some((markers, self.dirs.iter().map(|(l, _)| mount.layers[*l].path.as_path()).collect(), &self.rel))
    }

    fn child_src(&self, name: &str, layer: usize) -> Option<Src> {
        let rel = if self.rel.is_empty() { name.to_owned() } else { format!("{}/{name}", self.rel) };
        Some(Src::Layers { mount: self.mount?, rel, layers: vec![layer] })
    }

    fn markers_in(&self, layer: usize) -> bool {
        layer == 0 && self.mount.is_some_and(|m| self.side.mounts[m].markers)
    }

    /// Folds one layer's copy of a name into what the layers above it left: `None` means a whiteout.
    fn merge(&self, slot: usize, name: &str, known: Option<&mut Option<Entry>>, raw: Option<RawType>) -> Merge {
        let (layer, fd) = &self.dirs[slot];
        match known {
            Some(None) => Merge::Skip,
            Some(Some(e)) => {
                if e.merging {
                    // Listing knows the type from the directory entry; a lookup must ask, and a layer without
                    // the name is simply skipped.
                    let here = match raw {
                        Some(RawType::Unknown) | None => rustix::fs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW)
                            .ok()
                            .map(|st| RawType::from_raw_mode(st.st_mode)),
                        Some(t) => Some(t),
                    };
                    match (here, &mut e.child) {
                        (None, _) => {}
                        (Some(RawType::Directory), Some(Src::Layers { layers, .. })) => layers.push(*layer),
                        _ => e.merging = false,
                    }
                }
                Merge::Skip
            }
            None => match rustix::fs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) if self.markers_in(*layer) && is_whiteout(fd, name, &st) => Merge::New(None),
                Ok(st) => {
                    let info = Info::from_stat(&st);
                    let dir = info.file_type == FileType::Dir;
                    let child = if dir { self.child_src(name, *layer) } else { None };
                    Merge::New(Some(Entry { info, slot: Some(slot), child, merging: dir }))
                }
                Err(e) if vanished(e) => Merge::Skip,
                Err(e) => Merge::Fail(e),
            },
        }
    }

    /// Every entry of the merged directory, by name, with mount points beneath it put in place.
    pub(crate) fn list(&self) -> Result<BTreeMap<String, Entry>, DiffError> {
        let mut seen: BTreeMap<String, Option<Entry>> = BTreeMap::new();
        for (slot, (_, fd)) in self.dirs.iter().enumerate() {
            let mut dir = Dir::read_from(fd).map_err(|e| self.side.read_err(&self.path, e))?;
            while let Some(item) = dir.read() {
                let item = item.map_err(|e| self.side.read_err(&self.path, e))?;
                let raw = item.file_name().to_bytes();
                if raw == b"." || raw == b".." {
                    continue;
                }
                let name = utf8(self.side.name, &self.path, raw)?;
                match self.merge(slot, &name, seen.get_mut(&name), Some(item.file_type())) {
                    Merge::Skip => {}
                    Merge::New(entry) => {
                        seen.insert(name, entry);
                    }
                    Merge::Fail(e) => return Err(self.side.read_err(&join(&self.path, &name), e)),
                }
            }
        }
        let mut out: BTreeMap<String, Entry> = seen.into_iter().filter_map(|(k, v)| Some((k, v?))).collect();
        self.place_mounts(&mut out)?;
        Ok(out)
    }

    /// Mount points directly beneath this directory replace whatever the layers hold there; a directory on
    /// the way to a deeper mount point is made up when the layers do not have it.
    fn place_mounts(&self, out: &mut BTreeMap<String, Entry>) -> Result<(), DiffError> {
        for (index, mount) in self.side.mounts.iter().enumerate() {
            if mount.at == self.path || !is_within(&mount.at, &self.path) {
                continue;
            }
            let rest = mount.at[self.path.len()..].trim_start_matches('/');
            let (name, deeper) = match rest.split_once('/') {
                Some((name, _)) => (name, true),
                None => (rest, false),
            };
            if !deeper {
                out.insert(name.to_owned(), self.side.mount_entry(index, &mount.at)?);
            } else if out.get(name).is_none_or(|e| e.child.is_none()) {
                let entry =
                    Entry { info: Info::synthetic_dir(), slot: None, child: Some(Src::Synthetic), merging: false };
                out.insert(name.to_owned(), entry);
            }
        }
        Ok(())
    }

    /// One entry of the merged directory, without mount points (see [`Side::locate`]).
    fn lookup(&self, name: &str) -> Result<Option<Entry>, DiffError> {
        let mut found: Option<Option<Entry>> = None;
        for slot in 0..self.dirs.len() {
            match self.merge(slot, name, found.as_mut(), None) {
                Merge::Skip => {}
                Merge::New(entry) => found = Some(entry),
                Merge::Fail(e) => return Err(self.side.read_err(&join(&self.path, name), e)),
            }
            if matches!(&found, Some(None)) || found.as_ref().is_some_and(|e| e.as_ref().is_some_and(|e| !e.merging)) {
                break;
            }
        }
        Ok(found.flatten())
    }

    /// The entry's metadata, reading a link's target.
    pub(crate) fn meta(&self, name: &str, entry: &Entry) -> Result<Meta, DiffError> {
        let symlink_target = match entry.info.file_type {
            FileType::Symlink => {
                let raw = self.link_target(name, entry)?;
                let target = String::from_utf8(raw)
                    .map_err(|_| DiffError::NotUtf8 { side: self.side.name, path: join(&self.path, name) })?;
                Some(target)
            }
            _ => None,
        };
        Ok(Meta { file_type: entry.info.file_type, mode: entry.info.mode, size: entry.info.size, symlink_target })
    }

    fn entry_dir(&self, name: &str, entry: &Entry) -> Result<&Arc<OwnedFd>, DiffError> {
        let path = join(&self.path, name);
        let slot = entry.slot.ok_or_else(|| DiffError::Changed { side: self.side.name, path: path.clone() })?;
        self.dirs.get(slot).map(|(_, fd)| fd).ok_or(DiffError::Changed { side: self.side.name, path })
    }

    /// A link's target, as stored.
    pub(crate) fn link_target(&self, name: &str, entry: &Entry) -> Result<Vec<u8>, DiffError> {
        let dir = self.entry_dir(name, entry)?;
        match rustix::fs::readlinkat(dir, name, Vec::new()) {
            Ok(target) => Ok(target.into_bytes()),
            Err(e) if vanished(e) || e == Errno::INVAL => {
                Err(DiffError::Changed { side: self.side.name, path: join(&self.path, name) })
            }
            Err(e) => Err(self.side.read_err(&join(&self.path, name), e)),
        }
    }

    /// Opens a regular file for reading, refusing anything that is not the file the entry describes.
    pub(crate) fn open_file(&self, name: &str, entry: &Entry) -> Result<File, DiffError> {
        let file = self.file_ref(name, entry)?;
        file.open()?.ok_or(DiffError::Changed { side: file.side, path: file.path })
    }

    /// What it takes to open a regular file later, possibly on another thread.
    pub(crate) fn file_ref(&self, name: &str, entry: &Entry) -> Result<FileRef, DiffError> {
        Ok(FileRef {
            dir: Arc::clone(self.entry_dir(name, entry)?),
            name: name.to_owned(),
            inode: (entry.info.key.0, entry.info.key.1),
            side: self.side.name,
            path: join(&self.path, name),
        })
    }
}

/// A regular file to open: its directory (kept open), its name, and the inode it must still be.
pub(crate) struct FileRef {
    dir: Arc<OwnedFd>,
    name: String,
    inode: (u64, u64),
    pub(crate) side: &'static str,
    pub(crate) path: String,
}

impl FileRef {
    /// Opens the file for reading; `None` when it is no longer the regular file that was listed.
    pub(crate) fn open(&self) -> Result<Option<File>, DiffError> {
        match open_regular(self.dir.as_fd(), &self.name) {
            Ok(Some((file, st))) => Ok((inode(&st) == self.inode).then_some(file)),
            Ok(None) => Ok(None),
            Err(e) if vanished(e) => Ok(None),
            Err(e) => Err(DiffError::Read { side: self.side, path: self.path.clone(), source: e.into() }),
        }
    }
}

enum Merge {
    Skip,
    New(Option<Entry>),
    Fail(Errno),
}
