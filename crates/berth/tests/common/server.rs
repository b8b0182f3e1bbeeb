//! A server inside a sandbox that holds state only in its memory, for the tests of hibernation and of forks
//! with processes: `MIB` MiB of random bytes and a count of the requests it answered, on 127.0.0.1:8000, with
//! a file it keeps open and appends each count to.

use std::time::{Duration, Instant};

use super::daemon::Daemon;
use super::text;

/// The server's program: its memory of `mib` MiB, its log at `log` (inside the sandbox).
pub fn program(mib: u32, log: &str) -> String {
    format!(
        r#"
import hashlib, os, socket
block = bytearray(os.urandom(1 << 20)) * {mib}
digest = hashlib.sha256(block).hexdigest()[:16]
log = open("{log}", "a")
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 8000)); s.listen(8)
n = 0
while True:
    c, _ = s.accept()
    n += 1
    log.write(f"{{n}}\n"); log.flush()
    c.sendall(f"{{n}} {{digest}} {{hashlib.sha256(block).hexdigest()[:16]}} {{os.getpid()}}\n".encode()); c.close()
"#
    )
}

const ASK: &str =
    "import socket; c = socket.create_connection(('127.0.0.1', 8000)); print(c.recv(200).decode().strip())";

/// Create a sandbox (`create`: the arguments of `berth create`), start the server in the background of an
/// exec that ends (a detached exec holds streams that lead to berth), and wait until it answers.
pub fn serving(d: &Daemon, create: &[&str], mib: u32, log: &str) -> String {
    let id = d.create(create);
    let (status, body) = d.files("PUT", &id, "files", "/workspace/server.py", "", program(mib, log).as_bytes());
    assert!((200..300).contains(&status), "{status} {}", String::from_utf8_lossy(&body));
    let out = d.berth(&["exec", &id, "--", "sh", "-c", "python3 /workspace/server.py >/dev/null 2>&1 &"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let deadline = Instant::now() + Duration::from_secs(20);
    while ask(d, &id).is_none() {
        assert!(Instant::now() < deadline, "the server did not come up");
        std::thread::sleep(Duration::from_millis(100));
    }
    id
}

/// One request to the server: (requests answered, digest at start, digest now, server pid).
pub fn ask(d: &Daemon, id: &str) -> Option<(u64, String, String, String)> {
    let out = d.berth(&["exec", id, "--", "python3", "-c", ASK]);
    if !out.status.success() {
        return None;
    }
    let line = text(&out.stdout);
    let mut f = line.split_whitespace();
    Some((f.next()?.parse().ok()?, f.next()?.into(), f.next()?.into(), f.next()?.into()))
}
