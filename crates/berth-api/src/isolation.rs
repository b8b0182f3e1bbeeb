//! Which boundary a sandbox runs behind, and which ones a host offers.

use serde::{Deserialize, Serialize};

/// The boundary between a sandbox and the host.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// Linux namespaces, cgroups, seccomp and landlock on the host's kernel.
    #[default]
    Namespaces,
    /// gVisor: a kernel of the sandbox's own (runsc), on top of the same namespaces and cgroups.
    Gvisor,
}

impl Isolation {
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
        match s {
            "namespaces" => Ok(Isolation::Namespaces),
            "gvisor" => Ok(Isolation::Gvisor),
            _ => Err(format!("{s:?} is not an isolation: namespaces or gvisor")),
        }
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
