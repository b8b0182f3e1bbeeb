//! SHA-1, for the git blob ids on a patch's `index` lines.
//!
//! `patch -p1` reads those lines to tell a created or deleted file (an all-zero id) and a symbolic link (mode
//! 120000) from an ordinary edit, so a git-style patch without them does not apply there. The ids are only
//! labels: nothing here relies on SHA-1 resisting collisions.

/// A streaming SHA-1 hasher.
pub(crate) struct Sha1 {
    state: [u32; 5],
    block: [u8; 64],
    filled: usize,
    total: u64,
}

impl Sha1 {
    pub(crate) fn new() -> Self {
        Self {
            state: [0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476, 0xc3d2_e1f0],
            block: [0; 64],
            filled: 0,
            total: 0,
        }
    }

    /// The hasher for a git blob of `size` bytes: the contents follow.
    pub(crate) fn blob(size: u64) -> Self {
        let mut h = Self::new();
        h.update(format!("blob {size}\0").as_bytes());
        h
    }

    pub(crate) fn update(&mut self, mut data: &[u8]) {
        self.total = self.total.wrapping_add(data.len() as u64);
        while !data.is_empty() {
            let take = (64 - self.filled).min(data.len());
            self.block[self.filled..self.filled + take].copy_from_slice(&data[..take]);
            self.filled += take;
            data = &data[take..];
            if self.filled == 64 {
                let block = self.block;
                self.compress(&block);
                self.filled = 0;
            }
        }
    }

    /// The digest, as 40 lowercase hex digits.
    pub(crate) fn hex(mut self) -> String {
        let bits = self.total.wrapping_mul(8);
        self.update(&[0x80]);
        while self.filled != 56 {
            self.update(&[0]);
        }
        self.update(&bits.to_be_bytes());
        self.state.iter().map(|w| format!("{w:08x}")).collect()
    }

    fn compress(&mut self, block: &[u8; 64]) {
        let mut w = [0u32; 80];
        for (i, word) in block.chunks_exact(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = self.state;
        for (i, wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5a82_7999),
                20..=39 => (b ^ c ^ d, 0x6ed9_eba1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8f1b_bcdc),
                _ => (b ^ c ^ d, 0xca62_c1d6),
            };
            let t = a.rotate_left(5).wrapping_add(f).wrapping_add(e).wrapping_add(k).wrapping_add(*wi);
            (e, d, c, b, a) = (d, c, b.rotate_left(30), a, t);
        }
        for (s, v) in self.state.iter_mut().zip([a, b, c, d, e]) {
            *s = s.wrapping_add(v);
        }
    }
}

/// The git blob id of `data`.
pub(crate) fn blob_id(data: &[u8]) -> String {
    let mut h = Sha1::blob(data.len() as u64);
    h.update(data);
    h.hex()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_digests() {
        assert_eq!(Sha1::new().hex(), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
        let mut abc = Sha1::new();
        abc.update(b"abc");
        assert_eq!(abc.hex(), "a9993e364706816aba3e25717850c26c9cd0d89d");
        let mut long = Sha1::new();
        for _ in 0..1000 {
            long.update(&[b'a'; 1000]);
        }
        assert_eq!(long.hex(), "34aa973cd4c4daa4f61eeb2bdbad27316534016f");
        // What `git hash-object` prints for an empty file and for "hello\n".
        assert_eq!(blob_id(b""), "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
        assert_eq!(blob_id(b"hello\n"), "ce013625030ba8dba906f756967f9e9ca394464a");
    }
}
