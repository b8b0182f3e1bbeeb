//! A memory limit held inside the sandbox, where its kernel has no OOM killer of its own (gVisor's counts
//! each cgroup's memory and enforces no limit). The host's limit on the whole sandbox sits above the
//! sandbox's own by gVisor's overhead; a command that goes over the sandbox's limit would otherwise grow
//! until the host's kill ends the whole sandbox. Init looks at what the sandbox's processes hold, more often
//! the closer it is to the limit, and once it is over, kills the command that holds the most, as the kernel's
//! OOM killer does under namespaces: the sandbox, its other commands and its shells live on.

use std::time::{Duration, Instant};

use crate::trees::Trees;

/// The argument that gives init the limit: `--memory-limit=BYTES`.
pub const ARG: &str = "--memory-limit=";

/// How fast memory is assumed to grow between two looks: from the headroom left, when to look next. Twice
/// what one python3 thread touching new memory reaches behind gVisor here (0.75 GiB/s); the host's limit
/// is 64 MiB above the sandbox's for what grows faster.
const GROWTH_PER_SECOND: u64 = 3 << 29;
const LOOK_AT_LEAST_EVERY: Duration = Duration::from_secs(1);
const LOOK_AT_MOST_EVERY: Duration = Duration::from_millis(5);

/// How long a command killed is given to free its memory before another may be chosen.
const FREEING: Duration = Duration::from_secs(1);

pub(crate) struct Guard {
    limit: u64,
    /// The command last killed, and when: its memory is still counted until its processes are gone.
    freeing: Option<(u64, Instant)>,
    next: Instant,
}

/// A command killed for going over: its id, what it held, and the limit.
pub(crate) struct OverLimit {
    pub id: u64,
    pub bytes: u64,
    pub limit: u64,
}

impl Guard {
    /// The guard init's arguments ask for, if any.
    pub(crate) fn from_args(args: &[String]) -> Option<Guard> {
        let limit = args.iter().find_map(|a| a.strip_prefix(ARG))?.parse().ok()?;
        Some(Guard { limit, freeing: None, next: Instant::now() })
    }

    /// How long init's loop may wait before the next look.
    pub(crate) fn wait(&self) -> Duration {
        self.next.saturating_duration_since(Instant::now())
    }

    /// Look, if it is time: a command killed for going over the limit, if one was.
    pub(crate) fn look(&mut self, trees: &Trees) -> Option<OverLimit> {
        let now = Instant::now();
        if now < self.next {
            return None;
        }
        // Where the kernel does not count (no memory controller), the next look is as far off as any.
        self.next = now + LOOK_AT_LEAST_EVERY;
        let total = trees.memory_total()?;
        let headroom = self.limit.saturating_sub(total);
        let wait = Duration::from_secs_f64(headroom as f64 / GROWTH_PER_SECOND as f64);
        self.next = now + wait.clamp(LOOK_AT_MOST_EVERY, LOOK_AT_LEAST_EVERY);
        if total <= self.limit {
            return None;
        }
        if let Some((id, at)) = self.freeing
            && trees.holds(id)
            && now.duration_since(at) < FREEING
        {
            return None;
        }
        let (id, bytes) = trees.largest().filter(|(_, bytes)| *bytes > 0)?;
        trees.kill(id, 9);
        self.freeing = Some((id, now));
        Some(OverLimit { id, bytes, limit: self.limit })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_comes_from_inits_arguments() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let guard = Guard::from_args(&args(&["berth", "init", "--control-on-stdin", "--memory-limit=134217728"]));
        assert_eq!(guard.map(|g| g.limit), Some(128 << 20));
        assert!(Guard::from_args(&args(&["berth", "init", "--control-on-stdin"])).is_none());
        assert!(Guard::from_args(&args(&["berth", "init", "--memory-limit=lots"])).is_none());
    }

    #[test]
    fn the_first_look_is_at_once() {
        let guard = Guard::from_args(&["--memory-limit=1".to_string()]);
        assert_eq!(guard.map(|g| g.wait()), Some(Duration::ZERO));
    }
}
