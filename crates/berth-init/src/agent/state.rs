//! What init carries across its own re-execution (see `Request::Reexec`), as the one argument it is
//! executed again with.

use std::collections::HashMap;

/// What init carries across its own re-execution: running commands (pid → request id) and listeners (port
/// → descriptor).
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct State {
    pub running: HashMap<i32, u64>,
    pub listeners: Vec<(u16, i32)>,
}

/// `PID:ID,...;PORT:FD,...`
pub(super) fn encode_state(state: &State) -> String {
    let running: Vec<String> = state.running.iter().map(|(pid, id)| format!("{pid}:{id}")).collect();
    let listeners: Vec<String> = state.listeners.iter().map(|(port, fd)| format!("{port}:{fd}")).collect();
    format!("{};{}", running.join(","), listeners.join(","))
}

pub(super) fn decode_state(text: &str) -> Result<State, String> {
    fn pairs<A: std::str::FromStr, B: std::str::FromStr>(part: &str) -> Result<Vec<(A, B)>, String> {
        part.split(',')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (a, b) = p.split_once(':').ok_or_else(|| format!("{p:?} is not a pair"))?;
                Ok((a.parse().map_err(|_| format!("{a:?}"))?, b.parse().map_err(|_| format!("{b:?}"))?))
            })
            .collect()
    }
    let (running, listeners) =
        text.split_once(';').ok_or_else(|| "init's resumed state has no listeners part".to_string())?;
    let bad = |e: String| format!("init's resumed state is malformed at {e}");
    Ok(State { running: pairs(running).map_err(bad)?.into_iter().collect(), listeners: pairs(listeners).map_err(bad)? })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_resumed_state_round_trips() {
        let state = State { running: HashMap::from([(7, 1), (42, 9)]), listeners: vec![(3128, 5), (3129, 6)] };
        assert_eq!(decode_state(&encode_state(&state)).unwrap(), state);
        assert_eq!(decode_state(";").unwrap(), State::default());
    }

    #[test]
    fn a_malformed_state_is_refused() {
        assert!(decode_state("").is_err());
        assert!(decode_state("7;").is_err());
        assert!(decode_state("x:1;").is_err());
        assert!(decode_state(";3128:").is_err());
    }
}
