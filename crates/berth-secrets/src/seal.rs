//! The sealed file format, version 1:
//!
//! ```text
//! version (1 byte, = 1) | created_at_ms (u64 LE) | updated_at_ms (u64 LE) | nonce (12 bytes) | ciphertext | tag (16)
//! ```
//!
//! ChaCha20-Poly1305 with a fresh random 96-bit nonce per seal (random nonces are safe far beyond the number of
//! times a vault is written). The associated data is the 17-byte header followed by the secret's name: the
//! timestamps travel in the clear so that listing needs no decryption, yet changing them, or renaming a file to
//! another secret's name, makes it fail to open.

use chacha20poly1305::aead::{AeadInOut, KeyInit};
use chacha20poly1305::{ChaCha20Poly1305, Nonce};
use zeroize::Zeroizing;

use crate::SecretError;

pub(crate) const VERSION: u8 = 1;
pub(crate) const HEADER_LEN: usize = 17;
pub(crate) const NONCE_LEN: usize = 12;
pub(crate) const TAG_LEN: usize = 16;
/// Bytes a sealed file has beyond its value.
pub(crate) const OVERHEAD: usize = HEADER_LEN + NONCE_LEN + TAG_LEN;
pub(crate) const KEY_LEN: usize = 32;

/// The clear part of a sealed file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
}

impl Header {
    fn encode(self) -> [u8; HEADER_LEN] {
        let mut out = [0; HEADER_LEN];
        out[0] = VERSION;
        out[1..9].copy_from_slice(&self.created_at_ms.to_le_bytes());
        out[9..17].copy_from_slice(&self.updated_at_ms.to_le_bytes());
        out
    }

    /// Reads the header from the start of a sealed file; the error says what is wrong with it.
    pub(crate) fn parse(bytes: &[u8]) -> Result<Header, &'static str> {
        let Some(head) = bytes.get(..HEADER_LEN) else {
            return Err("is too short to be a sealed secret");
        };
        if head[0] != VERSION {
            return Err("has a format version this berth does not know (was it written by a newer one?)");
        }
        let word = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&head[at..at + 8]);
            u64::from_le_bytes(b)
        };
        Ok(Header { created_at_ms: word(1), updated_at_ms: word(9) })
    }
}

/// Why a sealed file did not open.
#[derive(Debug)]
pub(crate) enum OpenError {
    /// Not a sealed file at all; says why.
    Format(&'static str),
    /// Authentication failed: changed, renamed, or another key.
    Auth,
}

/// The cipher under the vault's key; the key is wiped from memory when this is dropped.
pub(crate) struct Sealer {
    cipher: ChaCha20Poly1305,
}

impl Sealer {
    pub(crate) fn new(key: &[u8; KEY_LEN]) -> Sealer {
        Sealer { cipher: ChaCha20Poly1305::new(key.into()) }
    }

    /// Seals `value` for the item called `label`, returning the whole file's bytes.
    pub(crate) fn seal(&self, label: &[u8], header: Header, value: &[u8]) -> Result<Vec<u8>, SecretError> {
        let head = header.encode();
        let mut nonce = [0u8; NONCE_LEN];
        random(&mut nonce)?;
        let mut file = Vec::with_capacity(OVERHEAD + value.len());
        file.extend_from_slice(&head);
        file.extend_from_slice(&nonce);
        // Encrypted in place inside the file buffer, reserved in full above so that no copy of the plaintext is
        // left behind by a reallocation.
        file.extend_from_slice(value);
        let aad = associated_data(&head, label);
        let name = || String::from_utf8_lossy(label).into_owned();
        let tag = self
            .cipher
            .encrypt_inout_detached(&Nonce::from(nonce), &aad, (&mut file[HEADER_LEN + NONCE_LEN..]).into())
            .map_err(|_| SecretError::Seal { name: name() })?;
        file.extend_from_slice(&tag);
        Ok(file)
    }

    /// Opens a sealed file of the item called `label`.
    pub(crate) fn open(&self, label: &[u8], file: &[u8]) -> Result<(Header, Zeroizing<Vec<u8>>), OpenError> {
        let header = Header::parse(file).map_err(OpenError::Format)?;
        if file.len() < OVERHEAD {
            return Err(OpenError::Format("is too short to be a sealed secret"));
        }
        let (head, rest) = file.split_at(HEADER_LEN);
        let (nonce, sealed) = rest.split_at(NONCE_LEN);
        let (body, tag) = sealed.split_at(sealed.len() - TAG_LEN);
        let mut nonce_bytes = [0u8; NONCE_LEN];
        nonce_bytes.copy_from_slice(nonce);
        let mut tag_bytes = [0u8; TAG_LEN];
        tag_bytes.copy_from_slice(tag);
        let aad = associated_data(head, label);
        let mut value = Zeroizing::new(body.to_vec());
        self.cipher
            .decrypt_inout_detached(&Nonce::from(nonce_bytes), &aad, value.as_mut_slice().into(), &tag_bytes.into())
            .map_err(|_| OpenError::Auth)?;
        Ok((header, value))
    }
}

fn associated_data(head: &[u8], label: &[u8]) -> Vec<u8> {
    let mut aad = Vec::with_capacity(head.len() + label.len());
    aad.extend_from_slice(head);
    aad.extend_from_slice(label);
    aad
}

/// Fills `buf` from the operating system's random source.
pub(crate) fn random(buf: &mut [u8]) -> Result<(), SecretError> {
    getrandom::fill(buf).map_err(|e| SecretError::Random(e.to_string()))
}
