//! `berth desktop screenshot|show|move|click|drag|scroll|type|key|open|launch|focus|wait`.

use std::io::Write;
use std::path::Path;

use berth_api::{ActionsDone, DesktopAction, DesktopActions, DesktopInfo, Settled, WaitSettled};
use berth_client::Client;

use super::output;
use crate::cli::DesktopCommand;

fn path(id: &str, rest: &str) -> String {
    format!("/v1/sandboxes/{}/desktop{rest}", berth_client::segment(id))
}

pub fn desktop(socket: &Path, cmd: DesktopCommand) -> anyhow::Result<i32> {
    let client = Client::connect(socket)?;
    let (id, action) = match cmd {
        DesktopCommand::Screenshot { id, output, max_width, max_height } => {
            let mut query = Vec::new();
            query.extend(max_width.map(|w| format!("max_width={w}")));
            query.extend(max_height.map(|h| format!("max_height={h}")));
            let q = if query.is_empty() { String::new() } else { format!("?{}", query.join("&")) };
            let (_, png) = client.get(&path(&id, &format!("/screenshot{q}")))?;
            if output.as_os_str() == "-" {
                std::io::stdout().write_all(&png)?;
            } else {
                std::fs::write(&output, &png)?;
                eprintln!("{} ({} bytes)", output.display(), png.len());
            }
            return Ok(0);
        }
        DesktopCommand::Show { id, json } => {
            let (_, body) = client.get(&path(&id, ""))?;
            if json {
                output::print_raw(&body)?;
                return Ok(0);
            }
            let d: DesktopInfo = berth_client::decode(&body)?;
            println!(
                "screen {}x{} on display {}, pointer at {},{}",
                d.width, d.height, d.display, d.cursor.x, d.cursor.y
            );
            for w in d.windows {
                let focus = if w.focused { "*" } else { " " };
                println!("{focus} {}  {}x{}+{}+{}  {}  {}", w.id, w.width, w.height, w.x, w.y, w.class, w.title);
            }
            return Ok(0);
        }
        DesktopCommand::Wait { id, settle, timeout } => {
            let (_, body) =
                client.post_json(&path(&id, "/wait"), &WaitSettled { settle_ms: settle, timeout_ms: timeout })?;
            let s: Settled = berth_client::decode(&body)?;
            return match s.settled {
                true => {
                    println!("settled after {} ms", s.waited_ms);
                    Ok(0)
                }
                false => {
                    eprintln!("the screen was still changing after {} ms", s.waited_ms);
                    Ok(1)
                }
            };
        }
        DesktopCommand::Move { id, x, y } => (id, DesktopAction::Move { x, y }),
        DesktopCommand::Click { id, x, y, button, double } => {
            (id, DesktopAction::Click { x, y, button: button.into(), count: if double { 2 } else { 1 } })
        }
        DesktopCommand::Drag { id, x1, y1, x2, y2 } => {
            (id, DesktopAction::Drag { from: [x1, y1], to: [x2, y2], button: berth_api::Button::Left })
        }
        DesktopCommand::Scroll { id, dx, dy } => (id, DesktopAction::Scroll { x: None, y: None, dx, dy }),
        DesktopCommand::Type { id, text } => (id, DesktopAction::Type { text }),
        DesktopCommand::Key { id, keys } => (id, DesktopAction::Key { keys }),
        DesktopCommand::Open { id, target } => (id, DesktopAction::Open { target }),
        DesktopCommand::Launch { id, argv } => (id, DesktopAction::Launch { argv }),
        DesktopCommand::Focus { id, window } => (id, DesktopAction::Focus { window }),
    };
    let req = DesktopActions { actions: vec![action], coordinates_in: None };
    let (_, body) = client.post_json(&path(&id, "/actions"), &req)?;
    let done: ActionsDone = berth_client::decode(&body)?;
    println!("pointer at {},{}", done.cursor.x, done.cursor.y);
    Ok(0)
}
