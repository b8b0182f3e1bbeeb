//! Image import: builds a sandbox's read-only root file system from a directory, a rootfs tarball (plain,
//! gzip or zstd), an OCI image layout (a directory or a tar of one) or a `docker save` archive.
//!
//! Images come from anywhere, so every archive is treated as hostile. Nothing is written except through a
//! descriptor for the destination, with every path resolved so that no symlink (planted by an earlier entry or
//! already there) can lead outside it; `..` entries, hard links out of the image, device nodes, setuid and
//! setgid bits, xattrs other than `user.*` and ids beyond the image's 65536 are refused or neutralised, and
//! each is listed in [`Report::rejected`]. Byte and file budgets stop archives that would fill the disk.
//!
//! Layers are applied in order onto one directory, honouring OCI whiteouts (`.wh.NAME`, `.wh..wh..opq`).
//! Blobs of an OCI layout are checked against their sha256 digests, and docker save layers against the
//! config's `diff_ids`, all before the first byte is written.
#![forbid(unsafe_code)]

mod bundle;
mod detect;
mod dircopy;
mod docker;
mod error;
mod layer;
mod oci;
mod safefs;
mod tarstream;
mod writer;

use std::cell::Cell;
use std::io::{BufReader, Read};
use std::path::Path;
use std::rc::Rc;

use rustix::fs::{self as rfs, Mode, OFlags};

pub use detect::detect;
pub use error::ImportError;

use crate::bundle::Bundle;
use crate::oci::Platform;
use crate::tarstream::{Stream, TarReader};
use crate::writer::Writer;

/// The platform picked from a multi-platform image when none is asked for.
pub const DEFAULT_PLATFORM: &str = "linux/amd64";
/// Default for [`Options::max_bytes`]: 64 GiB of file data.
pub const DEFAULT_MAX_BYTES: u64 = 64 << 30;
/// Default for [`Options::max_files`].
pub const DEFAULT_MAX_FILES: u64 = 5_000_000;

/// What a source is; see [`detect`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceKind {
    /// A directory holding a root file system.
    Directory,
    /// A tar archive of a root file system (plain, gzip or zstd).
    Tarball,
    /// An OCI image layout: a directory with `oci-layout`, `index.json` and `blobs/`, or a tar of one.
    OciLayout,
    /// A `docker save` archive (or its extracted directory), classic or OCI-layout format.
    DockerSave,
}

impl std::fmt::Display for SourceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SourceKind::Directory => "directory",
            SourceKind::Tarball => "rootfs tarball",
            SourceKind::OciLayout => "OCI image layout",
            SourceKind::DockerSave => "docker save archive",
        })
    }
}

/// How to import.
pub struct Options<'a> {
    /// Added to every uid and gid written (files are stored on the host under a dedicated id block, e.g.
    /// 0x6f000000; id 0 inside the image becomes that). Ids ≥ 65536 in the archive are mapped to 65534
    /// (nobody) and reported.
    pub id_shift: u32,
    /// Called now and then with progress so the CLI can draw a bar.
    pub progress: Option<&'a (dyn Fn(Progress) + Sync)>,
    /// Platform to pick from a multi-platform OCI index (default linux/amd64), as `os/arch[/variant]`.
    pub platform: Option<String>,
    /// The import fails once archive entries declare more than this many bytes of data in total (written or
    /// skipped, across all layers), so a small compressed archive cannot fill the disk.
    pub max_bytes: u64,
    /// The import fails once it would create more than this many files, directories and links in total.
    pub max_files: u64,
}

impl Default for Options<'_> {
    fn default() -> Self {
        Options {
            id_shift: 0,
            progress: None,
            platform: None,
            max_bytes: DEFAULT_MAX_BYTES,
            max_files: DEFAULT_MAX_FILES,
        }
    }
}

/// Progress through the import. `layer` counts from 1 to `layers`; the bytes are those read of the current
/// layer as stored (compressed, if it is), out of its stored size. For a directory source `bytes_done` counts
/// file data copied and `bytes_total` is 0 (unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub layer: usize,
    pub layers: usize,
    pub bytes_done: u64,
    pub bytes_total: u64,
}

/// What an import did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    pub kind: SourceKind,
    /// Layers applied (1 for a directory or a tarball).
    pub layers: usize,
    /// Files, directories, links and fifos created, including directories made implicitly.
    pub files: u64,
    /// Bytes of file data written.
    pub bytes: u64,
    /// Entries skipped or changed for safety, in archive order.
    pub rejected: Vec<Rejected>,
    /// Rejections beyond the first 10,000, counted but not listed.
    pub rejected_omitted: u64,
    pub config: ImageConfig,
}

/// One entry skipped or changed, and why (e.g. "escapes the image (..); skipped", "device node; skipped",
/// "setuid bit removed", "hard link to outside the image (../../etc/passwd); skipped").
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Rejected {
    /// The entry's path as the archive (or source directory) names it.
    pub path: String,
    pub reason: String,
}

/// How the image wants to be run, from its config (empty for directories and tarballs).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ImageConfig {
    pub env: Vec<String>,
    pub cmd: Vec<String>,
    pub entrypoint: Vec<String>,
    pub workdir: Option<String>,
    pub user: Option<String>,
}

/// Import `source` into `dest`, an existing empty directory the caller owns.
///
/// `dest` itself becomes the image's root directory: it is owned by the shifted root and its mode is 0755
/// unless the source says otherwise. On error `dest` holds a partial image; remove it.
pub fn import(source: &Path, dest: &Path, opts: &Options) -> Result<Report, ImportError> {
    if opts.id_shift > u32::MAX - 65536 {
        return Err(ImportError::BadIdShift { shift: opts.id_shift });
    }
    let platform = Platform::parse(opts.platform.as_deref().unwrap_or(DEFAULT_PLATFORM))?;
    let kind = detect(source)?;
    let dest_fd = open_dest(dest)?;
    let mut w = Writer::new(dest_fd, opts);
    let dest_err = |e: rustix::io::Errno| ImportError::Destination { path: dest.to_path_buf(), source: e.into() };
    safefs::set_owner(w.root.fd(), opts.id_shift, opts.id_shift).map_err(dest_err)?;
    rfs::fchmod(w.root.fd(), Mode::from_raw_mode(0o755)).map_err(dest_err)?;

    let (layers, config) = match kind {
        SourceKind::Directory => {
            w.count_writes = true;
            w.begin_layer(1, 1, 0, source.display().to_string());
            dircopy::copy(source, &mut w)?;
            (1, ImageConfig::default())
        }
        SourceKind::Tarball => {
            let (_, file) = detect::open_source(source)?;
            let total = file.metadata().map(|m| m.len()).unwrap_or(0);
            w.begin_layer(1, 1, total, source.display().to_string());
            apply(&mut w, file, source)?;
            (1, ImageConfig::default())
        }
        SourceKind::OciLayout | SourceKind::DockerSave => layered(&mut w, source, &platform)?,
    };
    let (files, bytes, rejected, rejected_omitted) = w.finish_all()?;
    Ok(Report { kind, layers, files, bytes, rejected, rejected_omitted, config })
}

/// Opens the destination and checks that it is an empty directory.
fn open_dest(dest: &Path) -> Result<std::os::fd::OwnedFd, ImportError> {
    let err = |e: rustix::io::Errno| ImportError::Destination { path: dest.to_path_buf(), source: e.into() };
    let fd = rfs::open(dest, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).map_err(err)?;
    if !safefs::list(std::os::fd::AsFd::as_fd(&fd)).map_err(err)?.is_empty() {
        return Err(ImportError::DestinationNotEmpty { path: dest.to_path_buf() });
    }
    Ok(fd)
}

/// An OCI layout or docker save: plan, verify every layer, then apply them in order.
fn layered(w: &mut Writer<'_>, source: &Path, platform: &Platform) -> Result<(usize, ImageConfig), ImportError> {
    let bundle = Bundle::open(source, w.root.fd(), w.max_bytes)?;
    let plan = if bundle.has("oci-layout") && bundle.has("index.json") {
        oci::plan(&bundle, platform)?
    } else {
        docker::plan(&bundle, platform)?
    };
    for layer in &plan.layers {
        if let Some((digest, size)) = &layer.digest {
            bundle::verify(&bundle, &layer.name, digest, Some(*size))?;
        }
        if let Some(diff_id) = &layer.diff_id {
            let (reader, _) = bundle.open_member(&layer.name)?;
            bundle::check(&layer.name, detect::decompress(reader, Path::new(&layer.name))?, diff_id, None)?;
        }
    }
    let count = plan.layers.len();
    for (i, layer) in plan.layers.iter().enumerate() {
        let (reader, size) = bundle.open_member(&layer.name)?;
        w.begin_layer(i + 1, count, size, format!("layer {} of {count} ({})", i + 1, layer.name));
        apply(w, reader, Path::new(&layer.name))?;
    }
    Ok((count, plan.config))
}

/// Applies one (possibly compressed) tar stream, counting the stored bytes read for progress.
fn apply(w: &mut Writer<'_>, reader: impl Read, what: &Path) -> Result<(), ImportError> {
    let counted = Counting { inner: reader, counter: w.counter.clone() };
    let plain = detect::decompress(counted, what)?;
    let mut tar = TarReader::new(Stream(BufReader::with_capacity(256 << 10, plain)));
    w.apply_tar(&mut tar)?;
    // What follows the end-of-archive marker is not read, but the layer is done.
    w.end_layer();
    Ok(())
}

/// Counts bytes as they are read, for progress reports.
struct Counting<R> {
    inner: R,
    counter: Rc<Cell<u64>>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.counter.set(self.counter.get() + n as u64);
        Ok(n)
    }
}
