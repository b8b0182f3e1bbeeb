//! The errors an import can end with. Each message names the file and says what to do, because the person
//! reading it is usually looking at an image they did not build.

use std::io;
use std::path::PathBuf;

/// Why an import stopped. Entries that are merely unsafe do not stop an import: they are skipped and listed in
/// [`crate::Report::rejected`]. These errors are for sources that cannot be read at all, images that fail
/// verification, limits, and a destination that cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("cannot read {}: {source}", path.display())]
    Source {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "{} is not an image berth can import: expected a directory, a tar archive (plain, gzip or zstd), \
         an OCI image layout or a docker save archive",
        path.display()
    )]
    UnknownFormat { path: PathBuf },
    #[error("{} is compressed with {format}, which berth does not read; decompress it first or use gzip or zstd",
        path.display())]
    UnsupportedCompression { path: PathBuf, format: &'static str },
    #[error("{what} is corrupt or truncated: {source}; fetch or export the image again")]
    Corrupt {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("the destination {} cannot be used: {source}", path.display())]
    Destination {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("the destination {} is not empty; import into a new, empty directory", path.display())]
    DestinationNotEmpty { path: PathBuf },
    #[error("cannot write {path} into the image: {source}; check free space, and that the import runs as root")]
    Write {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("the image layout has no {name}; the image is incomplete, export it again")]
    Missing { name: String },
    #[error("{what} is not valid: {reason}")]
    Invalid { what: String, reason: String },
    #[error("{what} is not valid JSON of the expected shape: {source}")]
    Json {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "{name} does not match its digest: expected {expected}, found {actual}; the image is damaged or was \
         tampered with, fetch it again"
    )]
    DigestMismatch { name: String, expected: String, actual: String },
    #[error("{name} is {actual} bytes but its descriptor says {expected}; the image is damaged, fetch it again")]
    SizeMismatch { name: String, expected: u64, actual: u64 },
    #[error("unsupported digest {digest:?}: berth verifies sha256 digests only")]
    UnsupportedDigest { digest: String },
    #[error("layer {name} has media type {media_type:?}, which is not a tar layer berth can apply")]
    UnsupportedMediaType { name: String, media_type: String },
    #[error("the image has no manifest for platform {platform} (it has: {available}); pick one with --platform")]
    NoPlatform { platform: String, available: String },
    #[error("the platform {platform:?} is not of the form os/architecture[/variant], e.g. linux/amd64")]
    BadPlatform { platform: String },
    #[error("the image would write more than {limit} bytes of file data; raise the limit if the image is trusted")]
    TooManyBytes { limit: u64 },
    #[error("the image would create more than {limit} files; raise the limit if the image is trusted")]
    TooManyFiles { limit: u64 },
    #[error("the id shift {shift:#x} is too large: the image's ids 0..65535 would not fit below 2^32")]
    BadIdShift { shift: u32 },
}

impl ImportError {
    pub(crate) fn source_io(path: &std::path::Path, source: io::Error) -> Self {
        ImportError::Source { path: path.to_path_buf(), source }
    }

    pub(crate) fn invalid(what: impl Into<String>, reason: impl Into<String>) -> Self {
        ImportError::Invalid { what: what.into(), reason: reason.into() }
    }
}
