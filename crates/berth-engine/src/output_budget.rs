//! The output budget of one exec: stream the head live, keep a bounded tail, drop (and count) the middle.
//!
//! Failures are at the end of a log, so the tail is what an agent most needs; the head says what started.
//! Within the budget nothing is lost: output between the head and the budget is held back and sent when the
//! exec ends, in order.

use std::collections::VecDeque;

use berth_api::Stream;

#[derive(Debug)]
pub struct OutputBudget {
    head_left: u64,
    tail_cap: u64,
    tail: VecDeque<(Stream, Vec<u8>)>,
    tail_len: u64,
    dropped: u64,
}

impl OutputBudget {
    /// A budget of `max` bytes: a quarter (at most 16 KiB) is kept for the tail, the rest streams live.
    pub fn new(max: u64) -> OutputBudget {
        OutputBudget::with_tail(max, 16 * 1024)
    }

    /// A budget of `max` bytes whose tail (held in memory until the end) is a quarter, at most `tail_max`.
    pub fn with_tail(max: u64, tail_max: u64) -> OutputBudget {
        let tail_cap = (max / 4).min(tail_max);
        OutputBudget { head_left: max - tail_cap, tail_cap, tail: VecDeque::new(), tail_len: 0, dropped: 0 }
    }

    /// Bytes kept at the head and at the tail.
    pub fn shape(&self) -> (u64, u64) {
        (self.head_left, self.tail_cap)
    }

    /// Account for `data`; returns what may be sent now.
    pub fn push(&mut self, stream: Stream, data: &[u8]) -> Option<Vec<u8>> {
        let live = (data.len() as u64).min(self.head_left) as usize;
        self.head_left -= live as u64;
        let mut rest = &data[live..];
        if rest.len() as u64 >= self.tail_cap {
            // This chunk alone fills the tail: everything held so far, and its own front, are dropped
            // without being copied.
            let cut = rest.len() - self.tail_cap as usize;
            self.dropped += self.tail_len + cut as u64;
            self.tail.clear();
            self.tail_len = 0;
            rest = &rest[cut..];
        }
        if !rest.is_empty() {
            self.tail.push_back((stream, rest.to_vec()));
            self.tail_len += rest.len() as u64;
            while self.tail_len > self.tail_cap {
                let excess = self.tail_len - self.tail_cap;
                let Some((_, front)) = self.tail.front_mut() else { break };
                if front.len() as u64 <= excess {
                    self.tail_len -= front.len() as u64;
                    self.dropped += front.len() as u64;
                    self.tail.pop_front();
                } else {
                    front.drain(..excess as usize);
                    self.tail_len -= excess;
                    self.dropped += excess;
                }
            }
        }
        (live > 0).then(|| data[..live].to_vec())
    }

    /// Bytes dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The budget's state as bytes, taken up again by [`OutputBudget::load`] (an exec that outlives a hibernation,
    /// or the daemon that ran it).
    pub fn save(&self, out: &mut Vec<u8>) {
        for n in [self.head_left, self.tail_cap, self.dropped, self.tail.len() as u64] {
            out.extend(n.to_le_bytes());
        }
        for (stream, chunk) in &self.tail {
            out.push(u8::from(*stream == Stream::Stderr));
            out.extend((chunk.len() as u64).to_le_bytes());
            out.extend(chunk);
        }
    }

    /// A budget saved by [`OutputBudget::save`], read from the front of `input` (which is advanced past it).
    pub fn load(input: &mut &[u8]) -> Option<OutputBudget> {
        let [head_left, tail_cap, dropped, chunks] =
            [take_u64(input)?, take_u64(input)?, take_u64(input)?, take_u64(input)?];
        let mut b = OutputBudget { head_left, tail_cap, tail: VecDeque::new(), tail_len: 0, dropped };
        for _ in 0..chunks {
            let (&kind, rest) = input.split_first()?;
            *input = rest;
            let len = usize::try_from(take_u64(input)?).ok().filter(|l| *l <= input.len())?;
            let stream = if kind == 1 { Stream::Stderr } else { Stream::Stdout };
            b.tail.push_back((stream, input[..len].to_vec()));
            b.tail_len += len as u64;
            *input = &input[len..];
        }
        Some(b)
    }

    /// At the end: what was held back (the tail), in order.
    pub fn finish(&mut self) -> Vec<(Stream, Vec<u8>)> {
        self.tail_len = 0;
        self.tail.drain(..).collect()
    }
}

/// A little-endian number read from the front of `input`.
pub(crate) fn take_u64(input: &mut &[u8]) -> Option<u64> {
    let (n, rest) = input.split_first_chunk::<8>()?;
    *input = rest;
    Some(u64::from_le_bytes(*n))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_budget_goes_on_as_it_would_have() {
        let (mut a, mut b) = (OutputBudget::new(200), OutputBudget::new(200));
        for i in 0..10u8 {
            a.push(Stream::Stdout, &[i; 17]);
            b.push(if i % 2 == 0 { Stream::Stdout } else { Stream::Stderr }, &[i; 17]);
        }
        let mut bytes = Vec::new();
        b.save(&mut bytes);
        a.save(&mut bytes);
        let mut input = &bytes[..];
        let mut b2 = OutputBudget::load(&mut input).unwrap();
        let mut a2 = OutputBudget::load(&mut input).unwrap();
        assert!(input.is_empty());
        for (x, y) in [(&mut a, &mut a2), (&mut b, &mut b2)] {
            assert_eq!(x.push(Stream::Stdout, &[9; 30]), y.push(Stream::Stdout, &[9; 30]));
            assert_eq!((x.dropped(), x.finish()), (y.dropped(), y.finish()));
        }
        assert!(OutputBudget::load(&mut &bytes[..20]).is_none(), "a cut-off state is no budget");
    }

    #[test]
    fn within_budget_nothing_is_lost() {
        let mut b = OutputBudget::new(100);
        let mut sent = b.push(Stream::Stdout, &[b'a'; 70]).unwrap();
        assert_eq!(sent.len(), 70);
        let second = b.push(Stream::Stderr, &[b'b'; 10]).unwrap();
        assert_eq!(second.len(), 5);
        sent.extend(second);
        for (_, chunk) in b.finish() {
            sent.extend(chunk);
        }
        assert_eq!(sent.len(), 80);
        assert_eq!(b.dropped(), 0);
    }

    #[test]
    fn past_the_budget_the_middle_goes_and_the_tail_stays() {
        let mut b = OutputBudget::new(1000);
        let head = b.push(Stream::Stdout, &[b'h'; 750]).unwrap();
        assert_eq!(head.len(), 750);
        for i in 0..100u8 {
            assert!(b.push(Stream::Stdout, &[i; 100]).is_none());
        }
        assert_eq!(b.dropped(), 100 * 100 - 250);
        let tail: Vec<u8> = b.finish().into_iter().flat_map(|(_, c)| c).collect();
        assert_eq!(tail.len(), 250);
        assert!(tail.ends_with(&[99; 100]), "the very end must survive");
    }

    #[test]
    fn streams_keep_their_order_in_the_tail() {
        let mut b = OutputBudget::new(40);
        b.push(Stream::Stdout, &[b'x'; 30]);
        b.push(Stream::Stdout, b"out");
        b.push(Stream::Stderr, b"err");
        let tail = b.finish();
        assert_eq!(tail, vec![(Stream::Stdout, b"out".to_vec()), (Stream::Stderr, b"err".to_vec())]);
    }
}
