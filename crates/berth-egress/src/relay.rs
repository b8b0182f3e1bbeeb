//! Moving bytes: both ways through a tunnel, and a request body one message long.
//!
//! Counters are shared atomics updated as bytes move, so a connection that is closed part-way (by a
//! policy change, or an error) still reports what it carried.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

use std::io::Cursor;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::reflect::{Reflect, relay};

/// Bytes sent to the upstream (`up`) and to the client (`down`), and how many times a secret's value was
/// found in a response and replaced (`reflected`).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub up: AtomicU64,
    pub down: AtomicU64,
    pub reflected: AtomicU64,
}

const MIN_BUF: usize = 8 * 1024;
const MAX_BUF: usize = 256 * 1024;

/// Copies `from` to `to` until end of stream, then shuts `to`'s write side. The buffer starts small and
/// doubles while reads fill it, so idle connections stay cheap and bulk transfers make few system calls.
pub(crate) async fn pump<R, W>(from: &mut R, to: &mut W, counter: &AtomicU64) -> io::Result<()>
where
    R: AsyncRead + Unpin + ?Sized,
    W: AsyncWrite + Unpin + ?Sized,
{
    let mut buf = vec![0u8; MIN_BUF];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return to.shutdown().await;
        }
        to.write_all(&buf[..n]).await?;
        counter.fetch_add(n as u64, Ordering::Relaxed);
        if n == buf.len() && buf.len() < MAX_BUF {
            buf.resize(buf.len() * 2, 0);
        }
    }
}

/// Relays both ways until both sides have finished or either fails.
pub(crate) async fn tunnel(client: &mut TcpStream, upstream: &mut TcpStream, counters: &Counters) -> io::Result<()> {
    let (mut cr, mut cw) = client.split();
    let (mut ur, mut uw) = upstream.split();
    tokio::try_join!(pump(&mut cr, &mut uw, &counters.up), pump(&mut ur, &mut cw, &counters.down))?;
    Ok(())
}

/// One HTTP exchange: sends `head`, then the request body (starting with `early`, what the client sent
/// after its head), while relaying the response back until the server closes. The exchange is over when
/// the response is; a body the server did not wait for is dropped. With `reflect`, the response is read as
/// HTTP and the secrets' values are taken out of it (see [`crate::reflect`]); without, it is copied as it is.
pub(crate) async fn exchange<C, U>(
    client: C,
    early: Vec<u8>,
    upstream: U,
    head: &[u8],
    framing: Framing,
    reflect: Option<Reflect>,
    counters: &Counters,
) -> io::Result<()>
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let (client_read, mut client_write) = tokio::io::split(client);
    let (mut up_read, mut up_write) = tokio::io::split(upstream);
    up_write.write_all(head).await?;
    counters.up.fetch_add(head.len() as u64, Ordering::Relaxed);
    let mut body_source = BufReader::new(Cursor::new(early).chain(client_read));
    let body = forward_body(&mut body_source, &mut up_write, framing, &counters.up);
    let response = async {
        match reflect {
            Some(mut r) => relay(up_read, &mut client_write, &mut r, counters).await,
            None => pump(&mut up_read, &mut client_write, &counters.down).await,
        }
    };
    tokio::pin!(body, response);
    tokio::select! {
        biased;
        done = &mut response => done,
        sent = &mut body => match sent {
            Ok(()) => response.await,
            Err(e) => Err(e),
        },
    }
}

/// How a request's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    None,
    Length(u64),
    Chunked,
}

/// Forwards exactly one request body, so nothing the client sends after it (a second request) is passed on.
pub(crate) async fn forward_body<R, W>(
    from: &mut R,
    to: &mut W,
    framing: Framing,
    counter: &AtomicU64,
) -> io::Result<()>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    match framing {
        Framing::None => Ok(()),
        Framing::Length(n) => copy_exact(from, to, n, counter).await,
        Framing::Chunked => loop {
            let size_line = read_line(from).await?;
            send(to, &size_line, counter).await?;
            let size = chunk_size(&size_line)?;
            if size == 0 {
                // Trailer fields, then the empty line that ends the message.
                loop {
                    let trailer = read_line(from).await?;
                    send(to, &trailer, counter).await?;
                    if trailer == b"\r\n" || trailer == b"\n" {
                        return to.flush().await;
                    }
                }
            }
            copy_exact(from, to, size, counter).await?;
            let end = read_line(from).await?;
            if end != b"\r\n" && end != b"\n" {
                return Err(invalid("a chunk is longer than its declared size"));
            }
            send(to, &end, counter).await?;
        },
    }
}

async fn send<W: AsyncWrite + Unpin>(to: &mut W, bytes: &[u8], counter: &AtomicU64) -> io::Result<()> {
    to.write_all(bytes).await?;
    counter.fetch_add(bytes.len() as u64, Ordering::Relaxed);
    Ok(())
}

async fn copy_exact<R, W>(from: &mut R, to: &mut W, mut n: u64, counter: &AtomicU64) -> io::Result<()>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    while n > 0 {
        let chunk = from.fill_buf().await?;
        if chunk.is_empty() {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the client ended the body early"));
        }
        let take = chunk.len().min(usize::try_from(n).unwrap_or(usize::MAX));
        to.write_all(&chunk[..take]).await?;
        counter.fetch_add(take as u64, Ordering::Relaxed);
        from.consume(take);
        n -= take as u64;
    }
    to.flush().await
}

/// One line of chunked framing, capped so a client cannot make the proxy buffer without end.
async fn read_line<R: AsyncBufRead + Unpin>(from: &mut R) -> io::Result<Vec<u8>> {
    let mut line = Vec::new();
    let n = (&mut *from).take(4096).read_until(b'\n', &mut line).await?;
    if n == 0 || line.last() != Some(&b'\n') {
        return Err(invalid("a chunked body has a truncated or overlong line"));
    }
    Ok(line)
}

fn chunk_size(line: &[u8]) -> io::Result<u64> {
    let text = std::str::from_utf8(line).map_err(|_| invalid("a chunk size is not text"))?;
    let digits = text.split(';').next().unwrap_or("").trim_end_matches(['\r', '\n']).trim_matches([' ', '\t']);
    if digits.is_empty() || digits.len() > 15 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(invalid("a chunk size is not a hexadecimal number"));
    }
    u64::from_str_radix(digits, 16).map_err(|_| invalid("a chunk size is not a hexadecimal number"))
}

fn invalid(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.to_string())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    async fn body(input: &[u8], framing: Framing) -> io::Result<(Vec<u8>, Vec<u8>)> {
        let mut reader = tokio::io::BufReader::new(input);
        let mut out = Vec::new();
        let counter = AtomicU64::new(0);
        forward_body(&mut reader, &mut out, framing, &counter).await?;
        assert_eq!(counter.load(Ordering::Relaxed), out.len() as u64);
        let mut rest = Vec::new();
        reader.read_to_end(&mut rest).await?;
        Ok((out, rest))
    }

    #[tokio::test]
    async fn bodies_stop_where_the_message_ends() {
        let (out, rest) = body(b"helloGET http://other/", Framing::Length(5)).await.unwrap();
        assert_eq!((out.as_slice(), rest.as_slice()), (&b"hello"[..], &b"GET http://other/"[..]));
        let chunked = b"5;ext=1\r\nhello\r\n0\r\nTrailer: x\r\n\r\nGET http://other/";
        let (out, rest) = body(chunked, Framing::Chunked).await.unwrap();
        assert_eq!(out, &chunked[..chunked.len() - 17]);
        assert_eq!(rest, b"GET http://other/");
        let (out, _) = body(b"anything", Framing::None).await.unwrap();
        assert!(out.is_empty());
        assert!(body(b"abc", Framing::Length(5)).await.is_err());
        assert!(body(b"zz\r\n", Framing::Chunked).await.is_err());
        assert!(body(b"3\r\nhello\r\n0\r\n\r\n", Framing::Chunked).await.is_err());
        assert!(body(&[b'1'; 5000], Framing::Chunked).await.is_err());
    }
}
