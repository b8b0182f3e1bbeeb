//! The vault's key file: 32 random bytes, private to the uid that runs berth.
//!
//! The key is kept apart from the sealed files and the database so that a copy of either alone reveals
//! nothing. It is checked before every use: a key another user can read or replace would hand them every
//! secret, so such a file is refused rather than used.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use zeroize::Zeroizing;

use crate::SecretError;
use crate::seal::{KEY_LEN, random};

/// Reads the key at `path`; `None` when there is no file there.
pub(crate) fn read_key(path: &Path) -> Result<Option<Zeroizing<[u8; KEY_LEN]>>, SecretError> {
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(SecretError::io("open the key file", path)(e)),
    };
    // Checked on the opened file, so what is checked is what is read.
    let meta = file.metadata().map_err(SecretError::io("inspect the key file", path))?;
    let key = path.to_path_buf();
    if !meta.is_file() {
        return Err(SecretError::KeyNotFile { key });
    }
    let uid = rustix::process::geteuid().as_raw();
    if meta.uid() != uid {
        return Err(SecretError::KeyOwner { key, owner: meta.uid(), uid });
    }
    if meta.mode() & 0o077 != 0 {
        return Err(SecretError::KeyMode { key, mode: meta.mode() & 0o7777 });
    }
    if meta.len() != KEY_LEN as u64 {
        return Err(SecretError::KeyLength { key, len: meta.len(), expected: KEY_LEN });
    }
    let mut bytes = Zeroizing::new([0u8; KEY_LEN]);
    file.read_exact(bytes.as_mut_slice()).map_err(SecretError::io("read the key file", path))?;
    Ok(Some(bytes))
}

/// Creates a new random key at `path` (mode 0600; missing parent directories are made with mode 0700).
///
/// The file appears whole or not at all: it is written under a temporary name and linked into place, so a
/// crash never leaves a short key, and if another process created the key meanwhile, that key is used.
pub(crate) fn create_key(path: &Path) -> Result<Zeroizing<[u8; KEY_LEN]>, SecretError> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&parent)
        .map_err(SecretError::io("create the key file's directory", &parent))?;
    let mut key = Zeroizing::new([0u8; KEY_LEN]);
    random(key.as_mut_slice())?;
    let file_name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let temp = parent.join(format!(".{file_name}.{}.tmp", random_hex()?));
    let written = write_new(&temp, key.as_slice()).and_then(|()| fs::hard_link(&temp, path));
    let _ = fs::remove_file(&temp);
    match written {
        Ok(()) => {
            sync_dir(&parent)?;
            Ok(key)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => match read_key(path)? {
            Some(theirs) => Ok(theirs),
            None => Err(SecretError::io("create the key file", path)(e)),
        },
        Err(e) => Err(SecretError::io("create the key file", path)(e)),
    }
}

/// Writes a new file (which must not exist) with mode 0600 and flushes it to disk.
pub(crate) fn write_new(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file =
        OpenOptions::new().write(true).create_new(true).mode(0o600).custom_flags(libc::O_NOFOLLOW).open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// Flushes a directory's entries to disk, so that a rename or link in it survives a crash.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), SecretError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(SecretError::io("flush the directory", dir))
}

/// 16 random hex digits, for temporary file names no other writer can guess or collide with.
pub(crate) fn random_hex() -> Result<String, SecretError> {
    let mut bytes = [0u8; 8];
    random(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
