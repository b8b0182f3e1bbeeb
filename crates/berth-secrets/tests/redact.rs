#![allow(clippy::unwrap_used)]

use berth_secrets::{MIN_SECRET_LEN, Redactor};

fn redactor(secrets: &[(&str, &str)]) -> Redactor {
    let list: Vec<(String, Vec<u8>)> = secrets.iter().map(|(n, v)| (n.to_string(), v.as_bytes().to_vec())).collect();
    Redactor::new(&list)
}

/// Streams `input` cut at `cuts` (sorted positions) and returns the whole output, checking the hold-back bound.
fn stream(r: &Redactor, input: &[u8], cuts: &[usize]) -> Vec<u8> {
    let mut r = r.clone();
    let mut out = Vec::new();
    let mut from = 0;
    for &cut in cuts.iter().chain([input.len()].iter()) {
        out.extend(r.push(&input[from..cut]));
        assert!(r.held() <= r.hold_limit(), "held {} > {}", r.held(), r.hold_limit());
        from = cut;
    }
    out.extend(r.finish());
    assert_eq!(r.held(), 0);
    out
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn base64(bytes: &[u8]) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[test]
fn whole_strings() {
    let r = redactor(&[("GITHUB_TOKEN", "ghp_0123456789abcdef"), ("DB_PASSWORD", "hunter2hunter2")]);
    assert!(!r.is_empty());
    assert_eq!(
        r.redact_str("token=ghp_0123456789abcdef pw=hunter2hunter2, again ghp_0123456789abcdef."),
        "token=[redacted:GITHUB_TOKEN] pw=[redacted:DB_PASSWORD], again [redacted:GITHUB_TOKEN]."
    );
    assert_eq!(r.redact_str("nothing to see"), "nothing to see");
    assert_eq!(r.redact_str(""), "");
    assert_eq!(r.redact_bytes(b"\xffhunter2hunter2\xfe"), b"\xff[redacted:DB_PASSWORD]\xfe");
    // Near misses stay.
    assert_eq!(r.redact_str("ghp_0123456789abcde hunter2"), "ghp_0123456789abcde hunter2");
}

#[test]
fn every_split_point() {
    let r = redactor(&[
        ("TOKEN", "tok_9f8e7d6c5b4a"),
        ("PASS", "correct horse battery"),
        ("SHORT_ONE", "abcd"),
        ("QUOTED", "a\"b\\c/d e"),
    ]);
    let sample = format!(
        "start tok_9f8e7d6c5b4a mid correct horse battery; ab abcd abcabcd {} {} {} json:\"a\\\"b\\\\c/d e\" \
         url a%22b%5Cc%2Fd%20e tok_9f8e7d6c5b4tok_9f8e7d6c5b4a end abcd",
        base64(b"tok_9f8e7d6c5b4a"),
        base64(b"user:correct horse battery"),
        base64(b"correct horse battery\n"),
    );
    let input = sample.as_bytes();
    let whole = r.redact_bytes(input);
    let shown = text(&whole);
    for secret in ["tok_9f8e7d6c5b4a", "correct horse", "abcd", "5Cc%2Fd", "b\\\\c"] {
        assert!(!shown.contains(secret), "{secret} in {shown}");
    }
    assert!(shown.starts_with("start [redacted:TOKEN] mid [redacted:PASS]; ab [redacted:SHORT_ONE] abc"), "{shown}");
    assert!(shown.ends_with("tok_9f8e7d6c5b4[redacted:TOKEN] end [redacted:SHORT_ONE]"), "{shown}");

    for cut in 0..=input.len() {
        assert_eq!(text(&stream(&r, input, &[cut])), shown, "cut at {cut}");
    }
    for a in (0..input.len()).step_by(7) {
        for b in a..=input.len() {
            assert_eq!(text(&stream(&r, input, &[a, b])), shown, "cuts at {a}, {b}");
        }
    }
    let every: Vec<usize> = (1..input.len()).collect();
    assert_eq!(text(&stream(&r, input, &every)), shown, "a byte at a time");
}

#[test]
fn random_streams_match_whole_strings() {
    // A fixed-seed generator: texts drawn from a small alphabet, so values and near misses occur often.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let secrets = [("A", "abab"), ("B", "babba"), ("C", "abbaab"), ("D", "aabbaabb")];
    let r = redactor(&secrets);
    for _ in 0..300 {
        let len = (next() % 120) as usize;
        let input: Vec<u8> = (0..len).map(|_| b"ab "[(next() % 3) as usize]).collect();
        let whole = r.redact_bytes(&input);
        let mut cuts: Vec<usize> = (0..next() % 6).map(|_| (next() as usize) % (len + 1)).collect();
        cuts.sort_unstable();
        let streamed = stream(&r, &input, &cuts);
        // Runs of overlapping values may be labelled differently when a cut falls inside them, but the text
        // left visible is the same, and no value survives.
        assert_eq!(strip_labels(&streamed), strip_labels(&whole), "{} / {cuts:?}", text(&input));
        for out in [&whole, &streamed] {
            let shown = text(out);
            for (_, value) in secrets {
                assert!(!shown.contains(value), "{value} in {shown:?} from {:?} {cuts:?}", text(&input));
            }
        }
    }
}

fn strip_labels(out: &[u8]) -> String {
    let mut s = text(out);
    while let Some(at) = s.find("[redacted:") {
        let end = s[at..].find(']').unwrap() + at + 1;
        s.replace_range(at..end, "#");
    }
    // Adjacent redactions collapse, as a cut inside a run of overlapping values can report it as two.
    while s.contains("##") {
        s = s.replace("##", "#");
    }
    s
}

#[test]
fn overlapping_and_prefix_secrets() {
    // A value that is a prefix of another: the longest occurrence wins where both match.
    let r = redactor(&[("SHORT", "token1234"), ("LONG", "token12345678")]);
    assert_eq!(r.redact_str("x token12345678 y"), "x [redacted:LONG] y");
    assert_eq!(r.redact_str("x token1234567 y"), "x [redacted:SHORT]567 y");
    for cut in 0..15 {
        assert_eq!(text(&stream(&r, b"x token12345678 y", &[cut])), "x [redacted:LONG] y");
    }
    // Overlapping occurrences of two values: every byte of both is hidden, under the first one's name.
    let r = redactor(&[("LEFT", "abcdef12"), ("RIGHT", "ef12ghij")]);
    assert_eq!(r.redact_str("<abcdef12ghij>"), "<[redacted:LEFT]>");
    assert_eq!(r.redact_str("<abcdef12 ef12ghij>"), "<[redacted:LEFT] [redacted:RIGHT]>");
    for cut in 0..=14 {
        let out = text(&stream(&r, b"<abcdef12ghij>", &[cut]));
        assert_eq!(strip_labels(out.as_bytes()), "<#>", "cut at {cut}: {out}");
    }
    // A value contained in another, and two secrets with the same value: the first given names it.
    let r = redactor(&[("INNER", "cdef"), ("OUTER", "abcdefgh"), ("TWIN", "cdef")]);
    assert_eq!(r.redact_str("abcdefgh cdef"), "[redacted:OUTER] [redacted:INNER]");
}

#[test]
fn encoded_forms() {
    let value = "s3cr3t/p@ss+word";
    let r = redactor(&[("PW", value)]);
    let url_safe = base64(value.as_bytes()).replace('+', "-").replace('/', "_");
    let cases = [
        base64(value.as_bytes()),
        base64(value.as_bytes()).trim_end_matches('=').to_string(),
        url_safe.clone(),
        // HTTP basic authentication: the value starts 1 byte ("bob:") or 2 bytes ("x:") into a 3-byte group.
        base64(format!("bob:{value}").as_bytes()),
        base64(format!("x:{value}").as_bytes()),
        base64(format!("alice:{value}").as_bytes()),
        base64(format!("{value}\n").as_bytes()),
        "s3cr3t%2Fp%40ss%2Bword".to_string(),
        "s3cr3t%2fp%40ss%2bword".to_string(),
    ];
    for case in &cases {
        let out = r.redact_str(case);
        assert!(out.contains("[redacted:PW]"), "{case} -> {out}");
        // What stays visible is at most a couple of characters at either end of an embedded form.
        // (Whole 3-byte groups of the user name encode on their own: "bob" is "Ym9i", "ali" is "YWxp".)
        let visible = out.replace("[redacted:PW]", "").replace("Ym9i", "").replace("YWxp", "").replace('=', "");
        assert!(visible.len() <= 4, "{case} -> {out}");
    }
    // JSON: a value with quotes and backslashes, as serialised into a journal entry.
    let r = redactor(&[("J", "say \"hi\" \\o/")]);
    let json = serde_json::json!({ "env": "say \"hi\" \\o/" }).to_string();
    assert_eq!(r.redact_str(&json), "{\"env\":\"[redacted:J]\"}");
}

#[test]
fn short_encodings_are_not_looked_for() {
    // A 4-byte value: its raw form is redacted, but its 5-6 character base64 forms would match by chance in
    // ordinary base64 output, so they are not looked for.
    let r = redactor(&[("PIN", "7391")]);
    assert_eq!(r.redact_str("pin 7391"), "pin [redacted:PIN]");
    assert_eq!(r.redact_str(&base64(b"7391")), base64(b"7391"));
}

#[test]
fn finish_flushes_the_held_tail() {
    let r = redactor(&[("TOKEN", "0123456789abcdef")]);
    assert_eq!(r.hold_limit(), base64(b"0123456789abcdef").len() - 1);
    let mut s = r.clone();
    let mut out = s.push(b"hello ");
    assert!(out.is_empty(), "a short start is held");
    assert_eq!(s.held(), 6);
    out.extend(s.push(b"0123456789"));
    out.extend(s.push(b"abcdef and the rest of the line"));
    assert!(s.held() > 0 && s.held() <= s.hold_limit());
    out.extend(s.finish());
    assert_eq!(text(&out), "hello [redacted:TOKEN] and the rest of the line");
    // A value cut off by the end of the stream is not a value.
    out = s.push(b"0123456789abcde");
    out.extend(s.finish());
    assert_eq!(text(&out), "0123456789abcde");
    assert!(s.finish().is_empty());

    // A long chunk is passed through at once, all but the hold-back.
    let big = vec![b'.'; 100_000];
    let first = s.push(&big);
    assert_eq!(first.len(), big.len() - s.hold_limit());
}

#[test]
fn short_and_empty_secrets_are_ignored() {
    let short = "x".repeat(MIN_SECRET_LEN - 1);
    let r = redactor(&[("EMPTY", ""), ("ONE", "1"), ("SHORT", &short)]);
    assert!(r.is_empty());
    assert_eq!(r.hold_limit(), 0);
    let input = format!("exit 1, {short}, nothing else");
    assert_eq!(r.redact_str(&input), input);
    let mut s = r.clone();
    assert_eq!(s.push(input.as_bytes()), input.as_bytes());
    assert!(s.finish().is_empty());

    // Mixed: only the long enough one counts.
    let r = redactor(&[("ONE", "1"), ("OK", "1111")]);
    assert!(!r.is_empty());
    // Overlapping occurrences in "11111" hide all five bytes.
    assert_eq!(r.redact_str("1 11 111 1111 11111"), "1 11 111 [redacted:OK] [redacted:OK]");
    assert!(Redactor::new(&[]).is_empty());
}

#[test]
fn many_secrets() {
    // Enough secrets that their patterns are searched in several groups.
    let owned: Vec<(String, String)> =
        (0..30).map(|i| (format!("S{i}"), format!("val+{i}/{}=x", 1000 + i * 37).repeat(2))).collect();
    let list: Vec<(&str, &str)> = owned.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    let r = redactor(&list);
    let mut sample = String::from("begin ");
    for (i, (_, value)) in owned.iter().enumerate().step_by(3) {
        match i % 4 {
            0 => sample.push_str(value),
            1 => sample.push_str(&base64(value.as_bytes())),
            2 => sample.push_str(&base64(format!("u:{value}").as_bytes())),
            _ => sample.push_str(&value.replace('+', "%2B").replace('/', "%2F").replace('=', "%3D")),
        }
        sample.push_str(" | ");
    }
    let whole = text(&r.redact_bytes(sample.as_bytes()));
    assert_eq!(whole.matches("[redacted:").count(), 10, "{whole}");
    for (i, (name, _)) in owned.iter().enumerate() {
        assert_eq!(whole.contains(&format!("[redacted:{name}]")), i % 3 == 0, "{name}: {whole}");
    }
    for cut in 0..=sample.len() {
        assert_eq!(text(&stream(&r, sample.as_bytes(), &[cut])), whole, "cut at {cut}");
    }
}

#[test]
fn release_lets_go_of_whole_lines_whatever_they_hold() {
    let r = redactor(&[("TOKEN", "0123456789abcdef")]);
    let mut s = r.clone();
    // A line that ended is released.
    assert!(s.push(b"event: tick\n").is_empty());
    assert_eq!(text(&s.release()), "event: tick\n");
    assert_eq!(s.held(), 0);
    // What follows the last line break stays, whether it could begin the value or not: the cut depends on
    // where the line breaks are, never on what the held bytes match, so it tells the reader nothing.
    for tail in ["data: 01234", "data: 0123x", "data: xxxxx"] {
        let mut s = r.clone();
        assert!(s.push(format!("a\n{tail}").as_bytes()).is_empty());
        assert_eq!(text(&s.release()), "a\n", "{tail}");
        assert_eq!(s.held(), tail.len(), "{tail}");
        assert!(s.release().is_empty(), "{tail}");
    }
    let mut s = r.clone();
    assert!(s.push(b"data: 01234").is_empty());
    assert!(s.release().is_empty());
    let mut out = s.push(b"56789abcdef done\n");
    out.extend(s.release());
    out.extend(s.finish());
    assert_eq!(text(&out), "data: [redacted:TOKEN] done\n");
    // A value with a line break in it could be cut at one: nothing is released early.
    let mut s = redactor(&[("KEY", "-----BEGIN KEY-----\nMIIEvQ")]);
    assert!(s.push(b"x\n-----BEGIN KEY-----\n").is_empty());
    assert!(s.release().is_empty());
    let mut out = s.push(b"MIIEvQ\n");
    out.extend(s.finish());
    assert_eq!(text(&out), "x\n[redacted:KEY]\n");
    // A value whole in what is held is redacted on release, and a run that continues is still caught.
    let mut s = r.clone();
    let mut out = s.push(b"x 0123456789abcdef");
    out.extend(s.release());
    out.extend(s.push(b"0123456789abcdef y"));
    out.extend(s.finish());
    assert!(!text(&out).contains("0123"), "{}", text(&out));
    // Released at every cut of a text with values in it, the stream shows no byte of a value.
    let input = b"a 0123456789abcdef\nb MDEyMzQ1Njc4OWFiY2RlZg== c\n0123456789abcdef0123456789abcdef d";
    for cut in 1..input.len() {
        let mut s = r.clone();
        let mut out = s.push(&input[..cut]);
        out.extend(s.release());
        out.extend(s.push(&input[cut..]));
        out.extend(s.release());
        out.extend(s.finish());
        let shown = text(&out);
        assert!(!shown.contains("0123") && !shown.contains("MDEyMzQ1Njc4"), "cut {cut}: {shown}");
        assert!(shown.starts_with("a [redacted:TOKEN]\nb [redacted:TOKEN]") && shown.ends_with(" d"), "{shown}");
    }
}
