//! The metering verbs, as data: `berth usage`, `berth budget`, `berth ttl`, and the budget form `create --budget`
//! takes.

use clap::Args;

use super::api::parse_id;

#[derive(Debug, Args)]
pub struct UsageArgs {
    /// The sandbox's id or name (without: every running sandbox).
    #[arg(value_parser = parse_id, value_name = "ID")]
    pub id: Option<String>,
    /// The sandbox's recent usage instead: a point every 5 s for the last hour it ran, CPU as the cores' share
    /// used since the point before.
    #[arg(long, requires = "id")]
    pub history: bool,
    /// Print the API's JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct BudgetArgs {
    /// The sandbox's id or name.
    #[arg(value_parser = parse_id, value_name = "ID")]
    pub id: String,
    /// The limits to set, such as cpu=10m,egress=1G,wall=2h (those not named stay as they are).
    #[arg(value_parser = parse_budget, value_name = "KIND=AMOUNT[,...]", required = true)]
    pub budget: Vec<berth_api::Budget>,
    /// Print the API's JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct TtlArgs {
    /// The sandbox's id or name.
    #[arg(value_parser = parse_id, value_name = "ID")]
    pub id: String,
    /// How long it has from now (90s, 30m, 2h; a bare number is seconds), or `none` for no TTL.
    #[arg(value_parser = parse_ttl, value_name = "DURATION|none")]
    pub ttl: Ttl,
    /// Print the API's JSON.
    #[arg(long)]
    pub json: bool,
}

/// A new TTL: seconds from now, or none.
#[derive(Debug, Clone, Copy)]
pub struct Ttl(pub Option<f64>);

fn parse_ttl(s: &str) -> Result<Ttl, String> {
    if s == "none" {
        return Ok(Ttl(None));
    }
    let d = berth_runtime::spec::parse_duration(s).map_err(|e| e.to_string())?;
    if d.is_zero() {
        return Err("a TTL must be longer than 0 (none removes it)".into());
    }
    Ok(Ttl(Some(d.as_secs_f64())))
}

/// Parse a budget: `cpu=DURATION`, `egress=SIZE`, `wall=DURATION`, comma-separated, each at most once.
/// Durations are as `--ttl` takes them (`90s`, `10m`, `2h`; a bare number is seconds); sizes as `--memory`
/// (`1G` is 2^30 bytes).
pub fn parse_budget(s: &str) -> Result<berth_api::Budget, String> {
    let mut b = berth_api::Budget::default();
    for part in s.split(',').map(str::trim) {
        let Some((kind, amount)) = part.split_once('=') else {
            return Err(format!("{part:?} is not KIND=AMOUNT (cpu=10m, egress=1G, wall=2h)"));
        };
        let duration = || super::parse_duration(amount).map(|d| d.as_secs_f64());
        let twice = || format!("the budget names {kind} twice");
        match kind.trim() {
            "cpu" if b.cpu_seconds.is_none() => b.cpu_seconds = Some(duration()?),
            "wall" if b.wall_seconds.is_none() => b.wall_seconds = Some(duration()?),
            "egress" if b.egress_bytes.is_none() => b.egress_bytes = Some(super::parse_size(amount)?),
            "cpu" | "wall" | "egress" => return Err(twice()),
            other => return Err(format!("{other:?} is not a kind of budget: use cpu, egress or wall")),
        }
    }
    Ok(b)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_contract_form_parses() {
        let b = parse_budget("cpu=10m,egress=1G,wall=2h").unwrap();
        assert_eq!(b.cpu_seconds, Some(600.0));
        assert_eq!(b.egress_bytes, Some(1 << 30));
        assert_eq!(b.wall_seconds, Some(7200.0));
        assert_eq!(parse_budget("egress=512K").unwrap().egress_bytes, Some(512 << 10));
        assert_eq!(parse_budget("cpu=1.5").unwrap().cpu_seconds, Some(1.5));
    }

    #[test]
    fn nonsense_is_refused_with_a_sentence() {
        for (bad, says) in [
            ("ram=1G", "not a kind of budget"),
            ("cpu", "not kind=amount"),
            ("cpu=0", "duration"),
            ("cpu=fast", "duration"),
            ("egress=0", "size"),
            ("cpu=1m,cpu=2m", "twice"),
        ] {
            let e = parse_budget(bad).unwrap_err();
            assert!(e.to_lowercase().contains(says), "{bad}: {e}");
        }
    }
}
