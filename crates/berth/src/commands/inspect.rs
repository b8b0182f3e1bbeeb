//! `berth inspect`: one sandbox, as the daemon sees it.

use std::path::Path;

use berth_client::Client;

use super::output;
use crate::cli::InspectArgs;

pub fn inspect(socket: &Path, args: InspectArgs) -> anyhow::Result<i32> {
    let client = Client::connect(socket)?;
    let (_, body) = client.get(&format!("/v1/sandboxes/{}", berth_client::segment(&args.id)))?;
    if args.json {
        output::print_raw(&body)?;
    } else {
        let value: serde_json::Value = berth_client::decode(&body)?;
        println!("{}", serde_json::to_string_pretty(&value)?);
    }
    Ok(0)
}
