//! The encoded forms of a value that the redactor looks for besides the value itself.

const STANDARD: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const URL_SAFE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Base64 forms of `value`, in both alphabets:
///
/// - the whole encoding of the value alone, with `=` padding (`base64 <<< ...` of exactly the value);
/// - for each of the three positions the value can take in a larger encoded text (it starts 0, 1 or 2 bytes
///   after a 3-byte boundary, as in `user:TOKEN` for HTTP basic authentication, or with a newline after it),
///   the run of characters whose 6 bits all come from the value. The one character at either end of that run
///   mixes in bits of the neighbouring bytes, so it differs from one text to the next and cannot be looked
///   for; each carries at most 4 bits of the value.
pub(crate) fn base64_forms(value: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for alphabet in [STANDARD, URL_SAFE] {
        out.push(padded(value, alphabet));
        for offset in 0..3 {
            out.push(core(value, offset, alphabet));
        }
    }
    out
}

/// Bit `i` (most significant first) of `value`, or 0 past its end.
fn bit(value: &[u8], i: usize) -> u8 {
    value.get(i / 8).map_or(0, |b| (b >> (7 - i % 8)) & 1)
}

fn sextet(value: &[u8], first_bit: usize, alphabet: &[u8; 64]) -> u8 {
    let index = (0..6).fold(0usize, |acc, k| (acc << 1) | usize::from(bit(value, first_bit + k)));
    alphabet[index]
}

/// The standard encoding of `value` on its own, padded with `=`.
fn padded(value: &[u8], alphabet: &[u8; 64]) -> Vec<u8> {
    let chars = (value.len() * 8).div_ceil(6);
    let mut out: Vec<u8> = (0..chars).map(|i| sextet(value, 6 * i, alphabet)).collect();
    while !out.len().is_multiple_of(4) {
        out.push(b'=');
    }
    out
}

/// The characters that depend only on `value` when it starts `offset` bytes after a 3-byte boundary.
fn core(value: &[u8], offset: usize, alphabet: &[u8; 64]) -> Vec<u8> {
    let start = 8 * offset;
    let end = start + 8 * value.len();
    // Character i covers bits [6i, 6i + 6) of the encoded text, which start at `start` in the value.
    (start.div_ceil(6)..end / 6).map(|i| sextet(value, 6 * i - start, alphabet)).collect()
}

/// URL percent-encodings of `value`: every byte but the unreserved `A-Z a-z 0-9 - . _ ~` as `%XX`, with upper-
/// or lower-case hex digits, and, in each case, the two common variants of that: `/` left alone (a path, or
/// Python's `quote`) and space as `+` (a form, or Python's `quote_plus`). Forms equal to the value are left out.
pub(crate) fn percent_forms(value: &[u8]) -> Vec<Vec<u8>> {
    let unreserved = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~');
    let mut forms: Vec<Vec<u8>> = Vec::new();
    for hex in [b"0123456789ABCDEF", b"0123456789abcdef"] {
        for variant in 0..3 {
            let mut out = Vec::with_capacity(value.len() * 3);
            for &b in value {
                match (b, variant) {
                    (b'/', 1) => out.push(b'/'),
                    (b' ', 2) => out.push(b'+'),
                    (b, _) if unreserved(b) => out.push(b),
                    (b, _) => out.extend_from_slice(&[b'%', hex[usize::from(b >> 4)], hex[usize::from(b & 15)]]),
                }
            }
            if out != value && !forms.contains(&out) {
                forms.push(out);
            }
        }
    }
    forms
}

/// The value as it appears inside a JSON string, when that differs from the value: with quotes, backslashes
/// and control characters escaped (journal entries and API answers are JSON), also with `/` escaped as `\/`,
/// and with every non-ASCII character as `\uXXXX` (lower-case hex, surrogate pairs beyond the BMP: Python's
/// `json.dumps` by default).
pub(crate) fn json_forms(value: &[u8]) -> Vec<Vec<u8>> {
    let Ok(text) = std::str::from_utf8(value) else { return Vec::new() };
    let Some(inner) =
        serde_json::to_string(text).ok().and_then(|q| Some(q.strip_prefix('"')?.strip_suffix('"')?.to_string()))
    else {
        return Vec::new();
    };
    let slashed = inner.replace('/', "\\/");
    let mut ascii = String::with_capacity(inner.len());
    for c in inner.chars() {
        if c.is_ascii() {
            ascii.push(c);
        } else {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                ascii.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    let mut forms: Vec<Vec<u8>> = Vec::new();
    for form in [inner, slashed, ascii] {
        if form.as_bytes() != value && !forms.iter().any(|f| f == form.as_bytes()) {
            forms.push(form.into_bytes());
        }
    }
    forms
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padded_matches_rfc4648() {
        let cases: [(&[u8], &[u8]); 7] = [
            (b"", b""),
            (b"f", b"Zg=="),
            (b"fo", b"Zm8="),
            (b"foo", b"Zm9v"),
            (b"foob", b"Zm9vYg=="),
            (b"fooba", b"Zm9vYmE="),
            (b"foobar", b"Zm9vYmFy"),
        ];
        for (plain, encoded) in cases {
            assert_eq!(padded(plain, STANDARD), encoded);
        }
        assert_eq!(padded(&[0xfb, 0xff], URL_SAFE), b"-_8=");
    }

    #[test]
    fn cores_are_inside_every_encoding() {
        let value = b"s3cr3t-value!";
        for offset in 0..3 {
            for tail in 0..3 {
                let mut text = vec![b'x'; offset];
                text.extend_from_slice(value);
                text.extend(std::iter::repeat_n(b'\n', tail));
                let encoded = padded(&text, STANDARD);
                let core = core(value, offset, STANDARD);
                // Of the characters carrying any bit of the value, all but one at either end are in the core.
                let (start, end) = (8 * offset, 8 * (offset + value.len()));
                let touching = end.div_ceil(6) - start / 6;
                assert!(touching - core.len() <= 2, "offset {offset}");
                assert!(encoded.windows(core.len()).any(|w| w == core.as_slice()), "offset {offset} tail {tail}");
            }
        }
    }

    #[test]
    fn percent_and_json() {
        assert!(percent_forms(b"abc-DEF_1.2~").is_empty());
        let forms: Vec<String> = percent_forms(b"a b/\xff").iter().map(|f| String::from_utf8_lossy(f).into()).collect();
        assert_eq!(forms, ["a%20b%2F%FF", "a%20b/%FF", "a+b%2F%FF", "a%20b%2f%ff", "a%20b/%ff", "a+b%2f%ff"]);
        assert!(json_forms(b"plain").is_empty());
        assert_eq!(json_forms(b"say \"hi\"\\\n"), vec![b"say \\\"hi\\\"\\\\\\n".to_vec()]);
        let forms: Vec<String> =
            json_forms("a/\u{e9}\u{1f600}".as_bytes()).iter().map(|f| String::from_utf8_lossy(f).into()).collect();
        assert_eq!(forms, ["a\\/\u{e9}\u{1f600}", "a/\\u00e9\\ud83d\\ude00"]);
    }
}
