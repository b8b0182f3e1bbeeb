//! One lifecycle: which operation may be done to a sandbox in which state, what state it leaves, and the
//! only code that writes `Sandbox::state`. [`admit`] is pure and the table below is the whole of it (the test
//! that walks it keeps the human-readable `lifecycle.table` beside this file). Beside the state are the holds
//! (`holds`): the operations that must not overlap another take one, under the same lock as their admission.
//! The engine's side of it (find a sandbox, admit an operation on it, freeze it for an operation's own work
//! with a marker a restarted daemon reads) is `door`.

use berth_api::{Sandbox, SandboxState as S};

use crate::EngineError;

mod door;
mod holds;
#[cfg(test)]
mod tests;

pub(super) use door::{Admitted, Found};
pub(crate) use holds::Holds;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Operation {
    Create,
    Start,
    Stop,
    Rebuild,
    Pause,
    Resume,
    Hibernate,
    Wake,
    Snapshot {
        processes: bool,
    },
    Fork {
        processes: bool,
    },
    Restore,
    Reset,
    Remove,
    /// An exec, a shell, a code context, a file call, a preview's connection: a paused sandbox resumes first, a
    /// hibernated one wakes first.
    Activity,
    /// Anything else asked of a live sandbox (its TTL, network policy, budget, execs' records, usage): it is
    /// not woken for it.
    Change,
    /// Its supervisor is gone (the reaper saw its init end, a start found it gone, a stop found its shim dead,
    /// the host restarted under an ephemeral hibernation).
    Lost {
        persistent: bool,
    },
    /// Adoption at start-up of a sandbox whose shim answered. `frozen`: what its freezer says. The store's
    /// `frozen_for` marker, if it has one, comes as [`Now::busy`]: the operation that froze it.
    Recover {
        frozen: bool,
    },
}
use Operation as O;

impl Operation {
    /// Every operation, each variant of the ones with fields.
    #[cfg(test)]
    pub(crate) const ALL: &'static [Operation] = &[
        O::Create,
        O::Start,
        O::Stop,
        O::Rebuild,
        O::Pause,
        O::Resume,
        O::Hibernate,
        O::Wake,
        SNAP,
        SNAP_P,
        FORK,
        FORK_P,
        O::Restore,
        O::Reset,
        O::Remove,
        O::Activity,
        O::Change,
        O::Lost { persistent: true },
        O::Lost { persistent: false },
        O::Recover { frozen: true },
        O::Recover { frozen: false },
    ];

    /// What `EngineError::Busy` says while this operation holds a sandbox; None: it takes no hold.
    pub(crate) fn label(self) -> Option<&'static str> {
        Some(match self {
            O::Start => "starting",
            O::Stop => "stopping",
            O::Rebuild => "rebuilding",
            O::Pause => "pausing",
            O::Hibernate => "hibernating",
            O::Wake => "waking",
            O::Snapshot { .. } => "taking a snapshot",
            O::Fork { .. } => "forking",
            O::Restore => "restoring a snapshot",
            O::Reset => "resetting",
            O::Remove => "being removed",
            O::Resume => "resuming",
            O::Create | O::Activity | O::Change | O::Lost { .. } | O::Recover { .. } => return None,
        })
    }

    /// The store's `frozen_for` of an operation that freezes a running sandbox for its own work.
    pub(crate) fn frozen_key(self) -> Option<&'static str> {
        match self {
            O::Fork { .. } => Some("fork"),
            O::Snapshot { .. } => Some("snapshot"),
            _ => None,
        }
    }

    /// The operation a `frozen_for` marker names.
    pub(crate) fn from_frozen_key(key: &str) -> Option<Operation> {
        match key {
            "fork" => Some(FORK),
            "snapshot" => Some(SNAP),
            _ => None,
        }
    }
}

/// What an operation does to the sandbox's freezer besides its change of state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Effect {
    None,
    /// It may freeze the sandbox for its own work: the store's `frozen_for` marker is written first.
    Freeze,
    /// It thaws the sandbox (to end its processes, or to go on).
    Thaw,
}

/// An admitted operation's change: from `from`, shown as `during` while it is under way (if it shows one), to
/// `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Step {
    pub from: S,
    pub during: Option<S>,
    pub to: S,
    pub effect: Effect,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admit {
    /// Do it: this is its step.
    Go(Step),
    /// Nothing to do: the sandbox is already as the operation would leave it.
    Already,
    /// Do that operation first, then ask again.
    First(Operation),
    /// Do that operation in its place.
    Instead(Operation),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Not in this state; the sentence says why or what to do.
    State(&'static str),
    /// Another operation holds the sandbox.
    Busy(Operation),
    Gone,
}

/// What the table is asked about: the sandbox's state, and the operation that holds it, if one does.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Now {
    pub state: S,
    pub busy: Option<Operation>,
}

#[derive(Debug, Clone, Copy)]
enum Out {
    Go(Option<S>, S, Effect),
    Keep(Effect),
    Already,
    First(Operation),
    Instead(Operation),
    No(&'static str),
}

const SNAP: O = O::Snapshot { processes: false };
const SNAP_P: O = O::Snapshot { processes: true };
const FORK: O = O::Fork { processes: false };
const FORK_P: O = O::Fork { processes: true };
/// States of a sandbox with a runtime. Stopping is always held (by its stop or removal): those rows answer
/// the operations that hold `Busy`.
const LIVE: &[S] = &[S::Running, S::Paused, S::Stopping];
const ANY: &[S] = &[S::Creating, S::Running, S::Paused, S::Stopping, S::Hibernated, S::Stopped];
/// The answer the table gives where it has none of its own for a live sandbox.
const CANNOT: &str = "that cannot be done to it now";

type Row = (&'static [S], &'static [Operation], Out);

/// The first row whose states and operations match answers; with none, `default_for(state)`.
const TABLE: &[Row] = &[
    (&[S::Creating], &[O::Create], Out::Go(None, S::Running, Effect::None)),
    (&[S::Running, S::Paused], &[O::Start], Out::No("it is already started")),
    (&[S::Stopping], &[O::Start], Out::Keep(Effect::None)),
    // A hibernated sandbox starts by waking.
    (&[S::Hibernated], &[O::Start], Out::Instead(O::Wake)),
    (&[S::Stopped], &[O::Start], Out::Go(Some(S::Creating), S::Running, Effect::None)),
    (LIVE, &[O::Stop], Out::Go(Some(S::Stopping), S::Stopped, Effect::Thaw)),
    // Its processes are given up: its image goes, its files stay.
    (&[S::Hibernated], &[O::Stop], Out::Go(None, S::Stopped, Effect::None)),
    (&[S::Stopped], &[O::Stop], Out::No("start it before you stop it")),
    (LIVE, &[O::Rebuild, O::Restore, O::Reset], Out::Go(Some(S::Stopping), S::Running, Effect::Thaw)),
    (&[S::Hibernated], &[O::Rebuild, O::Restore, O::Reset], Out::Go(Some(S::Creating), S::Running, Effect::None)),
    (&[S::Stopped], &[O::Rebuild], Out::Go(Some(S::Creating), S::Running, Effect::None)),
    (&[S::Stopped], &[O::Restore, O::Reset], Out::Keep(Effect::None)),
    // A pause's freeze is its state: the freezer is its record, so it needs no marker.
    (&[S::Running, S::Stopping], &[O::Pause], Out::Go(None, S::Paused, Effect::None)),
    (&[S::Paused], &[O::Pause], Out::Already),
    (&[S::Creating], &[O::Pause], Out::No("only a running sandbox can be paused")),
    (&[S::Paused], &[O::Resume], Out::Go(None, S::Running, Effect::Thaw)),
    (&[S::Running, S::Stopping], &[O::Resume], Out::Already),
    // CRIU seizes the processes itself: a paused sandbox is thawed first.
    (LIVE, &[O::Hibernate], Out::Go(None, S::Hibernated, Effect::Thaw)),
    (&[S::Hibernated], &[O::Hibernate], Out::Already),
    (&[S::Hibernated], &[O::Wake], Out::Go(Some(S::Creating), S::Running, Effect::None)),
    (LIVE, &[O::Wake], Out::Already),
    (&[S::Stopped], &[O::Wake], Out::No("only a hibernated sandbox wakes; start a stopped one (berth start)")),
    // Frozen for the instant of the copy (the marker first), and thawed after.
    (&[S::Running], &[SNAP, SNAP_P, FORK, FORK_P], Out::Keep(Effect::Freeze)),
    // Frozen already (by a pause, or while it stops).
    (&[S::Paused, S::Stopping], &[SNAP, SNAP_P, FORK, FORK_P], Out::Keep(Effect::None)),
    // Its files only: nothing runs to be frozen.
    (&[S::Hibernated, S::Stopped], &[SNAP, FORK], Out::Keep(Effect::None)),
    (
        &[S::Hibernated, S::Stopped],
        &[SNAP_P],
        Out::No(concat!(
            "it cannot be snapshotted with its processes: ",
            "only a running sandbox's processes are checkpointed (without with_processes only its files are copied)"
        )),
    ),
    (
        &[S::Hibernated, S::Stopped],
        &[FORK_P],
        Out::No(concat!(
            "it cannot be forked with its processes: ",
            "only a running sandbox's processes are checkpointed (without with_processes only its files are copied)"
        )),
    ),
    (LIVE, &[O::Remove], Out::Go(Some(S::Stopping), S::Gone, Effect::Thaw)),
    (&[S::Hibernated, S::Stopped], &[O::Remove], Out::Go(None, S::Gone, Effect::None)),
    (&[S::Running, S::Stopping], &[O::Activity, O::Change], Out::Keep(Effect::None)),
    (&[S::Paused], &[O::Activity], Out::First(O::Resume)),
    (&[S::Paused], &[O::Change], Out::Keep(Effect::None)),
    (&[S::Hibernated], &[O::Activity], Out::First(O::Wake)),
    (ANY, &[O::Lost { persistent: true }], Out::Go(None, S::Stopped, Effect::None)),
    (ANY, &[O::Lost { persistent: false }], Out::Go(None, S::Gone, Effect::None)),
];

/// At adoption a shim has answered, so its sandbox runs; keyed by (frozen, marked by a fork or a snapshot).
const RECOVER: &[(bool, bool, Out)] = &[
    // A fork or snapshot of a daemon that died froze it: left as that operation found it, running.
    (true, true, Out::Go(None, S::Running, Effect::Thaw)),
    // Paused (by a client or its idle clock; a pause writes its record later, so the freezer is its record).
    (true, false, Out::Go(None, S::Paused, Effect::None)),
    // Not paused, whatever its record says: a freeze left half done is undone.
    (false, true, Out::Go(None, S::Running, Effect::Thaw)),
    (false, false, Out::Go(None, S::Running, Effect::Thaw)),
];

fn default_for(s: S) -> Out {
    match s {
        S::Stopped => Out::No("start it first (berth start)"),
        S::Hibernated => Out::No("wake it first (berth wake)"),
        S::Creating => Out::No("it is being created; try again once it runs"),
        _ => Out::No(CANNOT),
    }
}

/// Whether `op` may be done now, and what it changes. A holding operation that would go answers `Busy` while
/// another holds the sandbox; any other answer is given whatever holds it (the state first, then the hold).
pub(crate) fn admit(now: Now, op: Operation) -> Result<Admit, Refusal> {
    if now.state == S::Gone {
        return Err(Refusal::Gone);
    }
    let out = match op {
        O::Recover { frozen } => {
            let marked = now.busy.is_some_and(|b| b.frozen_key().is_some());
            RECOVER.iter().find(|r| r.0 == frozen && r.1 == marked).map_or(Out::Keep(Effect::None), |r| r.2)
        }
        _ => TABLE
            .iter()
            .find(|r| r.0.contains(&now.state) && r.1.contains(&op))
            .map_or_else(|| default_for(now.state), |r| r.2),
    };
    if matches!(out, Out::Go(..) | Out::Keep(_))
        && op.label().is_some()
        && let Some(b) = now.busy
    {
        return Err(Refusal::Busy(b));
    }
    let step = |during, to, effect| Admit::Go(Step { from: now.state, during, to, effect });
    Ok(match out {
        Out::Go(during, to, effect) => step(during, to, effect),
        Out::Keep(effect) => step(None, now.state, effect),
        Out::Already => Admit::Already,
        Out::First(o) => Admit::First(o),
        Out::Instead(o) => Admit::Instead(o),
        Out::No(hint) => return Err(Refusal::State(hint)),
    })
}

/// `op`'s step from `state` when nothing else is asked (no hold: its caller holds the sandbox, or `op` takes
/// none), if it goes.
pub(crate) fn step(state: S, op: Operation) -> Option<Step> {
    match admit(Now { state, busy: None }, op) {
        Ok(Admit::Go(s)) => Some(s),
        _ => None,
    }
}

/// Whether `op` would go from `state` (the reaper, the meter): no hold asked.
pub(crate) fn goes(state: S, op: Operation) -> bool {
    step(state, op).is_some()
}

/// `op`'s step from `state` for a part of an operation its caller holds, or why it cannot be done.
pub(crate) fn held_step(id: &str, state: S, op: Operation) -> Result<Step, EngineError> {
    match admit(Now { state, busy: None }, op) {
        Ok(Admit::Go(s)) => Ok(s),
        Ok(_) => Err(Refusal::State(CANNOT).into_error(id, state)),
        Err(r) => Err(r.into_error(id, state)),
    }
}

/// Why `op` is not done to a sandbox in `state` (for a state the table refuses it in).
pub(crate) fn refused(id: &str, state: S, op: Operation) -> EngineError {
    match admit(Now { state, busy: None }, op) {
        Err(r) => r.into_error(id, state),
        Ok(_) => cannot(id, state),
    }
}

/// The error for an answer its caller does not expect of `op` in `state` (a state changed under it).
pub(crate) fn cannot(id: &str, state: S) -> EngineError {
    Refusal::State(CANNOT).into_error(id, state)
}

/// States whose sandboxes are kept without a runtime (`Store::stopped`'s SQL lists exactly these).
pub(crate) const KEPT: [S; 2] = [S::Stopped, S::Hibernated];
/// A new record's state (`record_of`).
pub(crate) const INITIAL: S = S::Creating;

/// A state as the API spells it.
pub(crate) fn name(s: S) -> &'static str {
    match s {
        S::Creating => "creating",
        S::Running => "running",
        S::Paused => "paused",
        S::Hibernated => "hibernated",
        S::Stopping => "stopping",
        S::Stopped => "stopped",
        S::Gone => "gone",
    }
}

impl Step {
    /// The state it shows while it is under way, if it shows one.
    pub(crate) fn begin(&self, r: &mut Sandbox) {
        if let Some(s) = self.during {
            r.state = s;
        }
    }

    /// The state it leaves, and the fields that go with a state.
    pub(crate) fn end(&self, r: &mut Sandbox) {
        r.state = self.to;
        if self.to != S::Paused {
            r.paused_at_ms = None;
        }
        if self.to != S::Hibernated {
            r.hibernated_at_ms = None;
        }
        if matches!(self.to, S::Stopped | S::Hibernated | S::Gone) {
            r.pid = None;
            r.landlock = None;
        }
    }
}

/// A sandbox's runtime is built (the shim's own write, at its build and when a warm sandbox is claimed): a new
/// record runs.
pub(crate) fn built(r: &mut Sandbox) {
    if let Some(s) = step(r.state, O::Create) {
        s.end(r);
    }
}

impl Refusal {
    pub(crate) fn into_error(self, id: &str, state: S) -> EngineError {
        match self {
            Refusal::State(hint) => {
                EngineError::WrongState { id: id.into(), state: name(state).into(), hint: hint.into() }
            }
            Refusal::Busy(op) => EngineError::Busy { id: id.into(), op: op.label().unwrap_or("busy") },
            Refusal::Gone => EngineError::NoSandbox(id.into()),
        }
    }
}
