//! Which boundary a sandbox runs behind, and which ones a host offers.

use serde::{Deserialize, Serialize};

/// The boundary between a sandbox and the host kernel: the API's, the CLI's and the runtime's one type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// The host kernel's namespaces, cgroups, seccomp and landlock: the sandbox's processes are the host's.
    #[default]
    Namespaces,
    /// gVisor (`runsc`): the sandbox's processes run on a kernel of their own in user space, and only that
    /// kernel talks to the host's, through a narrow set of system calls.
    Gvisor,
}

impl Isolation {
    pub const ALL: [Isolation; 2] = [Isolation::Namespaces, Isolation::Gvisor];

    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::Namespaces => "namespaces",
            Isolation::Gvisor => "gvisor",
        }
    }
}

impl std::fmt::Display for Isolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Isolation {
    type Err = String;
    fn from_str(s: &str) -> Result<Isolation, String> {
        Isolation::ALL.into_iter().find(|i| i.as_str() == s).ok_or_else(|| {
            let others: Vec<&str> =
                Isolation::ALL.iter().filter(|i| **i != Isolation::default()).map(|i| i.as_str()).collect();
            format!("{s:?} is not an isolation: use {} (the default) or {}", Isolation::default(), others.join(" or "))
        })
    }
}

/// One row of [`crate::DaemonInfo::isolations`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IsolationInfo {
    pub isolation: Isolation,
    pub available: bool,
    /// What provides it (`runsc 0.0~20240729.0`), or why this host cannot offer it.
    pub detail: String,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn every_isolation_parses_by_its_name_and_a_typo_lists_them() {
        for i in Isolation::ALL {
            assert_eq!(i.as_str().parse::<Isolation>(), Ok(i));
        }
        assert_eq!(
            "gviser".parse::<Isolation>().unwrap_err(),
            "\"gviser\" is not an isolation: use namespaces (the default) or gvisor"
        );
    }
}
