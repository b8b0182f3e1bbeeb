//! Just enough of TLS to read the server name a client asks for in its ClientHello.
//!
//! A tunnel to an allowed name must not be used to reach another name on the same address (domain
//! fronting through a shared front end or CDN), so the proxy compares the ClientHello's server name with
//! the CONNECT host before forwarding a byte. The ClientHello may be split across several TLS records
//! and those across several reads; this parser works on whatever has arrived and says if it needs more.

/// What the bytes a client sent first turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hello {
    /// More bytes are needed to decide.
    Incomplete,
    /// Not a TLS handshake: the first byte is not a handshake record.
    NotTls,
    /// A complete ClientHello, with every `host_name` it carries (usually zero or one).
    ClientHello { server_names: Vec<Vec<u8>> },
    /// A handshake record that is not a well-formed ClientHello.
    Malformed(&'static str),
}

const HANDSHAKE: u8 = 22;
const CLIENT_HELLO: u8 = 1;
const SERVER_NAME: u16 = 0;
const HOST_NAME: u8 = 0;

/// Parses the start of a client's byte stream.
pub fn parse(buf: &[u8]) -> Hello {
    if buf.is_empty() {
        return Hello::Incomplete;
    }
    if buf[0] != HANDSHAKE {
        return Hello::NotTls;
    }
    // Gather handshake bytes from consecutive handshake records until the first message is complete.
    let mut handshake = Vec::new();
    let mut rest = buf;
    loop {
        if let Some(len) = message_len(&handshake)
            && handshake.len() >= len
        {
            return match client_hello(&handshake[..len]) {
                Ok(server_names) => Hello::ClientHello { server_names },
                Err(why) => Hello::Malformed(why),
            };
        }
        if rest.len() < 5 {
            return Hello::Incomplete;
        }
        if rest[0] != HANDSHAKE {
            return Hello::Malformed("a non-handshake record interrupts the ClientHello");
        }
        if rest[1] != 3 {
            return Hello::Malformed("the record does not carry a TLS version");
        }
        let len = usize::from(u16::from_be_bytes([rest[3], rest[4]]));
        if len == 0 || len > 16384 + 2048 {
            return Hello::Malformed("a handshake record has an impossible length");
        }
        if rest.len() < 5 + len {
            // Take what there is, so a first message shorter than the partial record can still be judged.
            handshake.extend_from_slice(&rest[5..]);
            if let Some(need) = message_len(&handshake)
                && handshake.len() >= need
            {
                continue;
            }
            return Hello::Incomplete;
        }
        handshake.extend_from_slice(&rest[5..5 + len]);
        rest = &rest[5 + len..];
    }
}

/// Length of the first handshake message (header included), once its header has arrived.
fn message_len(handshake: &[u8]) -> Option<usize> {
    let h = handshake.get(..4)?;
    Some(4 + (usize::from(h[1]) << 16 | usize::from(h[2]) << 8 | usize::from(h[3])))
}

/// A cursor over a byte slice that fails instead of panicking.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        if self.0.len() < n {
            return Err("the ClientHello is truncated");
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, &'static str> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, &'static str> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }
    fn vec8(&mut self) -> Result<&'a [u8], &'static str> {
        let n = self.u8()?;
        self.take(usize::from(n))
    }
    fn vec16(&mut self) -> Result<&'a [u8], &'static str> {
        let n = self.u16()?;
        self.take(usize::from(n))
    }
}

fn client_hello(message: &[u8]) -> Result<Vec<Vec<u8>>, &'static str> {
    let mut r = Reader(message);
    if r.u8()? != CLIENT_HELLO {
        return Err("the first handshake message is not a ClientHello");
    }
    r.take(3)?; // length, already used
    r.take(2 + 32)?; // legacy version, random
    r.vec8()?; // legacy session id
    r.vec16()?; // cipher suites
    r.vec8()?; // compression methods
    let mut names = Vec::new();
    if r.0.is_empty() {
        return Ok(names); // no extensions at all
    }
    let mut extensions = Reader(r.vec16()?);
    if !r.0.is_empty() {
        return Err("bytes follow the ClientHello's extensions");
    }
    while !extensions.0.is_empty() {
        let kind = extensions.u16()?;
        let data = extensions.vec16()?;
        if kind != SERVER_NAME {
            continue;
        }
        let mut list = Reader(data);
        let mut entries = Reader(list.vec16()?);
        if !list.0.is_empty() {
            return Err("bytes follow the server_name list");
        }
        while !entries.0.is_empty() {
            let name_type = entries.u8()?;
            let name = entries.vec16()?;
            if name_type == HOST_NAME {
                names.push(name.to_vec());
            }
        }
    }
    Ok(names)
}

/// Builds a minimal ClientHello carrying `server_name`, split into records of at most `record` bytes.
/// For tests: the bytes are well formed but no TLS library would finish a handshake with them.
#[doc(hidden)]
pub fn client_hello_for_tests(server_name: Option<&str>, record: usize) -> Vec<u8> {
    let mut ext = Vec::new();
    if let Some(name) = server_name {
        let n = name.as_bytes();
        let entry_len = 3 + n.len();
        ext.extend_from_slice(&SERVER_NAME.to_be_bytes());
        ext.extend_from_slice(&((entry_len + 2) as u16).to_be_bytes());
        ext.extend_from_slice(&(entry_len as u16).to_be_bytes());
        ext.push(HOST_NAME);
        ext.extend_from_slice(&(n.len() as u16).to_be_bytes());
        ext.extend_from_slice(n);
    }
    // supported_versions: TLS 1.3, so the hello looks like a modern one.
    ext.extend_from_slice(&[0, 43, 0, 3, 2, 3, 4]);
    let mut body = vec![3, 3];
    body.extend_from_slice(&[7; 32]);
    body.push(0);
    body.extend_from_slice(&[0, 2, 0x13, 0x01]);
    body.extend_from_slice(&[1, 0]);
    body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
    body.extend_from_slice(&ext);
    let mut message = vec![CLIENT_HELLO, 0, (body.len() >> 8) as u8, body.len() as u8];
    message.extend_from_slice(&body);
    let mut out = Vec::new();
    for chunk in message.chunks(record.max(1)) {
        out.extend_from_slice(&[HANDSHAKE, 3, 1]);
        out.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
        out.extend_from_slice(chunk);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_server_name() {
        let hello = client_hello_for_tests(Some("api.github.com"), 16384);
        assert_eq!(parse(&hello), Hello::ClientHello { server_names: vec![b"api.github.com".to_vec()] });
        let none = client_hello_for_tests(None, 16384);
        assert_eq!(parse(&none), Hello::ClientHello { server_names: vec![] });
    }

    #[test]
    fn records_and_reads_split_anywhere() {
        for record in [1, 3, 7, 40, 16384] {
            let hello = client_hello_for_tests(Some("example.com"), record);
            for cut in 0..hello.len() {
                assert_eq!(parse(&hello[..cut]), Hello::Incomplete, "record {record} cut {cut}");
            }
            assert_eq!(parse(&hello), Hello::ClientHello { server_names: vec![b"example.com".to_vec()] });
        }
    }

    #[test]
    fn not_tls_and_malformed() {
        assert_eq!(parse(b"SSH-2.0-OpenSSH\r\n"), Hello::NotTls);
        assert_eq!(parse(b"GET / HTTP/1.1\r\n"), Hello::NotTls);
        assert!(matches!(parse(&[22, 3, 1, 0, 4, 2, 0, 0, 0]), Hello::Malformed(_)));
        assert!(matches!(parse(&[22, 3, 1, 0, 0]), Hello::Malformed(_)));
        assert!(matches!(parse(&[22, 9, 1, 0, 4]), Hello::Malformed(_)));
        // A ClientHello whose inner lengths overrun the message.
        let mut hello = client_hello_for_tests(Some("example.com"), 16384);
        hello[9 + 2 + 32 + 1 + 1] = 0xff;
        assert!(matches!(parse(&hello), Hello::Malformed(_)));
        // Every truncation and corruption of a real hello parses without panicking.
        let hello = client_hello_for_tests(Some("example.com"), 20);
        for i in 0..hello.len() {
            let mut bad = hello.clone();
            bad[i] = bad[i].wrapping_add(0x55);
            let _ = parse(&bad);
        }
    }
}
