//! `berth context create|ls|run|interrupt|restart|rm`.

use std::io::{Read, Write};
use std::path::Path;

use berth_api::{Context, CreateContext, RunCode, RunFrame};
use berth_client::{Client, ClientError};

use super::output;
use crate::cli::ContextCommand;

fn path(id: &str, rest: &str) -> String {
    format!("/v1/sandboxes/{}/contexts{rest}", berth_client::segment(id))
}

pub fn context(socket: &Path, cmd: ContextCommand) -> anyhow::Result<i32> {
    let client = Client::connect(socket)?;
    match cmd {
        ContextCommand::Create { id, language, cwd, env, json } => {
            let language = serde_json::from_value(serde_json::Value::String(language.clone())).map_err(|_| {
                anyhow::anyhow!("{language:?} is not a context language: use python, javascript or bash")
            })?;
            let req = CreateContext { language, cwd, env: env.into_iter().collect() };
            let (_, body) = client.post_json(&path(&id, ""), &req)?;
            if json {
                output::print_raw(&body)?;
            } else {
                println!("{}", berth_client::decode::<Context>(&body)?.id);
            }
            Ok(0)
        }
        ContextCommand::Ls { id, json } => {
            let (_, body) = client.get(&path(&id, ""))?;
            if json {
                output::print_raw(&body)?;
                return Ok(0);
            }
            let now = output::now_ms();
            let rows: Vec<Vec<String>> = berth_client::decode::<Vec<Context>>(&body)?
                .into_iter()
                .map(|c| {
                    vec![
                        c.id,
                        c.language.name().to_string(),
                        format!("{:?}", c.state).to_lowercase(),
                        c.execution_count.to_string(),
                        c.cwd,
                        output::age(c.created_at_ms, now),
                    ]
                })
                .collect();
            output::print_table(&["CONTEXT", "LANGUAGE", "STATE", "RUNS", "CWD", "AGE"], &rows)?;
            Ok(0)
        }
        ContextCommand::Run { id, context, code, timeout, max_output, env, json } => {
            let code = match code.as_deref() {
                None | Some("-") => {
                    let mut s = String::new();
                    std::io::stdin().read_to_string(&mut s)?;
                    s
                }
                Some(c) => c.to_string(),
            };
            let env = env.into_iter().collect();
            let req =
                RunCode { code, timeout_seconds: timeout.map(output::seconds), max_output_bytes: max_output, env };
            run(&client, &path(&id, &format!("/{}/run", berth_client::segment(&context))), &req, json)
        }
        ContextCommand::Interrupt { id, context } => {
            let (_, body) =
                client.post_json(&path(&id, &format!("/{}/interrupt", berth_client::segment(&context))), &())?;
            let v: serde_json::Value = berth_client::decode(&body)?;
            println!("{}", if v["interrupted"] == true { "interrupted" } else { "nothing was running" });
            Ok(0)
        }
        ContextCommand::Restart { id, context } => {
            client.post_json(&path(&id, &format!("/{}/restart", berth_client::segment(&context))), &())?;
            println!("{context}");
            Ok(0)
        }
        ContextCommand::Rm { id, contexts } => {
            let mut code = 0;
            for c in contexts {
                match client.delete(&path(&id, &format!("/{}", berth_client::segment(&c)))) {
                    Ok(_) => println!("{c}"),
                    Err(e) => {
                        eprintln!("berth: {e}");
                        code = 1;
                    }
                }
            }
            Ok(code)
        }
    }
}

/// Stream a run: output as it comes, the main result on stdout, an error's traceback on stderr.
fn run(client: &Client, path: &str, req: &RunCode, json: bool) -> anyhow::Result<i32> {
    let mut stream = client.post_json_stream(path, req)?;
    let (mut stdout, mut stderr) = (std::io::stdout(), std::io::stderr());
    let (mut failed, mut end) = (false, None);
    while let Some(line) = stream.next_line()? {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if json {
            stdout.write_all(&line)?;
            stdout.write_all(b"\n")?;
            stdout.flush()?;
        }
        let frame = match serde_json::from_slice::<RunFrame>(&line) {
            Ok(f) => f,
            Err(_) if serde_json::from_slice::<serde_json::Value>(&line).is_ok() => continue,
            Err(e) => return Err(ClientError::Protocol(format!("bad run frame ({e})")).into()),
        };
        match frame {
            RunFrame::End(e) => {
                end = Some(e);
                break;
            }
            RunFrame::Error { .. } => failed = true,
            _ => {}
        }
        if json {
            continue;
        }
        match &frame {
            RunFrame::Stdout { data } => stdout.write_all(data.as_bytes())?,
            RunFrame::Stderr { data } => stderr.write_all(data.as_bytes())?,
            RunFrame::Result { data, .. } => {
                if let Some(text) = data.get("text/plain").and_then(serde_json::Value::as_str) {
                    writeln!(stdout, "{text}")?;
                }
            }
            RunFrame::Error { name, value, traceback } => {
                if traceback.is_empty() {
                    writeln!(stderr, "{name}: {value}")?;
                } else {
                    stderr.write_all(traceback.as_bytes())?;
                }
            }
            RunFrame::Truncated { dropped_bytes } => {
                writeln!(stderr, "[… {dropped_bytes} bytes of output dropped here; the run's log keeps them …]")?
            }
            RunFrame::End(_) => {}
        }
        stdout.flush()?;
    }
    let Some(end) = end else {
        return Err(ClientError::Protocol("the run's stream ended without its end frame".into()).into());
    };
    Ok(if end.timed_out {
        124
    } else if end.interrupted {
        130
    } else if failed {
        1
    } else {
        0
    })
}
