//! Telling what a source is, and undoing its compression.
//!
//! Compression is recognised by magic bytes, never by file name or media type: docker's own archives label
//! uncompressed layers `tar.gzip` and the other way round often enough.

use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use crate::SourceKind;
use crate::error::ImportError;
use crate::tarstream::{Seekable, Skip, Stream, TarReader};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Compression {
    None,
    Gzip,
    Zstd,
}

/// The compression `magic` announces; formats berth recognises but does not read are an error naming them.
fn sniff(magic: &[u8]) -> Result<Compression, &'static str> {
    match magic {
        [0x1f, 0x8b, ..] => Ok(Compression::Gzip),
        [0x28, 0xb5, 0x2f, 0xfd, ..] => Ok(Compression::Zstd),
        [0xfd, b'7', b'z', b'X', b'Z', 0, ..] => Err("xz"),
        [b'B', b'Z', b'h', ..] => Err("bzip2"),
        [0x04, 0x22, 0x4d, 0x18, ..] => Err("lz4"),
        _ => Ok(Compression::None),
    }
}

/// Reads up to `buf.len()` bytes, fewer only at end of input.
fn read_up_to(reader: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// Opens a file and tells how it is compressed; the file is returned positioned at its start.
pub(crate) fn open_source(path: &Path) -> Result<(Compression, File), ImportError> {
    let io_err = |e| ImportError::source_io(path, e);
    let mut file = File::open(path).map_err(io_err)?;
    let mut magic = [0u8; 6];
    let n = read_up_to(&mut file, &mut magic).map_err(io_err)?;
    file.seek(SeekFrom::Start(0)).map_err(io_err)?;
    let compression = sniff(&magic[..n])
        .map_err(|format| ImportError::UnsupportedCompression { path: path.to_path_buf(), format })?;
    Ok((compression, file))
}

/// Wraps `reader` in the decompressor its first bytes call for (or none).
pub(crate) fn decompress<'a>(mut reader: impl Read + 'a, what: &Path) -> Result<Box<dyn Read + 'a>, ImportError> {
    let mut magic = [0u8; 6];
    let n = read_up_to(&mut reader, &mut magic).map_err(|e| ImportError::source_io(what, e))?;
    let compression = sniff(&magic[..n])
        .map_err(|format| ImportError::UnsupportedCompression { path: what.to_path_buf(), format })?;
    let whole = io::Cursor::new(magic[..n].to_vec()).chain(reader);
    Ok(match compression {
        Compression::None => Box::new(whole),
        Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(whole)),
        Compression::Zstd => {
            Box::new(zstd::stream::read::Decoder::new(whole).map_err(|e| ImportError::source_io(what, e))?)
        }
    })
}

/// What `source` is: a directory (a root file system, an OCI layout or an extracted docker save) or a file
/// (a rootfs tarball, or a tar of a layout or of a docker save, each possibly compressed).
pub fn detect(source: &Path) -> Result<SourceKind, ImportError> {
    let meta = std::fs::metadata(source).map_err(|e| ImportError::source_io(source, e))?;
    if meta.is_dir() {
        let has = |name: &str| source.join(name).is_file();
        return Ok(if has("oci-layout") && has("index.json") {
            if has("manifest.json") { SourceKind::DockerSave } else { SourceKind::OciLayout }
        } else if has("manifest.json") && is_docker_manifest(&source.join("manifest.json")) {
            SourceKind::DockerSave
        } else {
            SourceKind::Directory
        });
    }
    if !meta.is_file() {
        return Err(ImportError::UnknownFormat { path: source.to_path_buf() });
    }
    let (compression, file) = open_source(source)?;
    let scanned = if compression == Compression::None {
        scan(TarReader::new(Seekable(BufReader::with_capacity(64 << 10, file))))
    } else {
        scan(TarReader::new(Stream(BufReader::new(decompress(file, source)?))))
    };
    match scanned {
        Ok(kind) => Ok(kind),
        // A first header that does not parse means this is not a tar at all; a later one, a damaged tar.
        Err((0, e)) if matches!(e.kind(), io::ErrorKind::InvalidData | io::ErrorKind::UnexpectedEof) => {
            Err(ImportError::UnknownFormat { path: source.to_path_buf() })
        }
        Err((_, e)) if matches!(e.kind(), io::ErrorKind::InvalidData | io::ErrorKind::UnexpectedEof) => {
            Err(ImportError::Corrupt { what: source.display().to_string(), source: e })
        }
        Err((_, e)) => Err(ImportError::source_io(source, e)),
    }
}

/// Reads entry names until one could not belong to a layout or docker save (then it is a rootfs tarball,
/// usually decided at the first entry) or the archive ends.
/// An error comes with the number of entries read before it.
fn scan<R: Skip>(mut tar: TarReader<R>) -> Result<SourceKind, (usize, io::Error)> {
    let (mut oci_layout, mut index, mut manifest) = (false, false, false);
    let mut entries = 0;
    while let Some(entry) = tar.next_entry().map_err(|e| (entries, e))? {
        entries += 1;
        let name = String::from_utf8_lossy(&entry.path).into_owned();
        let name = crate::bundle::clean(&name).unwrap_or_default();
        if !layout_name(&name) {
            return Ok(SourceKind::Tarball);
        }
        match name.as_str() {
            "oci-layout" => oci_layout = true,
            "index.json" => index = true,
            "manifest.json" => manifest = true,
            _ => {}
        }
    }
    Ok(match (oci_layout && index, manifest) {
        (_, true) => SourceKind::DockerSave,
        (true, false) => SourceKind::OciLayout,
        (false, false) => SourceKind::Tarball,
    })
}

/// Whether `name` can appear in an OCI layout or a docker save archive (old or new format).
fn layout_name(name: &str) -> bool {
    let is_hex = |s: &str| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit());
    let parts: Vec<&str> = name.split('/').collect();
    match parts.as_slice() {
        [""] | ["oci-layout" | "index.json" | "manifest.json" | "repositories" | "blobs"] => true,
        ["blobs", _] | ["blobs", _, _] => true,
        [id] => is_hex(id) || id.strip_suffix(".json").is_some_and(is_hex),
        [id, "VERSION" | "json" | "layer.tar"] => is_hex(id),
        _ => false,
    }
}

/// Whether a directory's `manifest.json` is a docker save manifest (an array of objects with `Layers`),
/// so a root file system that happens to hold a `manifest.json` is not mistaken for one.
fn is_docker_manifest(path: &Path) -> bool {
    let Ok(file) = File::open(path) else { return false };
    let Ok(value) = serde_json::from_reader::<_, serde_json::Value>(file.take(crate::bundle::MAX_JSON)) else {
        return false;
    };
    value.as_array().is_some_and(|a| !a.is_empty() && a.iter().all(|m| m.get("Layers").is_some()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_names() {
        assert!(layout_name("oci-layout"));
        assert!(layout_name("blobs/sha256/abc"));
        assert!(layout_name(&format!("{}/layer.tar", "a".repeat(64))));
        assert!(!layout_name("etc"));
        assert!(!layout_name("blobs/sha256/abc/def"));
    }

    #[test]
    fn magic() {
        assert_eq!(sniff(&[0x1f, 0x8b, 8]), Ok(Compression::Gzip));
        assert_eq!(sniff(&[0x28, 0xb5, 0x2f, 0xfd]), Ok(Compression::Zstd));
        assert_eq!(sniff(b"BZh91"), Err("bzip2"));
        assert_eq!(sniff(b"ustar"), Ok(Compression::None));
    }
}
