//! `berth watch`: what changes under a directory of a sandbox, a line a change, as the API's watch streams it.

use std::io::Write;
use std::path::Path;

use berth_api::{WatchEvent, WatchKind};
use berth_client::Client;

use crate::cli::WatchArgs;

pub fn watch(socket: &Path, args: WatchArgs) -> anyhow::Result<i32> {
    let client = Client::connect(socket)?;
    let path = if args.path.starts_with('/') { args.path.clone() } else { format!("/workspace/{}", args.path) };
    let mut url =
        format!("/v1/sandboxes/{}/watch?path={}", berth_client::segment(&args.id), berth_client::segment(&path));
    if args.recursive {
        url.push_str("&recursive=true");
    }
    if let Some(user) = &args.user {
        url.push_str(&format!("&user={}", berth_client::segment(user)));
    }
    let mut stream = client.get_stream(&url)?;
    let mut stdout = std::io::stdout().lock();
    while let Some(line) = stream.next_line()? {
        if args.json {
            stdout.write_all(&line)?;
            stdout.write_all(b"\n")?;
            stdout.flush()?;
            continue;
        }
        let ev: WatchEvent = berth_client::decode(&line)?;
        match shown(&ev) {
            Shown::Line(text) => {
                writeln!(stdout, "{text}")?;
                stdout.flush()?;
            }
            Shown::Ready => eprintln!("watching {path}{}", if args.recursive { " and under it" } else { "" }),
            Shown::End(reason) => {
                eprintln!("berth: the watch ended: {reason}");
                return Ok(1);
            }
        }
    }
    Ok(0)
}

enum Shown {
    Ready,
    Line(String),
    End(String),
}

/// An event as a line: its kind, then its path (`old -> new` for a rename), a `/` after a directory.
fn shown(ev: &WatchEvent) -> Shown {
    let slash = if ev.dir { "/" } else { "" };
    let path = ev.path.as_deref().unwrap_or("");
    let kind = match ev.kind {
        WatchKind::Ready => return Shown::Ready,
        WatchKind::End => return Shown::End(ev.reason.clone().unwrap_or_default()),
        WatchKind::Overflow => return Shown::Line("overflow (changes were missed: look again)".into()),
        WatchKind::Rename => {
            return Shown::Line(format!("rename  {}{slash} -> {path}{slash}", ev.from.as_deref().unwrap_or("")));
        }
        WatchKind::Create => "create",
        WatchKind::Write => "write ",
        WatchKind::Remove => "remove",
        WatchKind::Chmod => "chmod ",
    };
    Shown::Line(format!("{kind}  {path}{slash}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_read_as_lines() {
        let ev = |kind, path: &str, dir| WatchEvent { path: Some(path.into()), dir, ..WatchEvent::of(kind) };
        let line = |e: &WatchEvent| match shown(e) {
            Shown::Line(l) => l,
            _ => panic!("not a line"),
        };
        assert_eq!(line(&ev(WatchKind::Create, "src", true)), "create  src/");
        assert_eq!(line(&ev(WatchKind::Write, "a.txt", false)), "write   a.txt");
        let renamed = WatchEvent { from: Some("a".into()), ..ev(WatchKind::Rename, "b", false) };
        assert_eq!(line(&renamed), "rename  a -> b");
        assert!(matches!(shown(&WatchEvent::end("gone")), Shown::End(r) if r == "gone"));
    }
}
