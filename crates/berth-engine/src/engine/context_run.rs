//! One run of code in a context: send it to the interpreter, pass its frames on through the exec model's
//! output budget (and whole into the run's log), enforce its timeout, and report how it ended.

use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_api::{RunCode, RunEnd, RunFrame, Stream};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use super::contexts::{Ctx, Reach, connect, control};
use super::{Engine, Live, now_ms};
use crate::EngineError;
use crate::exec_log::ExecLog;
use crate::output_budget::OutputBudget;
use crate::sleep_until;

/// Largest frame an interpreter may send (a result with a big image, say).
const MAX_FRAME: u64 = 16 << 20;
/// How long code has to stop once interrupted by its timeout before its interpreter is killed.
const GRACE: Duration = Duration::from_secs(3);
/// Run logs kept per context; older ones go.
const KEEP_LOGS: u64 = 16;
/// Largest code accepted for one run.
pub const MAX_CODE: usize = 512 * 1024;

impl Engine {
    /// Start a run; its frames arrive on the channel returned, the last one `end`.
    pub async fn run_context(
        &self,
        id: &str,
        ctx: &str,
        req: RunCode,
    ) -> Result<mpsc::Receiver<RunFrame>, EngineError> {
        if req.code.len() > MAX_CODE {
            return Err(EngineError::invalid(format!(
                "the code is {} bytes; at most {MAX_CODE} are run at once",
                req.code.len()
            )));
        }
        if let Some(t) = req.timeout_seconds.filter(|t| !(*t > 0.0 && *t <= berth_api::MAX_DURATION_SECONDS)) {
            return Err(EngineError::invalid(format!(
                "timeout_seconds must be positive and at most {} (100 years), not {t}",
                berth_api::MAX_DURATION_SECONDS
            )));
        }
        let max_output = req.max_output_bytes.unwrap_or(crate::exec::DEFAULT_MAX_OUTPUT);
        if max_output < 64 {
            return Err(EngineError::invalid("max_output_bytes must be at least 64"));
        }
        self.live_or_wake(id, "context").await?;
        let (live, c) = self.context(id, ctx).await?;
        self.touch(&live, "context").await?;
        let guard = Arc::clone(&c.run).try_lock_owned().map_err(|_| {
            EngineError::Conflict(format!(
                "context {ctx} is running code: wait for that run to end, or interrupt it (POST .../interrupt)"
            ))
        })?;
        let r = c.snapshot();
        self.journal_room(&r.sandbox_id, live.journal_bytes(), "no code is run")?;
        let mut conn = connect(&Reach::of(&live, r.init_pid).await, &r.id, "sock").await?;
        for (k, v) in &req.env {
            berth_runtime::spec::check_env(k, v).map_err(|e| EngineError::invalid(e.to_string()))?;
        }
        let body = serde_json::json!({"code": req.code, "env": req.env}).to_string() + "\n";
        conn.write_all(body.as_bytes())
            .await
            .map_err(|e| EngineError::Conflict(format!("the context's interpreter cannot be reached: {e}")))?;
        let n = r.execution_count + 1;
        let logs = self.root.join("logs").join(&r.sandbox_id);
        let log_path = logs.join(format!("{}-{n}.log", r.id));
        let _ = tokio::fs::remove_file(logs.join(format!("{}-{}.log", r.id, n.saturating_sub(KEEP_LOGS)))).await;
        let file = tokio::fs::File::create(&log_path).await.map_err(EngineError::Log)?;
        live.note(
            "context_run",
            serde_json::json!({"context": r.id, "code_bytes": req.code.len(), "timeout_seconds": req.timeout_seconds,
                               "max_output_bytes": max_output}),
            serde_json::json!({"log": log_path}),
        );
        let (tx, rx) = mpsc::channel(256);
        let engine = self.this.get().and_then(std::sync::Weak::upgrade).ok_or(EngineError::InitGone)?;
        let log = ExecLog::new(file, self.bounds.max_log_bytes);
        let timeout = req.timeout_seconds.map(Duration::from_secs_f64);
        tokio::spawn(async move {
            let run = Run {
                engine,
                live,
                ctx: c,
                budget: OutputBudget::new(max_output),
                log: Some(log),
                tx: Some(tx),
                total: 0,
            };
            let (engine, live) = (Arc::clone(&run.engine), Arc::clone(&run.live));
            run.pump(conn, timeout, log_path).await;
            drop(guard);
            // The sandbox's idle clocks start again from the run's end.
            live.record.lock().await.last_activity_ms = now_ms();
            engine.wake_reaper();
        });
        Ok(rx)
    }
}

struct Run {
    engine: Arc<Engine>,
    live: Arc<Live>,
    ctx: Arc<Ctx>,
    budget: OutputBudget,
    log: Option<ExecLog>,
    tx: Option<mpsc::Sender<RunFrame>>,
    total: u64,
}

impl Run {
    async fn send(&mut self, frame: RunFrame) {
        // A client that stops reading must not stall the run: after a while it is treated as gone.
        if let Some(tx) = &self.tx
            && !matches!(tokio::time::timeout(Duration::from_secs(10), tx.send(frame)).await, Ok(Ok(())))
        {
            self.tx = None;
        }
    }

    async fn output(&mut self, stream: Stream, data: &str, redact: &mut Option<[berth_secrets::Redactor; 2]>) {
        let raw = data.as_bytes();
        self.total += raw.len() as u64;
        let cleaned;
        let bytes = match redact.as_mut() {
            Some(r) => {
                cleaned = r[usize::from(stream == Stream::Stderr)].push(raw);
                &cleaned[..]
            }
            None => raw,
        };
        if let Some(log) = self.log.as_mut() {
            let _ = log.write(stream, bytes).await;
        }
        if let Some(live) = self.budget.push(stream, bytes) {
            let data = String::from_utf8_lossy(&live).into_owned();
            self.send(if stream == Stream::Stdout { RunFrame::Stdout { data } } else { RunFrame::Stderr { data } })
                .await;
        }
    }

    async fn pump(mut self, conn: tokio::net::UnixStream, timeout: Option<Duration>, log_path: std::path::PathBuf) {
        let started = Instant::now();
        let r = self.ctx.snapshot();
        let redactor = self.live.redactor.clone().filter(|x| !x.is_empty());
        let mut redact = redactor.clone().map(|x| [x.clone(), x]);
        let mut lines = BufReader::new(conn);
        let mut deadline = timeout.map(|t| tokio::time::Instant::now() + t);
        let (timed_from, paused_from) = (tokio::time::Instant::now(), self.live.pause.paused_ms());
        let (mut timed_out, mut killed) = (false, false);
        let mut end: Option<(u64, bool)> = None;
        let mut grace: Option<tokio::time::Instant> = None;
        let mut line = Vec::new();
        loop {
            line.clear();
            let read = async { (&mut lines).take(MAX_FRAME).read_until(b'\n', &mut line).await };
            let got = tokio::select! {
                r = read => Some(r),
                _ = sleep_until(deadline), if deadline.is_some() && !timed_out => {
                    // Time paused is given back, as for an exec's timeout.
                    let left = timeout.and_then(|t| super::pause::remaining(&self.live.pause, timed_from, paused_from, t));
                    if let Some(left) = left {
                        deadline = Some(tokio::time::Instant::now() + left);
                    } else {
                        timed_out = true;
                        grace = Some(tokio::time::Instant::now() + GRACE);
                        let _ = control(&Reach::of(&self.live, r.init_pid).await, &r.id, "interrupt").await;
                    }
                    None
                }
                _ = sleep_until(grace), if grace.is_some() => {
                    killed = true;
                    break;
                }
            };
            let Some(got) = got else { continue };
            match got {
                Ok(0) | Err(_) => break,
                Ok(_) if !line.ends_with(b"\n") => {
                    // Past the frame bound, or a partial line at the end: the interpreter cannot be trusted to be
                    // in step any more.
                    killed = true;
                    break;
                }
                Ok(_) => {}
            }
            let text = match &redactor {
                Some(x) => x.redact_bytes(&line),
                None => line.clone(),
            };
            let Ok(frame) = serde_json::from_slice::<serde_json::Value>(&text) else { continue };
            match frame["type"].as_str() {
                Some("stdout") => self.output(Stream::Stdout, frame["data"].as_str().unwrap_or(""), &mut redact).await,
                Some("stderr") => self.output(Stream::Stderr, frame["data"].as_str().unwrap_or(""), &mut redact).await,
                Some("end") => {
                    end = Some((frame["execution_count"].as_u64().unwrap_or(0), frame["interrupted"] == true));
                    break;
                }
                Some("result") | Some("error") => {
                    if let Ok(f) = serde_json::from_value::<RunFrame>(frame) {
                        self.send(f).await;
                    }
                }
                _ => {}
            }
        }
        if let Some(r) = redact.as_mut() {
            for stream in [Stream::Stdout, Stream::Stderr] {
                let tail = r[usize::from(stream == Stream::Stderr)].finish();
                if !tail.is_empty() {
                    if let Some(log) = self.log.as_mut() {
                        let _ = log.write(stream, &tail).await;
                    }
                    if let Some(live) = self.budget.push(stream, &tail) {
                        let data = String::from_utf8_lossy(&live).into_owned();
                        let f = if stream == Stream::Stdout {
                            RunFrame::Stdout { data }
                        } else {
                            RunFrame::Stderr { data }
                        };
                        self.send(f).await;
                    }
                }
            }
        }
        let dropped = self.budget.dropped();
        if dropped > 0 {
            self.send(RunFrame::Truncated { dropped_bytes: dropped }).await;
        }
        for (stream, chunk) in self.budget.finish() {
            let data = String::from_utf8_lossy(&chunk).into_owned();
            self.send(if stream == Stream::Stdout { RunFrame::Stdout { data } } else { RunFrame::Stderr { data } })
                .await;
        }
        let (count, interrupted) = match end {
            Some(e) => e,
            None => {
                // No end frame: the interpreter died, or would not stop. Whatever it held is gone; a fresh one
                // takes its place so that the context stays usable.
                killed = true;
                let why = if timed_out {
                    format!("the code did not stop within {} s of its timeout's interrupt", GRACE.as_secs())
                } else {
                    "the interpreter ended during the run".to_string()
                };
                let restarted = self.engine.replace_interpreter(&self.ctx).await;
                let value = match restarted {
                    Ok(()) => format!("{why}: it was killed and started afresh; its variables and imports are lost"),
                    Err(e) => format!("{why}, and a fresh interpreter could not be started: {e}"),
                };
                self.send(RunFrame::Error { name: "ContextKilled".into(), value, traceback: String::new() }).await;
                (0, false)
            }
        };
        let log_bytes_dropped = match self.log.take() {
            Some(log) => log.finish().await,
            None => 0,
        };
        let result = RunEnd {
            execution_count: count,
            duration_ms: started.elapsed().as_millis() as u64,
            interrupted: interrupted || timed_out,
            timed_out,
            killed,
            output_bytes: self.total,
            bytes_dropped: dropped,
        };
        if !killed {
            self.ctx.update(|rec| {
                rec.execution_count = count;
                rec.last_run_at_ms = Some(now_ms());
            });
        }
        self.engine.save_contexts(&r.sandbox_id).await;
        {
            let mut rec = self.live.record.lock().await;
            rec.last_activity_ms = now_ms();
            rec.last_activity = Some("context".into());
        }
        let digest = crate::journal::file_digest_async(log_path.clone()).await;
        self.live.note(
            "context_run_finished",
            serde_json::json!({"context": r.id}),
            serde_json::json!({"result": result, "log": log_path, "log_sha256": digest, "log_bytes_dropped": log_bytes_dropped}),
        );
        self.send(RunFrame::End(result)).await;
    }
}
