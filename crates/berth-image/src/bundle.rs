//! Reading the files of an image layout or docker save archive, whether it is a directory or a tar.
//!
//! A plain tar is indexed once (name to offset) and members are then read in place with `pread`, so nothing
//! is extracted. A compressed tar cannot be read in place, so it is first decompressed into an unnamed file
//! (`O_TMPFILE`) on the destination's file system, which vanishes when the import ends whatever happens, and
//! that is indexed instead: one decompression instead of one per member.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;
use sha2::{Digest as _, Sha256};

use crate::detect::{Compression, decompress, open_source};
use crate::error::ImportError;
use crate::tarstream::{Kind, Seekable, Skip, TarReader};

/// JSON documents (index, manifests, configs) larger than this are refused.
pub(crate) const MAX_JSON: u64 = 16 << 20;

#[derive(Debug, Clone)]
pub(crate) enum Member {
    Data {
        pos: u64,
        size: u64,
    },
    /// A symlink or hard link to another member (by cleaned name).
    Link(String),
}

pub(crate) enum Bundle {
    Dir { path: PathBuf, fd: OwnedFd },
    Tar { file: File, members: HashMap<String, Member> },
}

/// A member opened for reading, with its size.
pub(crate) type MemberReader<'a> = (Box<dyn Read + 'a>, u64);

impl Bundle {
    /// Opens `source`. A compressed archive is decompressed into an unnamed file in `spool` (at most
    /// `max_bytes` of it, the image's byte budget, so a compressed bomb stops early).
    pub(crate) fn open(source: &Path, spool: BorrowedFd<'_>, max_bytes: u64) -> Result<Bundle, ImportError> {
        let meta = std::fs::metadata(source).map_err(|e| ImportError::source_io(source, e))?;
        if meta.is_dir() {
            let fd = rfs::open(source, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
                .map_err(|e| ImportError::source_io(source, e.into()))?;
            return Ok(Bundle::Dir { path: source.to_path_buf(), fd });
        }
        let (compression, file) = open_source(source)?;
        let file = match compression {
            Compression::None => file,
            _ => spool_file(source, file, spool, max_bytes)?,
        };
        let mut members = HashMap::new();
        let reader = ReadAt { file: &file, pos: 0, end: u64::MAX };
        let mut tar = TarReader::new(Seekable(BufReader::with_capacity(64 << 10, reader)));
        index(&mut tar, &mut members)
            .map_err(|e| ImportError::Corrupt { what: source.display().to_string(), source: e })?;
        Ok(Bundle::Tar { file, members })
    }

    pub(crate) fn has(&self, name: &str) -> bool {
        match self {
            Bundle::Dir { fd, .. } => safe_open(fd, name).is_ok(),
            Bundle::Tar { members, .. } => resolve(members, name).is_some(),
        }
    }

    /// Opens the member `name` (a path inside the layout; links between members are followed, within it).
    pub(crate) fn open_member(&self, name: &str) -> Result<MemberReader<'_>, ImportError> {
        let missing = || ImportError::Missing { name: name.to_string() };
        match self {
            Bundle::Dir { fd, path } => {
                let read_err = |e| ImportError::source_io(&path.join(name), e);
                let file = safe_open(fd, name).map_err(|e| match e.kind() {
                    io::ErrorKind::NotFound => missing(),
                    _ => read_err(e),
                })?;
                let size = file.metadata().map_err(read_err)?.len();
                Ok((Box::new(BufReader::with_capacity(256 << 10, file)), size))
            }
            Bundle::Tar { file, members } => {
                let (_, pos, size) = resolve(members, name).ok_or_else(missing)?;
                let reader = ReadAt { file, pos, end: pos.saturating_add(size) };
                Ok((Box::new(BufReader::with_capacity(256 << 10, reader)), size))
            }
        }
    }

    /// Reads a small member (a JSON document) whole.
    pub(crate) fn read_small(&self, name: &str) -> Result<Vec<u8>, ImportError> {
        let (reader, size) = self.open_member(name)?;
        if size > MAX_JSON {
            return Err(ImportError::invalid(name, format!("it is {size} bytes; at most {MAX_JSON} are read")));
        }
        let mut data = Vec::new();
        reader.take(MAX_JSON + 1).read_to_end(&mut data).map_err(|e| ImportError::source_io(Path::new(name), e))?;
        Ok(data)
    }
}

/// Reads a range of a file with `pread`, so several readers never disturb a shared offset.
struct ReadAt<'f> {
    file: &'f File,
    pos: u64,
    end: u64,
}

impl Read for ReadAt<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = usize::try_from(self.end - self.pos).unwrap_or(usize::MAX).min(buf.len());
        if want == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut buf[..want], self.pos)?;
        if n == 0 && self.end != u64::MAX {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the archive ends inside a member"));
        }
        self.pos += n as u64;
        Ok(n)
    }
}

impl io::Seek for ReadAt<'_> {
    fn seek(&mut self, to: io::SeekFrom) -> io::Result<u64> {
        let bad = || io::Error::new(io::ErrorKind::InvalidInput, "seek out of range");
        self.pos = match to {
            io::SeekFrom::Start(n) => n,
            io::SeekFrom::Current(n) => self.pos.checked_add_signed(n).ok_or_else(bad)?,
            io::SeekFrom::End(_) => return Err(bad()),
        };
        Ok(self.pos)
    }
}

/// Decompresses `source` into a file with no name in `dir`: `O_TMPFILE` where the file system has it,
/// otherwise a file created and unlinked at once.
fn spool_file(source: &Path, compressed: File, dir: BorrowedFd<'_>, max_bytes: u64) -> Result<File, ImportError> {
    let write_err =
        |e: Errno| ImportError::Write { path: "(decompressed copy of the archive)".into(), source: e.into() };
    let flags = OFlags::RDWR | OFlags::CLOEXEC;
    let fd = match rfs::openat(dir, ".", flags | OFlags::TMPFILE, Mode::from_raw_mode(0o600)) {
        Ok(fd) => fd,
        Err(Errno::OPNOTSUPP | Errno::ISDIR | Errno::INVAL | Errno::NOENT) => {
            let name = ".berth-import-spool";
            let fd = rfs::openat(dir, name, flags | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW, Mode::empty())
                .map_err(write_err)?;
            rfs::unlinkat(dir, name, AtFlags::empty()).map_err(write_err)?;
            fd
        }
        Err(e) => return Err(write_err(e)),
    };
    let mut out = File::from(fd);
    let plain = decompress(compressed, source)?;
    let copied =
        io::copy(&mut plain.take(max_bytes.saturating_add(1)), &mut out).map_err(|e| match e.raw_os_error() {
            Some(code) => write_err(Errno::from_raw_os_error(code)),
            None => ImportError::Corrupt { what: source.display().to_string(), source: e },
        })?;
    if copied > max_bytes {
        return Err(ImportError::TooManyBytes { limit: max_bytes });
    }
    Ok(out)
}

/// Opens a file of a layout directory: symlinks are followed only within it, and it must be a regular file.
fn safe_open(dir: &OwnedFd, name: &str) -> io::Result<File> {
    let fd = crate::safefs::open_in_root(dir.as_fd(), Path::new(name), OFlags::RDONLY | OFlags::NONBLOCK)?;
    if FileType::from_raw_mode(rfs::fstat(&fd)?.st_mode) != FileType::RegularFile {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{name} is not a regular file")));
    }
    Ok(File::from(fd))
}

fn index<R: Skip>(tar: &mut TarReader<R>, members: &mut HashMap<String, Member>) -> io::Result<()> {
    while let Some(entry) = tar.next_entry()? {
        let Some(name) = clean(&String::from_utf8_lossy(&entry.path)) else { continue };
        let link = String::from_utf8_lossy(&entry.link).into_owned();
        let member = match entry.kind {
            Kind::File => Member::Data { pos: entry.data_pos, size: entry.size },
            Kind::HardLink => match clean(&link) {
                Some(target) => Member::Link(target),
                None => continue,
            },
            Kind::Symlink => {
                let base = Path::new(&name).parent().unwrap_or(Path::new(""));
                let joined = if link.starts_with('/') { link } else { format!("{}/{link}", base.display()) };
                match clean(&joined) {
                    Some(target) => Member::Link(target),
                    None => continue,
                }
            }
            _ => continue,
        };
        members.insert(name, member);
    }
    Ok(())
}

/// Follows links between members; returns the data member's name, offset and size.
fn resolve(members: &HashMap<String, Member>, name: &str) -> Option<(String, u64, u64)> {
    let mut key = clean(name)?;
    for _ in 0..16 {
        match members.get(&key)? {
            Member::Data { pos, size } => return Some((key, *pos, *size)),
            Member::Link(target) => key = target.clone(),
        }
    }
    None
}

/// A member name as a plain relative path: `./`, `/` and empty components dropped, `..` applied; `None` if
/// it would climb above the archive's root or names the root itself.
pub(crate) fn clean(name: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for part in name.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    if parts.is_empty() { None } else { Some(parts.join("/")) }
}

/// A sha256 digest, checked to be 64 lowercase hex digits so it is safe to use as a file name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Digest(String);

impl Digest {
    pub(crate) fn parse(text: &str) -> Result<Digest, ImportError> {
        match text.split_once(':') {
            Some(("sha256", hex))
                if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) =>
            {
                Ok(Digest(hex.to_string()))
            }
            _ => Err(ImportError::UnsupportedDigest { digest: text.to_string() }),
        }
    }

    /// Where the blob lives in an OCI layout.
    pub(crate) fn blob_path(&self) -> String {
        format!("blobs/sha256/{}", self.0)
    }
}

impl std::fmt::Display for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "sha256:{}", self.0)
    }
}

/// Hashes everything `reader` yields; returns the digest and the byte count.
pub(crate) fn sha256(mut reader: impl Read) -> io::Result<(Digest, u64)> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
        total += n as u64;
    }
    let hex: String = hasher.finalize().iter().map(|b| format!("{b:02x}")).collect();
    Ok((Digest(hex), total))
}

/// Checks a member against its digest (and size, when known) before anything of it is used.
pub(crate) fn verify(bundle: &Bundle, name: &str, digest: &Digest, size: Option<u64>) -> Result<(), ImportError> {
    let (reader, _) = bundle.open_member(name)?;
    check(name, reader, digest, size)
}

/// Checks what `reader` yields against a digest and size.
pub(crate) fn check(name: &str, reader: impl Read, digest: &Digest, size: Option<u64>) -> Result<(), ImportError> {
    let (actual, len) = sha256(reader).map_err(|e| ImportError::Corrupt { what: name.to_string(), source: e })?;
    if let Some(expected) = size
        && expected != len
    {
        return Err(ImportError::SizeMismatch { name: name.to_string(), expected, actual: len });
    }
    if &actual != digest {
        return Err(ImportError::DigestMismatch {
            name: name.to_string(),
            expected: digest.to_string(),
            actual: actual.to_string(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_names() {
        assert_eq!(clean("./blobs/sha256/ab").as_deref(), Some("blobs/sha256/ab"));
        assert_eq!(clean("a/../b").as_deref(), Some("b"));
        assert_eq!(clean("../x"), None);
        assert_eq!(clean("./"), None);
    }

    #[test]
    fn digests_must_be_sha256_hex() {
        assert!(Digest::parse(&format!("sha256:{}", "a".repeat(64))).is_ok());
        assert!(Digest::parse("sha256:../../etc/passwd").is_err());
        assert!(Digest::parse(&format!("sha512:{}", "a".repeat(128))).is_err());
        assert!(Digest::parse(&format!("sha256:{}", "A".repeat(64))).is_err());
    }
}
