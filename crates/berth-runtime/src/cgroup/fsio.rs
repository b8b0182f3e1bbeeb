//! Plain file I/O on cgroupfs, plus the one seam that lets unit tests use a temp dir in its place.
//!
//! The kernel fills a new cgroup directory with control files by itself and lets `rmdir` remove a
//! directory full of them. A fake tree cannot, so [`Fs`] can carry a `populate` function, run after
//! each `mkdir`, and then removes directories with their contents. Real use has no such function.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use super::CgroupError;

/// Fills a freshly made directory the way cgroupfs would (tests only).
pub(crate) type Populate = fn(&Path) -> io::Result<()>;

/// How cgroup directories are made and removed: for real, or in a fake tree.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Fs {
    populate: Option<Populate>,
}

impl Fs {
    pub(crate) const REAL: Fs = Fs { populate: None };

    #[cfg(test)]
    pub(crate) fn fake(populate: Populate) -> Fs {
        Fs { populate: Some(populate) }
    }

    pub(crate) fn mkdir(&self, path: &Path) -> io::Result<()> {
        fs::create_dir(path)?;
        match self.populate {
            Some(populate) => populate(path),
            None => Ok(()),
        }
    }

    pub(crate) fn rmdir(&self, path: &Path) -> io::Result<()> {
        match self.populate {
            Some(_) => fs::remove_dir_all(path),
            None => fs::remove_dir(path),
        }
    }
}

pub(crate) fn read(path: &Path) -> Result<String, CgroupError> {
    fs::read_to_string(path).map_err(|source| read_error(path, source))
}

pub(crate) fn read_error(path: &Path, source: io::Error) -> CgroupError {
    CgroupError::Read { path: path.to_owned(), source }
}

/// A file holding one number.
pub(crate) fn read_u64(path: &Path) -> Result<u64, CgroupError> {
    let text = read(path)?;
    text.trim().parse().map_err(|_| invalid_data(path, &text))
}

/// Like [`read_u64`], but 0 when the file does not exist (an older kernel or a disabled feature).
pub(crate) fn read_u64_or_zero(path: &Path) -> Result<u64, CgroupError> {
    if path.exists() { read_u64(path) } else { Ok(0) }
}

/// The value of `key` in a flat-keyed file (`key value` per line), if the key is there.
pub(crate) fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(char::is_whitespace)?;
        if k == key { v.trim().parse().ok() } else { None }
    })
}

/// The value of `key` in the flat-keyed file at `path`; a missing key is an error.
pub(crate) fn read_keyed(path: &Path, key: &str) -> Result<u64, CgroupError> {
    let text = read(path)?;
    keyed(&text, key).ok_or_else(|| invalid_data(path, &format!("no `{key}` in {text:?}")))
}

pub(crate) fn invalid_data(path: &Path, what: &str) -> CgroupError {
    let source = io::Error::new(io::ErrorKind::InvalidData, format!("unexpected content: {}", what.trim()));
    read_error(path, source)
}

/// Write `value` to an existing control file in one `write`. Never creates the file: a missing
/// file means a missing controller, and should fail as such.
pub(crate) fn write(path: &Path, value: &str) -> io::Result<()> {
    let mut file = OpenOptions::new().write(true).truncate(true).open(path)?;
    file.write_all(value.as_bytes())
}

/// Write a limit, naming the file and value on failure.
pub(crate) fn set(dir: &Path, file: &str, value: &str) -> Result<(), CgroupError> {
    let path = dir.join(file);
    write(&path, value).map_err(|source| CgroupError::SetLimit { file: path, value: value.to_owned(), source })
}

/// Make a directory that may already exist (the shared `berth/` parent).
pub(crate) fn ensure_dir(fs: Fs, path: &Path) -> Result<(), CgroupError> {
    match fs.mkdir(path) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && path.is_dir() => Ok(()),
        other => other.map_err(|source| CgroupError::Create { path: path.to_owned(), source }),
    }
}

/// Subdirectories of `dir` (child cgroups); none if `dir` is gone.
pub(crate) fn subdirs(dir: &Path) -> Result<Vec<PathBuf>, CgroupError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(read_error(dir, source)),
    };
    let mut dirs = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| read_error(dir, source))?;
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            dirs.push(entry.path());
        }
    }
    dirs.sort();
    Ok(dirs)
}

/// Call `done` until it says yes or `timeout` has passed, sleeping a little more each time.
/// Returns whether it said yes.
pub(crate) fn wait_for(
    timeout: Duration,
    mut done: impl FnMut() -> Result<bool, CgroupError>,
) -> Result<bool, CgroupError> {
    let deadline = Instant::now() + timeout;
    // Most waits (a freeze of a few tasks) end within a few hundred microseconds, less than a sleep takes to
    // come back from: look back to back for a while first, then sleep, from 20 µs backing off to 50 ms.
    if spin_for(SPIN.min(timeout), &mut done)? {
        return Ok(true);
    }
    let mut pause = Duration::from_micros(20);
    loop {
        if done()? {
            return Ok(true);
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(false);
        }
        thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// How long [`wait_for`] looks without sleeping before it starts to sleep between looks.
const SPIN: Duration = Duration::from_micros(500);

/// Call `done` back to back, without sleeping, until it says so or `timeout` has passed; returns whether it
/// did. For waits that end within microseconds, where a sleep would take longer than the wait.
pub(crate) fn spin_for(
    timeout: Duration,
    mut done: impl FnMut() -> Result<bool, CgroupError>,
) -> Result<bool, CgroupError> {
    let deadline = Instant::now() + timeout;
    loop {
        if done()? {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        std::hint::spin_loop();
    }
}

pub(crate) fn timed_out(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, what.to_owned())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn keyed_files() {
        let text = "usage_usec 1234\nuser_usec 1000\nsystem_usec 234\n";
        assert_eq!(keyed(text, "usage_usec"), Some(1234));
        assert_eq!(keyed(text, "system_usec"), Some(234));
        assert_eq!(keyed(text, "usage"), None);
        assert_eq!(keyed("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", "oom_kill"), Some(3));
    }

    #[test]
    fn write_replaces_but_never_creates() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pids.max");
        assert_eq!(write(&file, "5").unwrap_err().kind(), io::ErrorKind::NotFound);
        fs::write(&file, "max\n").unwrap();
        write(&file, "5").unwrap();
        assert_eq!(read_u64(&file).unwrap(), 5);
        assert_eq!(read_u64_or_zero(&dir.path().join("absent")).unwrap(), 0);
    }

    #[test]
    fn wait_for_gives_up() {
        let mut calls = 0;
        let done = wait_for(Duration::from_millis(20), || {
            calls += 1;
            Ok(false)
        });
        assert!(!done.unwrap());
        assert!(calls > 1);
        assert!(wait_for(Duration::ZERO, || Ok(true)).unwrap());
        let mut calls = 0;
        let done = spin_for(Duration::from_millis(2), || {
            calls += 1;
            Ok(calls == 3)
        });
        assert!(done.unwrap());
        assert_eq!(calls, 3);
        assert!(!spin_for(Duration::ZERO, || Ok(false)).unwrap());
    }
}
