//! The vault: one sealed file per secret in `<dir>/secrets/`, under a key kept elsewhere.

use std::fmt;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use crate::key::{create_key, random_hex, read_key, sync_dir, write_new};
use crate::seal::{Header, OVERHEAD, OpenError, Sealer};
use crate::{SecretError, check_name};

/// The largest value a secret may have. Secrets reach the sandbox as environment variables (the kernel takes
/// at most 128 KiB per variable), and the redactor holds back about as many bytes as its longest pattern.
pub const MAX_VALUE_LEN: usize = 64 * 1024;

const SUFFIX: &str = ".sealed";
/// A sealed empty value whose opening proves the key is the vault's key. Its label is not a valid secret name,
/// so it can never be mistaken for, or swapped with, a secret's file.
const KEY_CHECK: &str = ".key-check";
/// Temporary files older than this are left over from a crash and are removed when the vault is opened.
const STALE_TEMP: Duration = Duration::from_secs(3600);

/// What `list` tells about a secret: never its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretInfo {
    pub name: String,
    /// When the secret was first set, in milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// When its value was last set.
    pub updated_at_ms: u64,
    /// The value's length in bytes.
    pub bytes: u64,
}

/// The store of secrets. Every method works on the files directly, so several `Vault`s (or processes) on the
/// same directory see each other's changes; a replaced secret is never seen half-written.
pub struct Vault {
    dir: PathBuf,
    key_path: PathBuf,
    sealer: Sealer,
}

impl fmt::Debug for Vault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Vault").field("dir", &self.dir).field("key_path", &self.key_path).finish_non_exhaustive()
    }
}

impl Vault {
    /// Opens the vault whose secrets are in `<dir>/secrets/` (made with mode 0700), sealed with the key in
    /// `key_path`.
    ///
    /// A missing key is created (32 random bytes, mode 0600) only while the vault holds no secret: a missing
    /// key with secrets present means the key was lost, and making a new one would only hide that. The key is
    /// checked against the vault here, so a wrong key fails now with a clear error rather than later on every
    /// secret. `key_path` should be outside the data root's database files (for example `<root>/keys/` or
    /// `/etc/berth/`): the point is that a copy of the database alone reveals nothing.
    pub fn open(dir: &Path, key_path: &Path) -> Result<Vault, SecretError> {
        let secrets = dir.join("secrets");
        private_dir(&secrets)?;
        remove_stale_temps(&secrets);
        let sealed = sealed_names(&secrets)?;
        let check_path = secrets.join(KEY_CHECK);
        let check_exists = fs::symlink_metadata(&check_path).is_ok();
        let key = match read_key(key_path)? {
            Some(key) => key,
            None if !sealed.is_empty() || check_exists => {
                return Err(SecretError::KeyMissing { key: key_path.to_path_buf(), dir: secrets });
            }
            None => create_key(key_path)?,
        };
        let vault = Vault { dir: secrets, key_path: key_path.to_path_buf(), sealer: Sealer::new(&key) };
        vault.verify_key(&sealed)?;
        Ok(vault)
    }

    /// The directory holding the sealed files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Stores `value` as secret `name`, replacing any earlier value (atomically: readers see the old value or the
    /// new, never a mix). The value is stored exactly as given; a trailing newline is part of it.
    pub fn set(&self, name: &str, value: &[u8]) -> Result<(), SecretError> {
        check_name(name)?;
        if value.len() > MAX_VALUE_LEN {
            return Err(SecretError::TooLarge { name: name.to_string(), len: value.len(), max: MAX_VALUE_LEN });
        }
        if value.contains(&0) {
            return Err(SecretError::NulByte { name: name.to_string() });
        }
        let path = self.path(name);
        let now = now_ms();
        // An earlier value's creation time is kept (taken only from a file that opens, so it is authentic); an
        // unreadable earlier file is simply replaced.
        let created_at_ms = read_sealed(&path, name)
            .ok()
            .flatten()
            .and_then(|bytes| self.sealer.open(name.as_bytes(), &bytes).ok())
            .map_or(now, |(h, _)| h.created_at_ms.min(now));
        let file = self.sealer.seal(name.as_bytes(), Header { created_at_ms, updated_at_ms: now }, value)?;
        self.write_atomic(&path, &file)
    }

    /// Seal `value` for this vault's key alone, bound to `label` (which names what it is for, and is not a
    /// secret's name: labels of tokens start with `token:`). For a token the daemon hands out and reads back
    /// later, after a restart too, that must say what it stands for without being readable or forgeable by
    /// its holder.
    pub fn seal_token(&self, label: &str, value: &[u8]) -> Result<Vec<u8>, SecretError> {
        let now = now_ms();
        self.sealer.seal(format!("token:{label}").as_bytes(), Header { created_at_ms: now, updated_at_ms: now }, value)
    }

    /// What `seal_token` sealed with `label`; `None` for anything else (another label, another key, altered).
    pub fn open_token(&self, label: &str, sealed: &[u8]) -> Option<Zeroizing<Vec<u8>>> {
        self.sealer.open(format!("token:{label}").as_bytes(), sealed).ok().map(|(_, value)| value)
    }

    /// The value of secret `name`, or `None` if there is no such secret. The buffer is wiped when dropped.
    pub fn get(&self, name: &str) -> Result<Option<Zeroizing<Vec<u8>>>, SecretError> {
        check_name(name)?;
        let path = self.path(name);
        let Some(file) = read_sealed(&path, name)? else {
            return Ok(None);
        };
        match self.sealer.open(name.as_bytes(), &file) {
            Ok((_, value)) => Ok(Some(value)),
            Err(OpenError::Format(reason)) => {
                Err(SecretError::BadFormat { name: name.to_string(), file: path, reason })
            }
            // The key was proven right when the vault was opened, so a failure here is the file's.
            Err(OpenError::Auth) => Err(SecretError::Tampered { name: name.to_string(), file: path }),
        }
    }

    /// Every secret's name, times and size, sorted by name; values are not read.
    pub fn list(&self) -> Result<Vec<SecretInfo>, SecretError> {
        let mut out = Vec::new();
        for name in sealed_names(&self.dir)? {
            let path = self.path(&name);
            let mut file = match open_sealed(&path, &name) {
                Ok(Some(file)) => file,
                // Removed since the directory was read.
                Ok(None) => continue,
                Err(e) => return Err(e),
            };
            let len = file.metadata().map_err(SecretError::io("inspect", &path))?.len();
            let mut head = Vec::new();
            (&mut file).take(64).read_to_end(&mut head).map_err(SecretError::io("read", &path))?;
            let bad = |reason| SecretError::BadFormat { name: name.clone(), file: path.clone(), reason };
            let header = Header::parse(&head).map_err(bad)?;
            let bytes = len.checked_sub(OVERHEAD as u64).ok_or_else(|| bad("is too short to be a sealed secret"))?;
            out.push(SecretInfo {
                name: name.clone(),
                created_at_ms: header.created_at_ms,
                updated_at_ms: header.updated_at_ms,
                bytes,
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Removes secret `name`; `false` if there was no such secret.
    pub fn remove(&self, name: &str) -> Result<bool, SecretError> {
        check_name(name)?;
        let path = self.path(name);
        match fs::remove_file(&path) {
            Ok(()) => {
                sync_dir(&self.dir)?;
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(SecretError::io("remove", path)(e)),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}{SUFFIX}"))
    }

    /// Proves the key opens this vault: by its key-check file, or, when that is missing, by any secret that
    /// opens (none opening while some fail authentication means another key). Then records the check.
    fn verify_key(&self, sealed: &[String]) -> Result<(), SecretError> {
        let wrong = || SecretError::WrongKey { key: self.key_path.clone(), dir: self.dir.clone() };
        let check_path = self.dir.join(KEY_CHECK);
        if let Ok(Some(file)) = read_sealed(&check_path, KEY_CHECK) {
            match self.sealer.open(KEY_CHECK.as_bytes(), &file) {
                Ok(_) => return Ok(()),
                Err(OpenError::Auth) => return Err(wrong()),
                // An unreadable check file is rebuilt below.
                Err(OpenError::Format(_)) => {}
            }
        }
        let mut failed = false;
        for name in sealed {
            match read_sealed(&self.path(name), name).ok().flatten().map(|f| self.sealer.open(name.as_bytes(), &f)) {
                Some(Ok(_)) => {
                    failed = false;
                    break;
                }
                Some(Err(OpenError::Auth)) => failed = true,
                _ => {}
            }
        }
        if failed {
            return Err(wrong());
        }
        let now = now_ms();
        let check = self.sealer.seal(KEY_CHECK.as_bytes(), Header { created_at_ms: now, updated_at_ms: now }, b"")?;
        self.write_atomic(&check_path, &check)
    }

    /// Writes `bytes` to `path` under a temporary name, then renames it into place and flushes the directory.
    fn write_atomic(&self, path: &Path, bytes: &[u8]) -> Result<(), SecretError> {
        let base = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let temp = self.dir.join(format!(".{base}.{}.tmp", random_hex()?));
        let done = write_new(&temp, bytes).and_then(|()| fs::rename(&temp, path));
        if let Err(e) = done {
            let _ = fs::remove_file(&temp);
            return Err(SecretError::io("write", path)(e));
        }
        sync_dir(&self.dir)
    }
}

/// Makes `dir` (and its parents) if missing, and makes sure it is a real directory with mode 0700.
fn private_dir(dir: &Path) -> Result<(), SecretError> {
    if let Some(parent) = dir.parent() {
        fs::create_dir_all(parent).map_err(SecretError::io("create the directory", parent))?;
    }
    match DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(SecretError::io("create the directory", dir)(e)),
    }
    let meta = fs::symlink_metadata(dir).map_err(SecretError::io("inspect the directory", dir))?;
    if !meta.is_dir() {
        let e = io::Error::new(io::ErrorKind::InvalidInput, "it is not a directory; move it out of the way");
        return Err(SecretError::io("use", dir)(e));
    }
    if meta.permissions().mode() & 0o7777 != 0o700 {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(SecretError::io("make private", dir))?;
    }
    Ok(())
}

/// The names of the secrets with a sealed file in `dir`; other entries are ignored.
fn sealed_names(dir: &Path) -> Result<Vec<String>, SecretError> {
    let mut names = Vec::new();
    for entry in fs::read_dir(dir).map_err(SecretError::io("read the directory", dir))? {
        let entry = entry.map_err(SecretError::io("read the directory", dir))?;
        let file_name = entry.file_name();
        let Some(name) = file_name.to_str().and_then(|n| n.strip_suffix(SUFFIX)) else { continue };
        if check_name(name).is_ok() && entry.file_type().is_ok_and(|t| t.is_file()) {
            names.push(name.to_string());
        }
    }
    names.sort();
    Ok(names)
}

/// Best effort: temporary files left by a write that never finished.
fn remove_stale_temps(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let temp = name.to_str().is_some_and(|n| n.starts_with('.') && n.ends_with(".tmp"));
        let old = entry.metadata().ok().and_then(|m| m.modified().ok()).and_then(|t| t.elapsed().ok());
        if temp && old.is_some_and(|age| age > STALE_TEMP) {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Opens a sealed file without following a link; `None` if it does not exist.
fn open_sealed(path: &Path, name: &str) -> Result<Option<File>, SecretError> {
    let file = match OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            let (name, file) = (name.to_string(), path.to_path_buf());
            return Err(SecretError::BadFormat { name, file, reason: "is a symbolic link, not a sealed file" });
        }
        Err(e) => return Err(SecretError::io("open", path)(e)),
    };
    let meta = file.metadata().map_err(SecretError::io("inspect", path))?;
    if !meta.is_file() {
        let (name, file) = (name.to_string(), path.to_path_buf());
        return Err(SecretError::BadFormat { name, file, reason: "is not a regular file" });
    }
    Ok(Some(file))
}

/// A sealed file's bytes (bounded by the largest a sealed secret can be); `None` if it does not exist.
fn read_sealed(path: &Path, name: &str) -> Result<Option<Vec<u8>>, SecretError> {
    let Some(file) = open_sealed(path, name)? else { return Ok(None) };
    let limit = (OVERHEAD + MAX_VALUE_LEN) as u64;
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes).map_err(SecretError::io("read", path))?;
    if bytes.len() as u64 > limit {
        let (name, file) = (name.to_string(), path.to_path_buf());
        return Err(SecretError::BadFormat { name, file, reason: "is larger than any sealed secret can be" });
    }
    Ok(Some(bytes))
}

fn now_ms() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}
