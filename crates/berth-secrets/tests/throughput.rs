#![allow(clippy::unwrap_used)]
//! Redaction throughput on 256 MiB of log-like text with 3 secrets (each with its encoded forms). Run with
//! `cargo test --release -p berth-secrets --test throughput -- --ignored --nocapture`.

use std::time::Instant;

use berth_secrets::Redactor;

const SIZE: usize = 256 << 20;
const CHUNK: usize = 64 << 10;

/// Words of letters, digits and punctuation, with line breaks: the byte mix of build and test output.
fn log_text(size: usize) -> Vec<u8> {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789eeeettaaoinshr_-./:=";
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut out = Vec::with_capacity(size);
    let mut line = 0;
    while out.len() < size {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let word = 1 + (seed >> 60) as usize;
        for k in 0..word {
            out.push(ALPHABET[((seed >> (6 * k % 54)) % ALPHABET.len() as u64) as usize]);
        }
        line += word + 1;
        if line > 80 {
            out.push(b'\n');
            line = 0;
        } else {
            out.push(b' ');
        }
    }
    out.truncate(size);
    out
}

fn secrets() -> Vec<(String, Vec<u8>)> {
    vec![
        ("GITHUB_TOKEN".to_string(), b"ghp_R2d2C3poBB8k2So1oIG88hanSolo1977xx".to_vec()),
        ("DB_PASSWORD".to_string(), b"correct horse battery staple".to_vec()),
        ("AWS_SECRET_ACCESS_KEY".to_string(), b"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".to_vec()),
    ]
}

/// Streams `input` through a fresh copy of `redactor` in 64 KiB chunks, as the daemon does with exec output,
/// and hands each redacted chunk to `sink`. Returns GB/s.
fn measure(label: &str, redactor: &Redactor, input: &[u8], mut sink: impl FnMut(&[u8])) -> f64 {
    let mut r = redactor.clone();
    let start = Instant::now();
    for chunk in input.chunks(CHUNK) {
        sink(&r.push(chunk));
    }
    sink(&r.finish());
    let secs = start.elapsed().as_secs_f64();
    let rate = input.len() as f64 / secs / 1e9;
    println!("{label}: {} MiB in {secs:.3} s = {rate:.2} GB/s", input.len() >> 20);
    rate
}

#[test]
#[ignore = "a measurement: run it in release mode"]
fn redaction_throughput() {
    let redactor = Redactor::new(&secrets());
    let clean = log_text(SIZE);
    // Timed with the output dropped as it comes (the daemon writes each chunk out and frees it), then checked
    // in an untimed pass.
    let mut bytes = 0;
    let rate = measure("no secret in the text", &redactor, &clean, |out| bytes += out.len());
    assert_eq!(bytes, clean.len());
    let mut out = Vec::with_capacity(clean.len());
    measure("the same, keeping the output", &redactor, &clean, |chunk| out.extend_from_slice(chunk));
    assert!(out == clean);

    // The same text with a secret (raw or encoded) about once per MiB.
    let mut dirty = clean.clone();
    let forms: [&[u8]; 3] = [
        b"ghp_R2d2C3poBB8k2So1oIG88hanSolo1977xx",
        b"correct%20horse%20battery%20staple",
        b"Y29ycmVjdCBob3JzZSBiYXR0ZXJ5IHN0YXBsZQ==",
    ];
    let places: Vec<usize> = (1000..SIZE - 100).step_by(1 << 20).collect();
    for (i, &at) in places.iter().enumerate() {
        let form = forms[i % 3];
        dirty[at..at + form.len()].copy_from_slice(form);
    }
    let mut bytes = 0;
    measure("a secret once per MiB", &redactor, &dirty, |out| bytes += out.len());
    let mut shown = Vec::with_capacity(bytes);
    measure("the same, keeping the output", &redactor, &dirty, |out| shown.extend_from_slice(out));
    let redactions = shown.windows(10).filter(|w| *w == b"[redacted:").count();
    assert_eq!(redactions, places.len());

    // Twenty secrets: their 200-odd patterns take four Teddy passes.
    let many: Vec<(String, Vec<u8>)> =
        (0..20).map(|i| (format!("SECRET_{i}"), format!("value/{i}+{}", i * 7919).repeat(3).into_bytes())).collect();
    let mut bytes = 0;
    measure("twenty secrets, none in the text", &Redactor::new(&many), &clean, |out| bytes += out.len());
    assert_eq!(bytes, clean.len());

    // Worst cases, on 16 MiB: nothing but back-to-back secrets, and a run where a secret matches at every byte.
    let packed: Vec<u8> = forms.iter().copied().cycle().take(500_000).flatten().copied().take(16 << 20).collect();
    measure("secrets back to back (16 MiB)", &redactor, &packed, |_| {});
    let runs = Redactor::new(&[("RUN".to_string(), b"aaaaaaaa".to_vec())]);
    measure("a match at every byte (16 MiB)", &runs, &vec![b'a'; 16 << 20], |_| {});
    println!("target: 1 GB/s; measured {rate:.2} GB/s with 3 secrets, none in the text");
}
