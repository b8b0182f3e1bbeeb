//! `berth exec`: run a command in a sandbox the daemon keeps, streaming its output back.

use std::io::{self, Write};
use std::path::Path;

use berth_api::{ExecFrame, ExecInfo, ExecRequest, Stream};
use berth_client::{Client, ClientError};

use super::output;
use crate::cli::ExecArgs;
use crate::exit;

pub fn exec(socket: &Path, args: ExecArgs) -> anyhow::Result<i32> {
    let request = ExecRequest {
        argv: args.command,
        env: args.env.into_iter().collect(),
        workdir: args.workdir,
        timeout_seconds: args.timeout.map(output::seconds),
        max_output_bytes: args.max_output,
        max_log_bytes: args.max_log_bytes,
        detach: args.detach,
        stdin: if args.interactive {
            let mut data = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut data)?;
            Some(data)
        } else {
            None
        },
        stdin_open: false,
        user: args.user,
    };
    let client = Client::connect(socket)?;
    let path = format!("/v1/sandboxes/{}/execs", berth_client::segment(&args.id));
    if args.detach {
        let (_, body) = client.post_json(&path, &request)?;
        if args.json {
            output::print_raw(&body)?;
        } else {
            let info: ExecInfo = berth_client::decode(&body)?;
            println!("{}", info.exec_id);
        }
        return Ok(0);
    }
    let mut stream = client.post_json_stream(&path, &request)?;
    let (mut stdout, mut stderr) = (io::stdout(), io::stderr());
    while let Some(line) = stream.next_line()? {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let frame = match serde_json::from_slice::<ExecFrame>(&line) {
            Ok(frame) => Some(frame),
            // A frame type this client does not know yet is skipped; anything else is a broken stream.
            Err(_) if serde_json::from_slice::<serde_json::Value>(&line).is_ok() => None,
            Err(e) => return Err(ClientError::Protocol(format!("bad exec frame ({e})")).into()),
        };
        if args.json {
            stdout.write_all(&line)?;
            stdout.write_all(b"\n")?;
            stdout.flush()?;
            if let Some(ExecFrame::Exit(result)) = frame {
                finish(&mut stream);
                return Ok(result.exit_code);
            }
            continue;
        }
        match frame {
            Some(ExecFrame::Output { stream: Stream::Stdout, data, .. }) => {
                stdout.write_all(data.as_bytes())?;
                stdout.flush()?;
            }
            Some(ExecFrame::Output { stream: Stream::Stderr, data, .. }) => {
                stderr.write_all(data.as_bytes())?;
                stderr.flush()?;
            }
            Some(ExecFrame::Truncated { dropped_bytes }) => {
                stdout.flush()?;
                writeln!(stderr, "[… {dropped_bytes} bytes dropped …]")?;
                stderr.flush()?;
            }
            Some(ExecFrame::Exit(result)) => {
                stdout.flush()?;
                if let Some(error) = &result.error {
                    eprintln!("berth: {error}");
                } else if result.timed_out {
                    eprintln!("berth: the command timed out; everything it started was killed");
                } else if result.killed {
                    eprintln!("berth: the command was killed");
                }
                finish(&mut stream);
                return Ok(result.exit_code);
            }
            Some(ExecFrame::Started { .. }) | None => {}
        }
    }
    eprintln!("berth: the daemon ended the exec's stream before the command ended");
    Ok(exit::BERTH_FAILED)
}

/// Read the response to its end after the exit frame, so that the daemon sees a client that heard it out
/// rather than one that hung up; what (if anything) follows the exit frame does not matter.
fn finish(stream: &mut berth_client::Streaming) {
    let _ = io::copy(stream, &mut io::sink());
}
