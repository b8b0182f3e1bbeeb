//! Myers' O(ND) difference algorithm in linear space (the "middle snake" divide and conquer).
//!
//! Lines are compared as integers (see [`intern`]). The search for each middle snake is bounded: when the
//! two ranges differ too much, the furthest point the forward search reached is used as the split instead.
//! The script is then no longer minimal, but it is always a correct edit script, and a file rewritten end to
//! end cannot make a patch take quadratic time.

use std::collections::HashMap;
use std::ops::Range;

/// One run of the edit script, in order: indices are positions in the old and new sequences.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// `len` equal items at `old` and `new`.
    Equal { old: usize, new: usize, len: usize },
    /// `len` items deleted at `old`.
    Delete { old: usize, len: usize },
    /// `len` items inserted at `new`.
    Insert { new: usize, len: usize },
}

/// Maps each line to a small integer, equal lines to equal integers.
pub(crate) fn intern<'a>(old: &[&'a [u8]], new: &[&'a [u8]]) -> (Vec<u32>, Vec<u32>) {
    let mut ids: HashMap<&'a [u8], u32> = HashMap::new();
    let mut map = |lines: &[&'a [u8]]| -> Vec<u32> {
        lines
            .iter()
            .map(|line| {
                let next = u32::try_from(ids.len()).unwrap_or(u32::MAX);
                *ids.entry(line).or_insert(next)
            })
            .collect()
    };
    let a = map(old);
    let b = map(new);
    (a, b)
}

/// One line of a line-by-line edit script, by index into the old or new lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Line {
    Same(usize),
    Del(usize),
    Ins(usize),
}

/// The line-by-line edit script turning `a` into `b` (as interned by [`intern`]). Lines found on one side
/// only cannot be part of a match, so they are set aside before the search (as git does), which keeps
/// large rewrites fast. Each run of changes lists its deletions before its insertions.
pub(crate) fn script(a: &[u32], b: &[u32]) -> Vec<Line> {
    let ids = a.iter().chain(b).max().map_or(0, |m| *m as usize + 1);
    let (mut in_a, mut in_b) = (vec![false; ids], vec![false; ids]);
    a.iter().for_each(|&x| in_a[x as usize] = true);
    b.iter().for_each(|&x| in_b[x as usize] = true);
    let ka: Vec<usize> = (0..a.len()).filter(|&i| in_b[a[i] as usize]).collect();
    let kb: Vec<usize> = (0..b.len()).filter(|&i| in_a[b[i] as usize]).collect();
    let fa: Vec<u32> = ka.iter().map(|&i| a[i]).collect();
    let fb: Vec<u32> = kb.iter().map(|&i| b[i]).collect();
    let mut out = Vec::with_capacity(a.len().max(b.len()));
    let (mut dels, mut ins) = (Vec::new(), Vec::new());
    let (mut oi, mut ni) = (0, 0);
    for op in diff(&fa, &fb) {
        match op {
            Op::Equal { old, new, len } => {
                for t in 0..len {
                    let (x, y) = (ka[old + t], kb[new + t]);
                    dels.extend((oi..x).map(Line::Del));
                    ins.extend((ni..y).map(Line::Ins));
                    out.append(&mut dels);
                    out.append(&mut ins);
                    out.push(Line::Same(x));
                    (oi, ni) = (x + 1, y + 1);
                }
            }
            Op::Delete { old, len } => {
                let x = ka[old + len - 1];
                dels.extend((oi..=x).map(Line::Del));
                oi = x + 1;
            }
            Op::Insert { new, len } => {
                let y = kb[new + len - 1];
                ins.extend((ni..=y).map(Line::Ins));
                ni = y + 1;
            }
        }
    }
    dels.extend((oi..a.len()).map(Line::Del));
    ins.extend((ni..b.len()).map(Line::Ins));
    out.append(&mut dels);
    out.append(&mut ins);
    out
}

/// A diagonal-indexed array (`k` from `-d` to `d`).
struct V {
    offset: isize,
    v: Vec<usize>,
}

impl V {
    fn new(max_d: usize) -> Self {
        Self { offset: max_d as isize, v: vec![0; 2 * max_d + 2] }
    }

    fn at(&self, k: isize) -> usize {
        self.v[(k + self.offset) as usize]
    }

    fn set(&mut self, k: isize, x: usize) {
        self.v[(k + self.offset) as usize] = x;
    }
}

fn prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

fn suffix(a: &[u32], b: &[u32]) -> usize {
    a.iter().rev().zip(b.iter().rev()).take_while(|(x, y)| x == y).count()
}

/// The edit script turning `a` into `b`.
pub(crate) fn diff(a: &[u32], b: &[u32]) -> Vec<Op> {
    let max_d = (a.len() + b.len()).div_ceil(2) + 1;
    let (mut vf, mut vb) = (V::new(max_d), V::new(max_d));
    let budget = ((a.len() + b.len()).isqrt()).max(1024);
    let mut out = Vec::new();
    // Work items, last first: a range pair still to solve, or equal items to emit once it is solved.
    let mut work = vec![Work::Solve(0..a.len(), 0..b.len())];
    while let Some(item) = work.pop() {
        let (mut ra, mut rb) = match item {
            Work::Emit(op) => {
                out.push(op);
                continue;
            }
            Work::Solve(ra, rb) => (ra, rb),
        };
        let p = prefix(&a[ra.clone()], &b[rb.clone()]);
        if p > 0 {
            out.push(Op::Equal { old: ra.start, new: rb.start, len: p });
        }
        ra.start += p;
        rb.start += p;
        let s = suffix(&a[ra.clone()], &b[rb.clone()]);
        ra.end -= s;
        rb.end -= s;
        if s > 0 {
            work.push(Work::Emit(Op::Equal { old: ra.end, new: rb.end, len: s }));
        }
        if ra.is_empty() && rb.is_empty() {
            continue;
        }
        if ra.is_empty() || rb.is_empty() {
            replace(&mut out, ra, rb);
            continue;
        }
        match middle_snake(a, ra.clone(), b, rb.clone(), &mut vf, &mut vb, budget) {
            Some((x, y)) if (x, y) != (ra.start, rb.start) && (x, y) != (ra.end, rb.end) => {
                work.push(Work::Solve(x..ra.end, y..rb.end));
                work.push(Work::Solve(ra.start..x, rb.start..y));
            }
            _ => replace(&mut out, ra, rb),
        }
    }
    out
}

enum Work {
    Solve(Range<usize>, Range<usize>),
    Emit(Op),
}

fn replace(out: &mut Vec<Op>, ra: Range<usize>, rb: Range<usize>) {
    if !ra.is_empty() {
        out.push(Op::Delete { old: ra.start, len: ra.len() });
    }
    if !rb.is_empty() {
        out.push(Op::Insert { new: rb.start, len: rb.len() });
    }
}

/// Finds a point on an optimal path through the middle of the edit graph of `a[ra]` and `b[rb]`, in
/// absolute coordinates. Past `budget` rounds it settles for the furthest point the forward search reached.
fn middle_snake(
    a: &[u32],
    ra: Range<usize>,
    b: &[u32],
    rb: Range<usize>,
    vf: &mut V,
    vb: &mut V,
    budget: usize,
) -> Option<(usize, usize)> {
    let (n, m) = (ra.len(), rb.len());
    let delta = n as isize - m as isize;
    let odd = delta & 1 == 1;
    vf.set(1, 0);
    vb.set(1, 0);
    let d_max = (n + m).div_ceil(2) + 1;
    for d in 0..d_max as isize {
        if d as usize > budget {
            return furthest(vf, d - 1, n, m).map(|(x, y)| (x + ra.start, y + rb.start));
        }
        let mut k = -d;
        while k <= d {
            let mut x =
                if k == -d || (k != d && vf.at(k - 1) < vf.at(k + 1)) { vf.at(k + 1) } else { vf.at(k - 1) + 1 };
            let y = (x as isize - k) as usize;
            let (x0, y0) = (x, y);
            if x < n && y < m {
                x += prefix(&a[ra.start + x..ra.end], &b[rb.start + y..rb.end]);
            }
            vf.set(k, x);
            if odd && (k - delta).abs() < d && vf.at(k) + vb.at(-(k - delta)) >= n {
                return Some((x0 + ra.start, y0 + rb.start));
            }
            k += 2;
        }
        let mut k = -d;
        while k <= d {
            let mut x =
                if k == -d || (k != d && vb.at(k - 1) < vb.at(k + 1)) { vb.at(k + 1) } else { vb.at(k - 1) + 1 };
            let mut y = (x as isize - k) as usize;
            if x < n && y < m {
                let s = suffix(&a[ra.start..ra.start + n - x], &b[rb.start..rb.start + m - y]);
                x += s;
                y += s;
            }
            vb.set(k, x);
            if !odd && (k - delta).abs() <= d && vb.at(k) + vf.at(-(k - delta)) >= n {
                return Some((n - x + ra.start, m - y + rb.start));
            }
            k += 2;
        }
    }
    None
}

/// The point of the forward search, after round `d`, that got furthest along the diagonals.
fn furthest(vf: &V, d: isize, n: usize, m: usize) -> Option<(usize, usize)> {
    let mut best: Option<(usize, usize)> = None;
    let mut k = -d;
    while k <= d {
        let x = vf.at(k);
        let y = x as isize - k;
        if y >= 0 && (y as usize) <= m && x <= n && best.is_none_or(|(bx, by)| x + y as usize > bx + by) {
            best = Some((x, y as usize));
        }
        k += 2;
    }
    best
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Applies a script to `a` and checks it yields `b`, with every equal run really equal.
    fn check(a: &[u32], b: &[u32]) -> usize {
        let ops = diff(a, b);
        let (mut i, mut j, mut out, mut cost) = (0, 0, Vec::new(), 0);
        for op in ops {
            match op {
                Op::Equal { old, new, len } => {
                    assert_eq!((old, new), (i, j));
                    assert_eq!(a[old..old + len], b[new..new + len]);
                    out.extend_from_slice(&a[old..old + len]);
                    i += len;
                    j += len;
                }
                Op::Delete { old, len } => {
                    assert_eq!(old, i);
                    i += len;
                    cost += len;
                }
                Op::Insert { new, len } => {
                    assert_eq!(new, j);
                    out.extend_from_slice(&b[new..new + len]);
                    j += len;
                    cost += len;
                }
            }
        }
        assert_eq!((i, j), (a.len(), b.len()));
        assert_eq!(out, b);
        cost
    }

    #[test]
    fn scripts_are_correct_and_minimal_on_small_inputs() {
        assert_eq!(check(&[], &[]), 0);
        assert_eq!(check(&[1, 2, 3], &[1, 2, 3]), 0);
        assert_eq!(check(&[], &[1, 2]), 2);
        assert_eq!(check(&[1, 2], &[]), 2);
        // The paper's example: ABCABBA -> CBABAC has distance 5.
        assert_eq!(check(&[1, 2, 3, 1, 2, 2, 1], &[3, 2, 1, 2, 1, 3]), 5);
        assert_eq!(check(&[1, 2, 3, 4, 5], &[1, 9, 3, 4, 8, 5]), 3);
    }

    #[test]
    fn pseudo_random_inputs_give_correct_scripts() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..300 {
            let la = (next() % 40) as usize;
            let lb = (next() % 40) as usize;
            let alphabet = 1 + next() % 5;
            let a: Vec<u32> = (0..la).map(|_| (next() % alphabet) as u32).collect();
            let b: Vec<u32> = (0..lb).map(|_| (next() % alphabet) as u32).collect();
            check(&a, &b);
            check_script(&a, &b);
        }
    }

    /// Checks a line script covers both sides in order and rebuilds `b`.
    fn check_script(a: &[u32], b: &[u32]) -> usize {
        let (mut i, mut j, mut out, mut cost) = (0, 0, Vec::new(), 0);
        for line in script(a, b) {
            match line {
                Line::Same(k) => {
                    assert_eq!(k, i);
                    assert_eq!(a[k], b[j]);
                    out.push(a[k]);
                    i += 1;
                    j += 1;
                }
                Line::Del(k) => {
                    assert_eq!(k, i);
                    i += 1;
                    cost += 1;
                }
                Line::Ins(k) => {
                    assert_eq!(k, j);
                    out.push(b[k]);
                    j += 1;
                    cost += 1;
                }
            }
        }
        assert_eq!((i, j, out.as_slice()), (a.len(), b.len(), b));
        cost
    }

    #[test]
    fn line_scripts_set_aside_unmatched_lines() {
        assert_eq!(check_script(&[1, 2, 3, 1, 2, 2, 1], &[3, 2, 1, 2, 1, 3]), 5);
        assert_eq!(check_script(&[7, 1, 8, 2, 9], &[1, 5, 2, 6]), 5);
        assert_eq!(check_script(&[], &[4]), 1);
        let a: Vec<u32> = (0..5000).collect();
        let b: Vec<u32> = (0..5000).map(|i| if i % 7 == 0 { i + 10_000 } else { i }).collect();
        assert_eq!(check_script(&a, &b), 2 * 715);
    }

    #[test]
    fn large_rewrites_finish_with_a_correct_script() {
        let a: Vec<u32> = (0..6_000).collect();
        let b: Vec<u32> = (0..6_000).map(|i| if i % 3 == 0 { i + 100_000 } else { i }).collect();
        check(&a, &b);
        check_script(&a, &b);
        let c: Vec<u32> = (0..6_000).map(|i| i + 1_000_000).collect();
        assert_eq!(check_script(&a, &c), 12_000);
    }
}
