#![allow(clippy::unwrap_used)]

use std::fmt::Write;

use super::*;

const STATES: [S; 7] = [S::Creating, S::Running, S::Paused, S::Hibernated, S::Stopping, S::Stopped, S::Gone];

/// The operations that hold a sandbox while they run.
fn holding() -> Vec<Operation> {
    Operation::ALL.iter().copied().filter(|o| o.label().is_some()).collect()
}

/// Every question the table can be asked: each state, each operation, free or held by each holding one.
fn every_question() -> Vec<(Now, Operation)> {
    let mut out = Vec::new();
    for state in STATES {
        for op in Operation::ALL {
            for busy in std::iter::once(None).chain(holding().into_iter().map(Some)) {
                out.push((Now { state, busy }, *op));
            }
        }
    }
    out
}

fn cell(r: Result<Admit, Refusal>) -> String {
    match r {
        Ok(Admit::Go(s)) => {
            let effect = match s.effect {
                Effect::None => "",
                Effect::Freeze => ", freeze",
                Effect::Thaw => ", thaw",
            };
            if s.during.is_none() && s.to == s.from {
                format!("stays{effect}")
            } else {
                let during = s.during.map(|d| format!("{} -> ", name(d))).unwrap_or_default();
                format!("go {during}{}{effect}", name(s.to))
            }
        }
        Ok(Admit::Already) => "already".into(),
        Ok(Admit::First(o)) => format!("first {o:?}"),
        Ok(Admit::Instead(o)) => format!("instead {o:?}"),
        Err(Refusal::State(hint)) => format!("no: {hint}"),
        Err(Refusal::Busy(o)) => format!("busy ({})", o.label().unwrap_or("?")),
        Err(Refusal::Gone) => "gone".into(),
    }
}

#[test]
fn the_whole_table_as_it_is() {
    let mut got = String::from(
        "# The lifecycle: every state x every operation, free or held (by a fork), and the answer.\n\
         # Written by the test the_whole_table_as_it_is (engine/lifecycle/tests.rs); for Recover, `held` is\n\
         # the store's frozen_for marker of a fork.\n",
    );
    for s in STATES {
        for op in Operation::ALL {
            for busy in [None, Some(FORK)] {
                let held = if busy.is_some() { "held" } else { "free" };
                let answer = cell(admit(Now { state: s, busy }, *op));
                writeln!(got, "{:<10} {:<30} {held} {answer}", name(s), format!("{op:?}")).unwrap();
            }
        }
    }
    assert_eq!(
        got,
        include_str!("../lifecycle.table"),
        "the lifecycle changed; if meant, replace lifecycle.table with:\n{got}"
    );
}

#[test]
fn no_step_ends_in_creating_and_only_a_removal_or_a_loss_ends_a_sandbox() {
    for (now, op) in every_question() {
        let Ok(Admit::Go(s)) = admit(now, op) else { continue };
        assert_ne!(s.to, S::Creating, "{now:?} {op:?}");
        assert!(matches!(s.during, None | Some(S::Stopping) | Some(S::Creating)), "{now:?} {op:?}");
        assert_eq!(s.from, now.state, "{now:?} {op:?}");
        if s.to == S::Gone {
            assert!(matches!(op, O::Remove | O::Lost { persistent: false }), "{now:?} {op:?}");
        }
    }
}

#[test]
fn a_holding_operation_that_would_go_while_held_is_busy_and_nothing_else_is() {
    for (now, op) in every_question() {
        let Some(b) = now.busy else { continue };
        let free = admit(Now { busy: None, ..now }, op);
        let held = admit(now, op);
        match (free, op.label(), op) {
            // A marker is what Recover is told: it answers by it, never busy.
            (_, _, O::Recover { .. }) => assert!(!matches!(held, Err(Refusal::Busy(_))), "{now:?} {op:?}"),
            (Ok(Admit::Go(_)), Some(_), _) => assert_eq!(held, Err(Refusal::Busy(b)), "{now:?} {op:?}"),
            (free, _, _) => assert_eq!(held, free, "{now:?} {op:?}"),
        }
    }
}

#[test]
fn out_of_stopping_only_holding_operations_a_loss_or_a_recovery_change_the_state() {
    for op in Operation::ALL {
        let Ok(Admit::Go(s)) = admit(Now { state: S::Stopping, busy: None }, *op) else { continue };
        if s.to != S::Stopping || s.during.is_some() {
            assert!(
                op.label().is_some() || matches!(op, O::Lost { .. } | O::Recover { .. }),
                "{op:?} changes a stopping sandbox without a hold"
            );
        }
    }
}

/// The crash case, generically: whatever an operation froze for its own work, a restarted daemon finds it as
/// that operation found it; what a pause froze stays paused.
#[test]
fn after_a_crash_every_sandbox_is_as_the_operation_that_froze_it_found_it() {
    let mut freezing = 0;
    for (now, op) in every_question() {
        let Ok(Admit::Go(s)) = admit(now, op) else { continue };
        if s.effect != Effect::Freeze {
            continue;
        }
        freezing += 1;
        let key = op.frozen_key().unwrap();
        let marker = Operation::from_frozen_key(key).unwrap();
        let recovered = admit(Now { state: s.from, busy: Some(marker) }, O::Recover { frozen: true });
        let Ok(Admit::Go(r)) = recovered else { panic!("{now:?} {op:?}: {recovered:?}") };
        assert_eq!((r.to, r.effect), (s.from, Effect::Thaw), "{now:?} {op:?}");
    }
    assert!(freezing > 0);
    // Paused: the only state whose freeze is its own, and no marker is written for it.
    let Ok(Admit::Go(r)) = admit(Now { state: S::Paused, busy: None }, O::Recover { frozen: true }) else { panic!() };
    assert_eq!((r.to, r.effect), (S::Paused, Effect::None));
    for op in Operation::ALL {
        if let Ok(Admit::Go(s)) = admit(Now { state: S::Paused, busy: None }, *op) {
            assert_ne!(s.effect, Effect::Freeze, "{op:?} freezes a paused sandbox");
        }
    }
    // Not frozen: running, whatever the record and the marker say.
    for state in STATES.into_iter().filter(|s| *s != S::Gone) {
        for busy in [None, Some(FORK), Some(SNAP)] {
            let Ok(Admit::Go(r)) = admit(Now { state, busy }, O::Recover { frozen: false }) else { panic!() };
            assert_eq!((r.to, r.effect), (S::Running, Effect::Thaw));
        }
    }
}

#[test]
fn first_and_instead_lead_somewhere_and_not_round() {
    for state in STATES {
        for op in Operation::ALL {
            let now = Now { state, busy: None };
            match admit(now, *op) {
                Ok(Admit::First(x)) => {
                    let Ok(Admit::Go(s)) = admit(now, x) else { panic!("{state:?} {op:?}: {x:?} does not go") };
                    let then = admit(Now { state: s.to, busy: None }, *op);
                    assert!(matches!(then, Ok(Admit::Go(_))), "{state:?} {op:?}: after {x:?}, {then:?}");
                }
                Ok(Admit::Instead(x)) => {
                    assert!(matches!(admit(now, x), Ok(Admit::Go(_))), "{state:?} {op:?}: {x:?} does not go");
                }
                _ => {}
            }
        }
    }
}

/// `Engine::live` hands a live sandbox out without a look at its record (which a pause holds across its
/// freeze): the table must let Change through in every state a live sandbox can be in.
#[test]
fn a_change_is_let_through_in_every_live_state() {
    for state in LIVE {
        assert_eq!(step(*state, O::Change).map(|s| (s.to, s.effect)), Some((*state, Effect::None)), "{state:?}");
    }
}

#[test]
fn the_refusals_say_what_they_said_before_byte_for_byte() {
    let say = |state, busy, op| admit(Now { state, busy }, op).err().unwrap().into_error("abc", state).to_string();
    let cases = [
        (S::Running, None, O::Start, "sandbox abc is running: it is already started"),
        (S::Stopped, None, O::Stop, "sandbox abc is stopped: start it before you stop it"),
        (S::Stopped, None, O::Activity, "sandbox abc is stopped: start it first (berth start)"),
        (S::Stopped, None, O::Change, "sandbox abc is stopped: start it first (berth start)"),
        (S::Stopped, None, O::Pause, "sandbox abc is stopped: start it first (berth start)"),
        (S::Stopped, None, O::Resume, "sandbox abc is stopped: start it first (berth start)"),
        (S::Stopped, None, O::Hibernate, "sandbox abc is stopped: start it first (berth start)"),
        (S::Hibernated, None, O::Change, "sandbox abc is hibernated: wake it first (berth wake)"),
        (S::Hibernated, None, O::Pause, "sandbox abc is hibernated: wake it first (berth wake)"),
        (S::Hibernated, None, O::Resume, "sandbox abc is hibernated: wake it first (berth wake)"),
        (
            S::Stopped,
            None,
            O::Wake,
            "sandbox abc is stopped: only a hibernated sandbox wakes; start a stopped one (berth start)",
        ),
        (
            S::Hibernated,
            None,
            FORK_P,
            "sandbox abc is hibernated: it cannot be forked with its processes: only a running sandbox's processes \
             are checkpointed (without with_processes only its files are copied)",
        ),
        (
            S::Stopped,
            None,
            SNAP_P,
            "sandbox abc is stopped: it cannot be snapshotted with its processes: only a running sandbox's \
             processes are checkpointed (without with_processes only its files are copied)",
        ),
        (S::Creating, None, O::Pause, "sandbox abc is creating: only a running sandbox can be paused"),
        (
            S::Running,
            Some(SNAP),
            O::Restore,
            "sandbox abc is busy (taking a snapshot); try again when that has finished",
        ),
        (S::Gone, None, O::Change, "there is no sandbox \"abc\""),
    ];
    for (state, busy, op, sentence) in cases {
        assert_eq!(say(state, busy, op), sentence, "{state:?} {op:?}");
    }
    // Each is a conflict (409), but a sandbox gone is not found (404).
    assert_eq!(say_code(S::Running, O::Start), berth_api::ErrorCode::Conflict);
    assert_eq!(say_code(S::Gone, O::Start), berth_api::ErrorCode::NotFound);
}

fn say_code(state: S, op: Operation) -> berth_api::ErrorCode {
    admit(Now { state, busy: None }, op).err().unwrap().into_error("abc", state).code()
}

#[test]
fn kept_states_are_those_the_store_lists_as_stopped() {
    let src = include_str!("../../store/projects.rs");
    let marker = "'$.state') IN";
    let rest = &src[src.find(marker).unwrap() + marker.len()..];
    let listed: Vec<&str> = rest[rest.find('(').unwrap() + 1..rest.find(')').unwrap()]
        .split(',')
        .map(|n| n.trim().trim_matches('\''))
        .collect();
    assert_eq!(listed, KEPT.map(name));
    for s in STATES {
        let serde = serde_json::to_value(s).unwrap();
        assert_eq!(serde.as_str(), Some(name(s)));
    }
}

#[test]
fn a_step_ends_with_the_fields_of_its_state() {
    let mut r: Sandbox = serde_json::from_value(serde_json::json!({
        "id": "0123456789ab", "name": "n", "image": "host", "state": "creating", "created_at_ms": 1,
        "expires_at_ms": null, "idle_timeout_seconds": null, "last_activity_ms": 1, "memory_bytes": null,
        "pids": null, "cpus": null, "labels": {}, "pid": 7, "landlock": "full", "paused_at_ms": 3
    }))
    .unwrap();
    built(&mut r);
    assert_eq!((r.state, r.paused_at_ms, r.pid), (S::Running, None, Some(7)));
    // Built again (a claimed warm sandbox): it runs, as it did.
    built(&mut r);
    assert_eq!(r.state, S::Running);
    let stop = step(S::Running, O::Stop).unwrap();
    stop.begin(&mut r);
    assert_eq!(r.state, S::Stopping);
    stop.end(&mut r);
    assert_eq!((r.state, r.pid, r.landlock.as_deref()), (S::Stopped, None, None));
}

/// The writes of a sandbox's state are this module's only: no other file of the crate assigns it. (A
/// heuristic: a line that assigns a state's field or names a state where a record is made.)
#[test]
fn the_state_is_written_here_only() {
    fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let own = src.join("engine").join("lifecycle");
    let mut files = Vec::new();
    walk(&src, &mut files);
    let mut writes = Vec::new();
    for f in files.iter().filter(|f| !f.starts_with(&own) && **f != own.with_extension("rs")) {
        for (i, line) in std::fs::read_to_string(f).unwrap().lines().enumerate() {
            let names_state = line.contains("SandboxState::") || line.contains(" S::");
            let assigns = line.contains(".state = ") || line.contains("state: ") || line.contains(") = (");
            if (names_state && assigns) || line.contains("r.state = ") || line.contains("record.state = ") {
                writes.push(format!("{}:{}: {}", f.strip_prefix(&src).unwrap().display(), i + 1, line.trim()));
            }
        }
    }
    assert!(writes.is_empty(), "a sandbox's state written outside the lifecycle:\n{}", writes.join("\n"));
}
