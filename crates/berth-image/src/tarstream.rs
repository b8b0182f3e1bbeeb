//! A streaming tar reader built for hostile archives.
//!
//! The `tar` crate parses header fields well, so its `Header` does that here; the walk over the archive is
//! our own because the crate reads GNU long names and PAX blocks into memory without a bound (an 8 GiB PAX
//! header compresses to a few megabytes) and splits PAX records on newlines, which breaks binary xattr
//! values such as `security.capability`. This reader caps every extended header at [`MAX_META`] bytes and
//! parses PAX records by their length prefix.

use std::io::{self, Read, Seek, SeekFrom};

const BLOCK: u64 = 512;

/// The largest extended header (GNU long name or link, PAX block) read into memory. Paths are at most 4096
/// bytes and xattr values at most 64 KiB, so honest archives stay far below it.
pub(crate) const MAX_META: u64 = 1 << 20;

/// A byte source that can pass over data it does not need: a seek for files, a read for streams.
pub(crate) trait Skip: Read {
    fn skip(&mut self, n: u64) -> io::Result<()>;
}

/// A stream that can only be read forward (a decompressor, a pipe).
pub(crate) struct Stream<R>(pub R);

impl<R: Read> Read for Stream<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl<R: Read> Skip for Stream<R> {
    fn skip(&mut self, n: u64) -> io::Result<()> {
        let copied = io::copy(&mut (&mut self.0).take(n), &mut io::sink())?;
        if copied == n { Ok(()) } else { Err(truncated()) }
    }
}

/// A seekable source (an uncompressed tar file), so skipping a layer costs nothing.
pub(crate) struct Seekable<R>(pub R);

impl<R: Read> Read for Seekable<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl<R: Read + Seek> Skip for Seekable<R> {
    fn skip(&mut self, n: u64) -> io::Result<()> {
        let n = i64::try_from(n).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "entry size overflows"))?;
        self.0.seek(SeekFrom::Current(n)).map(|_| ())
    }
}

/// What an entry is, from its type flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    File,
    Dir,
    Symlink,
    HardLink,
    Char,
    Block,
    Fifo,
    /// A GNU sparse file (type `S` or PAX `GNU.sparse.*`): its data is not laid out as plain bytes.
    Sparse,
    Other(u8),
}

/// One archive member, with GNU and PAX extensions already applied.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub kind: Kind,
    pub path: Vec<u8>,
    pub link: Vec<u8>,
    pub size: u64,
    pub mode: u32,
    pub uid: u64,
    pub gid: u64,
    pub mtime: (i64, u32),
    /// Extended attributes from `SCHILY.xattr.*` records, name and value.
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    /// Offset of the entry's data from the start of the archive (for indexing a seekable archive).
    pub data_pos: u64,
}

/// Reads entries one after another; between `next_entry` calls, `Read` yields the current entry's data.
pub(crate) struct TarReader<R> {
    inner: R,
    pos: u64,
    remaining: u64,
    padding: u64,
    done: bool,
}

impl<R: Skip> TarReader<R> {
    pub(crate) fn new(inner: R) -> Self {
        TarReader { inner, pos: 0, remaining: 0, padding: 0, done: false }
    }

    /// The next entry, or `None` at the end-of-archive marker or at a clean end of input.
    pub(crate) fn next_entry(&mut self) -> io::Result<Option<Entry>> {
        if self.done {
            return Ok(None);
        }
        self.skip_rest()?;
        let mut long_name: Option<Vec<u8>> = None;
        let mut long_link: Option<Vec<u8>> = None;
        let mut pax: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut block = [0u8; BLOCK as usize];
        loop {
            if !self.read_block(&mut block)? || block.iter().all(|&b| b == 0) {
                self.done = true;
                if long_name.is_some() || long_link.is_some() || !pax.is_empty() {
                    return Err(invalid("the archive ends right after an extended header"));
                }
                return Ok(None);
            }
            check_sum(&block)?;
            let header = tar::Header::from_byte_slice(&block);
            let flag = block[156];
            let header_size = header.entry_size()?;
            match flag {
                b'L' => long_name = Some(trim_nul(self.read_meta(header_size)?)),
                b'K' => long_link = Some(trim_nul(self.read_meta(header_size)?)),
                b'x' => pax.extend(parse_pax(&self.read_meta(header_size)?)?),
                // Global PAX headers carry comments in practice; nothing in them is applied.
                b'g' => drop(self.read_meta(header_size)?),
                _ => return self.finish_entry(&block, long_name, long_link, pax).map(Some),
            }
        }
    }

    fn finish_entry(
        &mut self,
        block: &[u8; BLOCK as usize],
        long_name: Option<Vec<u8>>,
        long_link: Option<Vec<u8>>,
        pax: Vec<(Vec<u8>, Vec<u8>)>,
    ) -> io::Result<Entry> {
        let header = tar::Header::from_byte_slice(block);
        let flag = block[156];
        let mut path = long_name.unwrap_or_else(|| header.path_bytes().into_owned());
        let mut link =
            long_link.unwrap_or_else(|| header.link_name_bytes().map(|l| l.into_owned()).unwrap_or_default());
        let mut size = header.entry_size()?;
        let mut uid = header.uid()?;
        let mut gid = header.gid()?;
        let mut mtime = (i64::try_from(header.mtime()?).unwrap_or(i64::MAX), 0);
        let mut sparse = flag == b'S';
        let mut xattrs = Vec::new();
        for (key, value) in pax {
            let number = || -> io::Result<u64> {
                std::str::from_utf8(&value).ok().and_then(|v| v.parse().ok()).ok_or_else(|| invalid("bad PAX number"))
            };
            match key.as_slice() {
                _ if value.is_empty() => {}
                b"path" => path = value,
                b"linkpath" => link = value,
                b"size" => size = number()?,
                b"uid" => uid = number()?,
                b"gid" => gid = number()?,
                b"mtime" => mtime = parse_time(&value).ok_or_else(|| invalid("bad PAX mtime"))?,
                k if k.starts_with(b"GNU.sparse.") => sparse = true,
                k if k.starts_with(b"SCHILY.xattr.") => xattrs.push((k[13..].to_vec(), value)),
                _ => {}
            }
        }
        if sparse && flag == b'S' && block[482] != 0 {
            // Old GNU sparse maps continue in extension blocks, which sit before the data.
            let mut ext = [0u8; BLOCK as usize];
            loop {
                if !self.read_block(&mut ext)? {
                    return Err(truncated());
                }
                if ext[504] == 0 {
                    break;
                }
            }
        }
        let kind = match flag {
            _ if sparse => Kind::Sparse,
            b'0' | b'\0' | b'7' if path.ends_with(b"/") => Kind::Dir,
            b'0' | b'\0' | b'7' => Kind::File,
            b'1' => Kind::HardLink,
            b'2' => Kind::Symlink,
            b'3' => Kind::Char,
            b'4' => Kind::Block,
            b'5' => Kind::Dir,
            b'6' => Kind::Fifo,
            other => Kind::Other(other),
        };
        self.remaining = size;
        self.padding = (BLOCK - size % BLOCK) % BLOCK;
        Ok(Entry { kind, path, link, size, mode: header.mode()?, uid, gid, mtime, xattrs, data_pos: self.pos })
    }

    /// Passes over whatever is left of the current entry's data and its padding.
    fn skip_rest(&mut self) -> io::Result<()> {
        let n = self.remaining + self.padding;
        if n > 0 {
            self.inner.skip(n)?;
            self.pos += n;
        }
        self.remaining = 0;
        self.padding = 0;
        Ok(())
    }

    fn read_block(&mut self, block: &mut [u8; BLOCK as usize]) -> io::Result<bool> {
        let mut filled = 0;
        while filled < block.len() {
            match self.inner.read(&mut block[filled..]) {
                Ok(0) if filled == 0 => return Ok(false),
                Ok(0) => return Err(truncated()),
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.pos += BLOCK;
        Ok(true)
    }

    fn read_meta(&mut self, size: u64) -> io::Result<Vec<u8>> {
        if size > MAX_META {
            return Err(invalid(&format!("an extended header of {size} bytes (at most {MAX_META} are accepted)")));
        }
        let mut data = vec![0u8; usize::try_from(size).map_err(|_| invalid("extended header size"))?];
        self.inner.read_exact(&mut data).map_err(|_| truncated())?;
        self.pos += size;
        self.padding = (BLOCK - size % BLOCK) % BLOCK;
        self.skip_rest()?;
        Ok(data)
    }
}

impl<R: Skip> Read for TarReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.remaining == 0 || buf.is_empty() {
            return Ok(0);
        }
        let want = usize::try_from(self.remaining).unwrap_or(usize::MAX).min(buf.len());
        let n = self.inner.read(&mut buf[..want])?;
        if n == 0 {
            return Err(truncated());
        }
        self.pos += n as u64;
        self.remaining -= n as u64;
        Ok(n)
    }
}

fn check_sum(block: &[u8; BLOCK as usize]) -> io::Result<()> {
    let header = tar::Header::from_byte_slice(block);
    let stored = header.cksum().map_err(|_| invalid("a header with an unreadable checksum"))?;
    let unsigned: u32 =
        block.iter().enumerate().map(|(i, &b)| if (148..156).contains(&i) { 32 } else { u32::from(b) }).sum();
    let signed: i64 =
        block.iter().enumerate().map(|(i, &b)| if (148..156).contains(&i) { 32 } else { i64::from(b as i8) }).sum();
    if stored == unsigned || i64::from(stored) == signed {
        Ok(())
    } else {
        Err(invalid("a header checksum mismatch (not a tar archive, or a damaged one)"))
    }
}

/// Parses PAX records (`LEN KEY=VALUE\n`) by their length prefix, so values may hold any byte.
pub(crate) fn parse_pax(mut data: &[u8]) -> io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut out = Vec::new();
    while !data.is_empty() && !data.iter().all(|&b| b == 0) {
        let space = data.iter().position(|&b| b == b' ').ok_or_else(|| invalid("a PAX record without a length"))?;
        let len: usize = std::str::from_utf8(&data[..space])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| invalid("a PAX record with a bad length"))?;
        if len < space + 2 || len > data.len() || data[len - 1] != b'\n' {
            return Err(invalid("a PAX record whose length does not match its contents"));
        }
        let record = &data[space + 1..len - 1];
        let eq = record.iter().position(|&b| b == b'=').ok_or_else(|| invalid("a PAX record without '='"))?;
        out.push((record[..eq].to_vec(), record[eq + 1..].to_vec()));
        data = &data[len..];
    }
    Ok(out)
}

/// Parses a PAX time (`SECONDS[.FRACTION]`, possibly negative) into seconds and nanoseconds.
fn parse_time(value: &[u8]) -> Option<(i64, u32)> {
    let text = std::str::from_utf8(value).ok()?;
    let (secs, frac) = text.split_once('.').unwrap_or((text, ""));
    let secs: i64 = secs.parse().ok()?;
    let digits: String = frac.chars().take(9).collect();
    if !digits.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let nanos = if digits.is_empty() { 0 } else { format!("{digits:0<9}").parse().ok()? };
    Some((secs, nanos))
}

fn trim_nul(mut v: Vec<u8>) -> Vec<u8> {
    if let Some(end) = v.iter().position(|&b| b == 0) {
        v.truncate(end);
    }
    v
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("the archive has {what}"))
}

fn truncated() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "the archive ends in the middle of an entry")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pax_values_may_hold_newlines() -> io::Result<()> {
        let value = b"a\nb=c";
        let mut data = b"29 SCHILY.xattr.user.x=".to_vec();
        data.extend_from_slice(value);
        data.push(b'\n');
        let parsed = parse_pax(&data)?;
        assert_eq!(parsed, vec![(b"SCHILY.xattr.user.x".to_vec(), value.to_vec())]);
        Ok(())
    }

    #[test]
    fn pax_lengths_are_checked() {
        assert!(parse_pax(b"99 path=x\n").is_err());
        assert!(parse_pax(b"path=x\n").is_err());
    }

    #[test]
    fn times() {
        assert_eq!(parse_time(b"1700000000.5"), Some((1_700_000_000, 500_000_000)));
        assert_eq!(parse_time(b"-3"), Some((-3, 0)));
        assert_eq!(parse_time(b"x"), None);
    }
}
