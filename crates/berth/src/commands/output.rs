//! Shared by the verbs that talk to the daemon: tables, ages, and printing the API's JSON.

use std::io::{self, Write};
use std::time::{SystemTime, UNIX_EPOCH};

/// Print the API's JSON as it came, on one line of its own.
pub fn print_raw(body: &[u8]) -> anyhow::Result<()> {
    let mut out = io::stdout().lock();
    out.write_all(body)?;
    if body.last() != Some(&b'\n') {
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}

/// Print rows under a header, each column as wide as its widest cell; the last column is not padded.
pub fn print_table(header: &[&str], rows: &[Vec<String>]) -> anyhow::Result<()> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = io::stdout().lock();
    let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                let pad = widths.get(i).copied().unwrap_or(0).saturating_sub(cell.chars().count());
                line.push_str(cell);
                line.push_str(&" ".repeat(pad + 3));
            }
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    out.flush()?;
    Ok(())
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// How long ago `then_ms` was, briefly: `42s`, `5m`, `3h`, `2d`.
pub fn age(then_ms: u64, now_ms: u64) -> String {
    let s = now_ms.saturating_sub(then_ms) / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

/// A command line as a shell would read it back: words with spaces or quotes are single-quoted.
pub fn shell_words(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            let plain = !a.is_empty() && a.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%^".contains(c));
            if plain { a.clone() } else { format!("'{}'", a.replace('\'', r"'\''")) }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A duration in seconds, as the API takes it.
pub fn seconds(d: std::time::Duration) -> f64 {
    d.as_secs_f64()
}

/// `DELETE {collection}/{name}` for each name, saying what was removed and what could not be; exit code 1
/// if anything could not.
pub fn remove_each(client: &berth_client::Client, collection: &str, names: &[String]) -> i32 {
    let mut failed = false;
    for n in names {
        match client.delete(&format!("{collection}/{}", berth_client::segment(n))) {
            Ok(_) => println!("removed {n}"),
            Err(e) => {
                eprintln!("berth: {n}: {e}");
                failed = true;
            }
        }
    }
    i32::from(failed)
}

/// Accept a list either as a bare JSON array or wrapped in an object under `key`.
pub fn list<T: serde::de::DeserializeOwned>(body: &[u8], key: &str) -> anyhow::Result<Vec<T>> {
    let value: serde_json::Value = berth_client::decode(body)?;
    let items = match value {
        serde_json::Value::Object(mut o) => o.remove(key).unwrap_or(serde_json::Value::Null),
        v => v,
    };
    Ok(serde_json::from_value(items)
        .map_err(|e| berth_client::ClientError::Protocol(format!("unexpected JSON ({e})")))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages() {
        assert_eq!(age(1_000, 43_500), "42s");
        assert_eq!(age(0, 5 * 60_000 + 1), "5m");
        assert_eq!(age(0, 3 * 3_600_000), "3h");
        assert_eq!(age(0, 2 * 86_400_000), "2d");
        assert_eq!(age(10_000, 0), "0s");
    }

    #[test]
    fn words() {
        let argv = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(shell_words(&argv(&["ls", "-la", "/tmp"])), "ls -la /tmp");
        assert_eq!(shell_words(&argv(&["sh", "-c", "echo it's"])), r"sh -c 'echo it'\''s'");
        assert_eq!(shell_words(&argv(&[""])), "''");
    }
}
