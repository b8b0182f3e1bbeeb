//! Resource limits for one sandbox, and the strings written to the kernel for them.

use serde::{Deserialize, Serialize};

use super::CgroupError;

/// The CFS period berth always uses, in microseconds (the kernel's default).
pub const CPU_PERIOD_US: u64 = 100_000;

/// The smallest quota the kernel accepts, in microseconds (1% of a CPU at our period).
const MIN_QUOTA_US: u64 = 1_000;

/// Limits for one sandbox. `None` leaves the kernel's default (no limit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Hard memory limit in bytes. No swap is allowed beyond it; the kernel's OOM killer acts at it.
    pub memory_bytes: Option<u64>,
    /// Maximum number of tasks (processes and threads) in the cgroup.
    pub pids: Option<u64>,
    /// CPU bandwidth in thousandths of a CPU: 1500 = one and a half cores.
    pub cpu_millis: Option<u64>,
}

impl Limits {
    /// Refuse limits the kernel would reject, before any directory is made.
    pub(crate) fn check(&self) -> Result<(), CgroupError> {
        if let Some(millis) = self.cpu_millis {
            cpu_quota_us(millis)?;
        }
        Ok(())
    }
}

/// The CFS quota, in microseconds per [`CPU_PERIOD_US`], for `millis` thousandths of a CPU.
pub(crate) fn cpu_quota_us(millis: u64) -> Result<u64, CgroupError> {
    let invalid = |reason| CgroupError::InvalidLimit { what: "cpu_millis", value: millis, reason };
    let quota = millis.checked_mul(CPU_PERIOD_US / 1000).ok_or_else(|| invalid("too large"))?;
    if quota < MIN_QUOTA_US {
        return Err(invalid("below the kernel's minimum of 10 (1% of one CPU)"));
    }
    Ok(quota)
}

/// The value of a v2 `cpu.max` file: `"QUOTA PERIOD"`.
pub(crate) fn cpu_max(millis: u64) -> Result<String, CgroupError> {
    Ok(format!("{} {CPU_PERIOD_US}", cpu_quota_us(millis)?))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn cpu_max_is_quota_then_period() {
        assert_eq!(cpu_max(1500).unwrap(), "150000 100000");
        assert_eq!(cpu_max(1000).unwrap(), "100000 100000");
        assert_eq!(cpu_max(250).unwrap(), "25000 100000");
        assert_eq!(cpu_max(10).unwrap(), "1000 100000");
    }

    #[test]
    fn cfs_quota_scales_with_millis() {
        assert_eq!(cpu_quota_us(1500).unwrap(), 150_000);
        assert_eq!(cpu_quota_us(4000).unwrap(), 400_000);
    }

    #[test]
    fn too_small_or_too_large_cpu_is_refused() {
        for millis in [0, 1, 9, u64::MAX] {
            let err = cpu_quota_us(millis).unwrap_err();
            assert!(matches!(err, CgroupError::InvalidLimit { what: "cpu_millis", .. }), "{err}");
        }
        let limits = Limits { cpu_millis: Some(5), ..Limits::default() };
        assert!(limits.check().is_err());
        assert!(Limits::default().check().is_ok());
    }
}
