//! Multi-pattern search that costs little when nothing matches, which is nearly always.
//!
//! Patterns are searched with Teddy (the SIMD searcher in `aho_corasick::packed`), several GB/s while it has at
//! most 64 patterns, so larger sets are split into groups of 64, one pass each. `AhoCorasick` itself switches
//! Teddy off beyond 16 patterns and then falls to about 0.1 GB/s on text like build output, too slow for exec
//! output. Where Teddy is not available (CPUs without the vector instructions it needs), a plain Aho-Corasick
//! automaton does the same work more slowly.

use aho_corasick::{AhoCorasick, Input, MatchKind, Span, packed};

/// The most patterns one Teddy searcher is given; past that its verification step dominates.
const GROUP: usize = 64;

#[derive(Clone)]
enum Finder {
    Teddy(packed::Searcher),
    Automaton(AhoCorasick),
}

impl Finder {
    fn build(patterns: &[&[u8]], teddy: bool) -> Option<Finder> {
        if teddy {
            let mut config = packed::Config::new();
            let built = config.match_kind(packed::MatchKind::LeftmostLongest).builder().extend(patterns).build();
            if let Some(searcher) = built {
                return Some(Finder::Teddy(searcher));
            }
        }
        AhoCorasick::builder().match_kind(MatchKind::LeftmostLongest).build(patterns).ok().map(Finder::Automaton)
    }

    fn find(&self, hay: &[u8], at: usize) -> Option<(usize, usize, usize)> {
        match self {
            Finder::Teddy(s) => {
                s.find_in(hay, Span::from(at..hay.len())).map(|m| (m.start(), m.end(), m.pattern().as_usize()))
            }
            Finder::Automaton(ac) => {
                ac.find(Input::new(hay).span(at..hay.len())).map(|m| (m.start(), m.end(), m.pattern().as_usize()))
            }
        }
    }
}

/// A leftmost-longest searcher over patterns that each carry a label (an index the caller gives meaning to).
#[derive(Clone)]
pub(crate) struct Searcher {
    /// Each group's finder and the label of each of its patterns.
    groups: Vec<(Finder, Vec<usize>)>,
}

impl Searcher {
    /// `None` if a searcher could not be built (which the automaton's limits make unreachable for the sizes a
    /// vault allows). Patterns must be distinct and non-empty.
    pub(crate) fn new(patterns: &[(Vec<u8>, usize)]) -> Option<Searcher> {
        Searcher::build(patterns, true)
    }

    fn build(patterns: &[(Vec<u8>, usize)], teddy: bool) -> Option<Searcher> {
        let mut groups = Vec::new();
        for group in patterns.chunks(GROUP) {
            let bytes: Vec<&[u8]> = group.iter().map(|(p, _)| p.as_slice()).collect();
            let finder = Finder::build(&bytes, teddy)?;
            groups.push((finder, group.iter().map(|&(_, label)| label).collect()));
        }
        Some(Searcher { groups })
    }

    /// A cursor over the matches in `hay`.
    pub(crate) fn matches<'a>(&'a self, hay: &'a [u8]) -> Matches<'a> {
        Matches { searcher: self, hay, next: vec![None; self.groups.len()] }
    }
}

/// Matches in one haystack. Each group's next match is remembered, so that asking again from a later position
/// searches only the groups whose remembered match now lies behind it: the whole walk stays linear.
pub(crate) struct Matches<'a> {
    searcher: &'a Searcher,
    hay: &'a [u8],
    /// Per group: `None` before its first search, then what its last search found.
    next: Vec<Option<Option<(usize, usize, usize)>>>,
}

impl Matches<'_> {
    /// The leftmost match starting at or after `at` (the longest one there), as (start, end, label). `at` must
    /// not decrease from one call to the next.
    pub(crate) fn find(&mut self, at: usize) -> Option<(usize, usize, usize)> {
        let mut best: Option<(usize, usize, usize)> = None;
        for ((finder, labels), next) in self.searcher.groups.iter().zip(self.next.iter_mut()) {
            // A remembered miss stays a miss further on; a remembered match still is the leftmost one from
            // here if it does not start before `at`.
            let stale = match next {
                None => true,
                Some(None) => false,
                Some(Some((start, _, _))) => *start < at,
            };
            if stale {
                *next = Some(finder.find(self.hay, at));
            }
            if let Some(Some((start, end, local))) = *next {
                let better = best.is_none_or(|(s, e, _)| start < s || (start == s && end > e));
                if better {
                    best = Some((start, end, labels.get(local).copied().unwrap_or(0)));
                }
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn all(searcher: &Searcher, hay: &[u8]) -> Vec<(usize, usize, usize)> {
        let mut out = Vec::new();
        let mut matches = searcher.matches(hay);
        let mut at = 0;
        while let Some(m) = matches.find(at) {
            out.push(m);
            at = m.0 + 1;
        }
        out
    }

    #[test]
    fn groups_and_fallback_agree_with_a_naive_search() {
        // 150 patterns over a 3-letter alphabet: three groups, with matches nearly everywhere.
        let mut seed = 0x1234_5678_9abc_def1u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut patterns: Vec<(Vec<u8>, usize)> = Vec::new();
        while patterns.len() < 150 {
            let len = 3 + (next() % 8) as usize;
            let p: Vec<u8> = (0..len).map(|_| b"abc"[(next() % 3) as usize]).collect();
            if !patterns.iter().any(|(q, _)| *q == p) {
                let label = patterns.len();
                patterns.push((p, label));
            }
        }
        let teddy = Searcher::new(&patterns).unwrap();
        let automaton = Searcher::build(&patterns, false).unwrap();
        assert_eq!(teddy.groups.len(), 3);
        for _ in 0..50 {
            let hay: Vec<u8> = (0..300).map(|_| b"abcd"[(next() % 4) as usize]).collect();
            // Naive: at each start, the longest pattern there.
            let naive: Vec<(usize, usize, usize)> = (0..hay.len())
                .filter_map(|s| {
                    let fits = patterns.iter().filter(|(p, _)| hay[s..].starts_with(p));
                    fits.max_by_key(|(p, _)| p.len()).map(|(p, label)| (s, s + p.len(), *label))
                })
                .collect();
            assert_eq!(all(&teddy, &hay), naive);
            assert_eq!(all(&automaton, &hay), naive);
        }
    }
}
