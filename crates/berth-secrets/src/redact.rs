//! Redaction of secret values from what berth shows and stores.

use std::collections::HashSet;
use std::fmt;

use crate::encode::{base64_forms, json_forms, percent_forms};
use crate::search::Searcher;

/// Values shorter than this are not redacted: a 1-3 byte value (`1`, `yes`, `dev`) occurs everywhere by chance,
/// so redacting it would mangle output while protecting nothing, since so short a value is guessable anyway.
pub const MIN_SECRET_LEN: usize = 4;

/// Base64 forms with fewer characters than this (`=` padding not counted) are not looked for: base64 characters
/// fill ordinary output (hashes, ids, blobs), and a short run of them would match by chance. Values of 7 bytes
/// or more get every base64 form.
pub const MIN_DERIVED_LEN: usize = 8;

/// Said in place of the output if the patterns could not be prepared, so that nothing unredacted gets out.
const WITHHELD: &[u8] = b"[output withheld: the secrets could not be prepared for redaction]\n";

/// Replaces secret values in text with `[redacted:NAME]`, on whole strings or on a stream of chunks.
///
/// Each value of [`MIN_SECRET_LEN`] bytes or more is looked for as it is and in these forms:
/// - base64, standard and URL-safe alphabets: the value encoded alone (padded or not), and the value inside a
///   larger encoded text at any of the three byte alignments (so `user:TOKEN` in an HTTP basic-auth header, or
///   `echo $TOKEN | base64` with its newline, is caught); the one character at either end of such an
///   embedded form may stay visible, as it mixes in bits of the neighbouring bytes (at most 4 bits of the
///   value each);
/// - URL percent-encoding of every byte outside `A-Z a-z 0-9 - . _ ~`, with upper- or lower-case hex, and the
///   same with `/` left alone or with `+` for space;
/// - the JSON string escaping of the value, when it has quotes, backslashes, slashes or control characters
///   (with `/` as it is and as `\/`), and with non-ASCII characters as `\uXXXX` escapes (lower-case hex).
///
/// Not caught, among others: base64 broken across lines (`base64` wraps at 76 characters), partial
/// percent-encoding (a space left alone, other characters kept), hex, upper-case `\u` escapes, other
/// quoting, compression, encryption, or any other transformation of a value, and a value printed a piece at a
/// time with other bytes between. Redaction is defence in depth, not a guarantee: a program that holds a
/// secret can always print it in a form no redactor recognises.
///
/// Where occurrences overlap, every byte of each is redacted; a run of overlapping occurrences becomes one
/// `[redacted:NAME]` naming the longest occurrence that starts first. When a stream is cut inside such a run,
/// the run may be reported as two redactions, but no byte of it is shown.
///
/// Streaming holds back at most the longest pattern's length minus one byte ([`Redactor::hold_limit`]), so a
/// value cut across chunks is still caught; [`Redactor::finish`] returns what is held. Clone a prepared
/// redactor to get one per stream (stdout and stderr each need their own).
///
/// The patterns are kept in memory, unencrypted and not wiped, for as long as the redactor lives.
#[derive(Clone)]
pub struct Redactor {
    searcher: Option<Searcher>,
    /// The searcher could not be built: output is withheld rather than shown unredacted.
    failed: bool,
    patterns: usize,
    /// Some form of a value contains a line break, so [`Redactor::release`] cannot cut at one.
    newline_in_form: bool,
    /// `[redacted:NAME]` for each secret; a pattern's label is an index into this.
    labels: Vec<Vec<u8>>,
    max_len: usize,
    /// Bytes received but not yet output (at most `max_len - 1` between calls).
    held: Vec<u8>,
    /// How many redactions `push` and `finish` have made.
    found: u64,
    /// How many bytes at the start of `held` were already output as part of a redaction.
    covered: usize,
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redactor")
            .field("patterns", &self.patterns)
            .field("max_len", &self.max_len)
            .field("held", &self.held.len())
            .finish_non_exhaustive()
    }
}

impl Redactor {
    /// A redactor for the given `(name, value)` pairs. Values shorter than [`MIN_SECRET_LEN`] (empty ones
    /// included) are ignored; when two secrets share a value or a form, the first one given names it.
    pub fn new(secrets: &[(String, Vec<u8>)]) -> Redactor {
        let labelled: Vec<(Vec<u8>, Vec<u8>)> =
            secrets.iter().map(|(name, value)| (format!("[redacted:{name}]").into_bytes(), value.clone())).collect();
        Redactor::with_replacements(&labelled)
    }

    /// A redactor that writes its own text in place of each value: `(replacement, value)` pairs, looked for
    /// exactly as [`Redactor::new`] does.
    pub fn with_replacements(secrets: &[(Vec<u8>, Vec<u8>)]) -> Redactor {
        let labels: Vec<Vec<u8>> = secrets.iter().map(|(label, _)| label.clone()).collect();
        let mut patterns: Vec<(Vec<u8>, usize)> = Vec::new();
        let mut seen = HashSet::new();
        let mut add = |pattern: Vec<u8>, label: usize| {
            if !pattern.is_empty() && seen.insert(pattern.clone()) {
                patterns.push((pattern, label));
            }
        };
        let usable = || secrets.iter().enumerate().filter(|(_, (_, value))| value.len() >= MIN_SECRET_LEN);
        // Values first, so that a value wins over another secret's encoded form that happens to equal it.
        for (i, (_, value)) in usable() {
            add(value.clone(), i);
        }
        for (i, (_, value)) in usable() {
            for form in
                base64_forms(value).into_iter().filter(|f| f.iter().filter(|&&b| b != b'=').count() >= MIN_DERIVED_LEN)
            {
                add(form, i);
            }
            for form in percent_forms(value).into_iter().chain(json_forms(value)) {
                add(form, i);
            }
        }
        let max_len = patterns.iter().map(|(p, _)| p.len()).max().unwrap_or(0);
        let searcher = if patterns.is_empty() { None } else { Searcher::new(&patterns) };
        let failed = !patterns.is_empty() && searcher.is_none();
        let newline_in_form = patterns.iter().any(|(p, _)| p.contains(&b'\n'));
        Redactor {
            searcher,
            failed,
            patterns: patterns.len(),
            newline_in_form,
            labels,
            max_len,
            held: Vec::new(),
            covered: 0,
            found: 0,
        }
    }

    /// True when there is nothing to redact (no secrets, or all too short): output passes through unchanged.
    pub fn is_empty(&self) -> bool {
        self.searcher.is_none() && !self.failed
    }

    /// The most bytes [`Redactor::push`] holds back between calls.
    pub fn hold_limit(&self) -> usize {
        self.max_len.saturating_sub(1)
    }

    /// How many redactions [`Redactor::push`] and [`Redactor::finish`] have made so far (a run of
    /// overlapping occurrences counts once; one cut by the end of a chunk may count twice).
    pub fn found(&self) -> u64 {
        self.found
    }

    /// How many bytes are held back now, to be returned by a later `push` or by `finish`.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Takes the next chunk of a stream and returns what can be shown of the stream so far, redacted. The
    /// last [`Redactor::hold_limit`] bytes or fewer are kept back in case a value continues in the next chunk.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        if self.failed {
            return Vec::new();
        }
        let Some(searcher) = &self.searcher else {
            return chunk.to_vec();
        };
        // The held bytes and the chunk in one buffer, which becomes the output itself when nothing before the
        // new hold-back needs redacting (nearly always), so that the chunk is copied only once.
        let mut buf = Vec::with_capacity(self.held.len() + chunk.len());
        buf.extend_from_slice(&self.held);
        buf.extend_from_slice(chunk);
        let keep_from = buf.len().saturating_sub(self.hold_limit());
        let clean = self.covered == 0 && searcher.matches(&buf).find(0).is_none_or(|(start, _, _)| start >= keep_from);
        self.held.clear();
        self.held.extend_from_slice(&buf[keep_from..]);
        if clean {
            buf.truncate(keep_from);
            return buf;
        }
        let mut out = Vec::with_capacity(keep_from + 64);
        let (done, found) = self.render(&buf, self.covered, keep_from, &mut out);
        self.covered = done - keep_from;
        self.found += found;
        out
    }

    /// For a stream that pauses (a server sending events as they happen): returns, redacted, what is held up
    /// to and including its last line break, keeping the rest. An event stream (SSE, JSON lines) ends each
    /// event with a line break, so a whole event reaches the reader while the server waits.
    ///
    /// Where the cut falls depends only on where the line breaks are, never on whether what is held looks
    /// like the start of a value: a reader that can make the server echo text of its choice and pause learns
    /// nothing from which bytes are released when (a cut that kept back "the longest tail that could begin a
    /// value" would tell it, one character at a time, how much of its guess was right). No form of a value
    /// can span a line break, so nothing released can be the beginning of a value still arriving; when a
    /// value itself contains a line break (a PEM key), nothing is released and the stream waits as with
    /// [`Redactor::push`] alone. Costs one scan of at most [`Redactor::hold_limit`] bytes.
    pub fn release(&mut self) -> Vec<u8> {
        if self.failed || self.held.is_empty() || self.newline_in_form {
            return Vec::new();
        }
        let Some(newline) = self.held.iter().rposition(|&b| b == b'\n') else {
            return Vec::new();
        };
        let keep = (newline + 1).max(self.covered);
        let mut out = Vec::new();
        let (done, found) = self.render(&self.held, self.covered, keep, &mut out);
        self.found += found;
        self.held.drain(..keep);
        self.covered = done - keep;
        out
    }

    /// Ends the stream: returns the held bytes, redacted. The redactor is then ready for a new stream.
    pub fn finish(&mut self) -> Vec<u8> {
        if self.failed {
            return WITHHELD.to_vec();
        }
        let mut out = Vec::with_capacity(self.held.len());
        let (_, found) = self.render(&self.held, self.covered, self.held.len(), &mut out);
        self.found += found;
        self.held.clear();
        self.covered = 0;
        out
    }

    /// Redacts a whole byte string (an exec log read back, a file), independently of any stream.
    pub fn redact_bytes(&self, input: &[u8]) -> Vec<u8> {
        if self.failed {
            return WITHHELD.to_vec();
        }
        let mut out = Vec::with_capacity(input.len());
        self.render(input, 0, input.len(), &mut out);
        out
    }

    /// Redacts a whole string (a journal entry, an error message). A value that is not UTF-8 can cut a
    /// character; what is left of it becomes U+FFFD.
    pub fn redact_str(&self, s: &str) -> String {
        let bytes = self.redact_bytes(s.as_bytes());
        String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }

    /// Appends to `out` the redacted text of `buf[done..keep_from]`, where bytes before `done` were already
    /// output. A redaction that starts before `keep_from` is output whole even if it reaches past it; one that
    /// starts at or after it is left for later, as a longer match may still grow there. Returns how far `buf`
    /// has been output, at least `keep_from`, and how many redactions were written.
    fn render(&self, buf: &[u8], mut done: usize, keep_from: usize, out: &mut Vec<u8>) -> (usize, u64) {
        let Some(searcher) = &self.searcher else {
            out.extend_from_slice(&buf[done.min(keep_from)..keep_from]);
            return (done.max(keep_from), 0);
        };
        let mut found = 0;
        // Leftmost-longest search from each match's start + 1 visits every start position that has a match,
        // with the longest match there, so the union of what it reports is the union of all occurrences. When no
        // value appears this is one SIMD search over the buffer.
        let mut matches = searcher.matches(buf);
        let mut at = 0;
        let mut run: Option<(usize, usize, usize)> = None;
        while let Some((m_start, m_end, label)) = matches.find(at) {
            at = m_start + 1;
            if m_end <= done {
                continue;
            }
            let start = m_start.max(done);
            if let Some(r) = &mut run
                && start < r.1
            {
                r.1 = r.1.max(m_end);
                continue;
            }
            if let Some(r) = run.take() {
                done = self.emit(buf, done, r, out);
                found += 1;
            }
            if start >= keep_from {
                break;
            }
            run = Some((start, m_end, label));
        }
        if let Some(r) = run {
            done = self.emit(buf, done, r, out);
            found += 1;
        }
        if done < keep_from {
            out.extend_from_slice(&buf[done..keep_from]);
            done = keep_from;
        }
        (done, found)
    }

    /// Outputs the text before a run, then the run's label; returns the run's end.
    fn emit(&self, buf: &[u8], done: usize, (start, end, label): (usize, usize, usize), out: &mut Vec<u8>) -> usize {
        out.extend_from_slice(&buf[done..start]);
        let label = self.labels.get(label);
        out.extend_from_slice(label.map_or(b"[redacted]".as_slice(), Vec::as_slice));
        end
    }
}
