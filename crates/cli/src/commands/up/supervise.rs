//! Keeping `up`'s processes running (the services, processes of this executable, and the local
//! API servers, processes of `tenantplane-local-apiserver`): each is restarted with the same
//! arguments when it exits unexpectedly.
//!
//! ```text
//!  start ──ready (GET /ready 200)──▶ running ──exits──▶ "restarting it (restart N) in D" ─┐
//!    ▲  └─exits, or not ready in 60 s: a failed start ───────────────────────────────────┤
//!    └──────────────────────────────── after D (1 s, doubling up to 30 s) ◀───────────────┘
//! ```
//!
//! The delay D doubles with each restart and starts again from 1 s once a process has run for a
//! minute; [`MAX_FAILED_STARTS`] failed starts in a row and the process is given up, which stops
//! `up` with the last lines of its log. Stopping is SIGTERM, then SIGKILL after a grace period;
//! once `up` is stopping, a process that exits (Ctrl-C reaches every process of the terminal)
//! is not restarted.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use anyhow::Context;
use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// How long a process gets to become ready after each start.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long each process gets to stop after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(15);
/// Starts in a row that end before the process is ready, after which `up` gives it up.
const MAX_FAILED_STARTS: u32 = 3;
/// How long an exited process waits for `up`'s own stop before it counts as a crash: Ctrl-C in a
/// terminal signals the whole process group, so the processes may exit just before `up` starts
/// stopping.
const STOPPING_TOGETHER: Duration = Duration::from_millis(500);
/// How long a process must have run, ready, for its restart delay to start again from the first.
const HEALTHY_RUN: Duration = Duration::from_secs(60);
/// The restart delays: 1 s, doubling up to 30 s.
const RESTART_DELAYS: ExponentialBuilder = ExponentialBuilder::new()
    .with_min_delay(Duration::from_secs(1))
    .with_max_delay(Duration::from_secs(30))
    .without_max_times();

/// How to start one process: `exe ARGS...`, its output appended to `log`.
#[derive(Debug, Clone)]
pub(super) struct ProcessSpec {
    /// What `up`'s messages call it: `planner service`, `host API server`.
    pub name: String,
    pub exe: PathBuf,
    pub args: Vec<String>,
    pub ready: Ready,
    pub log: PathBuf,
}

/// When a started process is ready: `GET http://ADDR/PATH` answers 200 and, when given, `file`
/// exists.
#[derive(Debug, Clone)]
pub(super) struct Ready {
    pub addr: String,
    pub path: &'static str,
    pub file: Option<PathBuf>,
}

/// The processes `up` keeps running.
#[derive(Debug)]
pub(super) struct Supervisor {
    /// In start order.
    processes: Vec<Supervised>,
    /// Where a keeper task sends the error of a process it gave up.
    gave_up: mpsc::UnboundedSender<anyhow::Error>,
    given_up: mpsc::UnboundedReceiver<anyhow::Error>,
    /// True once `up` is stopping: an exit is then part of it, not a crash.
    stopping: watch::Sender<bool>,
}

/// One process's keeper task.
#[derive(Debug)]
struct Supervised {
    stop: oneshot::Sender<()>,
    /// True once the service was first ready.
    ready: watch::Receiver<bool>,
    task: JoinHandle<()>,
}

impl Supervisor {
    /// Supervises nothing yet.
    pub(super) fn new() -> Supervisor {
        let (gave_up, given_up) = mpsc::unbounded_channel();
        Supervisor {
            processes: Vec::new(),
            gave_up,
            given_up,
            stopping: watch::channel(false).0,
        }
    }

    /// Starts processes, in order, each kept running by a task of its own.
    pub(super) fn start(&mut self, specs: Vec<ProcessSpec>) {
        for spec in specs {
            let (stop, stopped) = oneshot::channel();
            let (ready_tx, ready) = watch::channel(false);
            let gave_up = self.gave_up.clone();
            let stopping = self.stopping.subscribe();
            let task = tokio::spawn(async move {
                if let Err(e) = keep_running(&spec, stopped, stopping, ready_tx).await {
                    let _ = gave_up.send(e);
                }
            });
            self.processes.push(Supervised { stop, ready, task });
        }
    }

    /// Resolves once every process started has been ready, or with the error of a process
    /// given up.
    pub(super) async fn ready(&mut self) -> anyhow::Result<()> {
        let Supervisor {
            processes,
            given_up,
            ..
        } = self;
        let all_ready = async {
            for process in processes {
                // An error: its task ended, which `given_up` reports.
                if process.ready.wait_for(|ready| *ready).await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::select! {
            () = all_ready => Ok(()),
            e = first_given_up(given_up) => Err(e),
        }
    }

    /// Resolves with the error of the first process given up.
    pub(super) async fn given_up(&mut self) -> anyhow::Error {
        first_given_up(&mut self.given_up).await
    }

    /// Stops the processes in reverse order (the syncer first, so that nothing is planned
    /// without a planner; the clusters last), each within its grace period.
    pub(super) async fn stop(self) {
        self.stopping.send_replace(true);
        for process in self.processes.into_iter().rev() {
            let _ = process.stop.send(());
            let _ = process.task.await;
        }
    }
}

/// The first error of a process given up; pending while none is.
async fn first_given_up(given_up: &mut mpsc::UnboundedReceiver<anyhow::Error>) -> anyhow::Error {
    match given_up.recv().await {
        Some(e) => e,
        // The supervisor holds a sender: never.
        None => std::future::pending().await,
    }
}

/// Resolves once `up` is stopping.
async fn stopping(stopping: &mut watch::Receiver<bool>) {
    // An error: the supervisor is gone, which only stopping does.
    let _ = stopping.wait_for(|stopping| *stopping).await;
}

/// How one run of a service ended.
enum RunEnd {
    /// `up` is stopping: the service was stopped.
    Stopped,
    /// It exited (or was killed for not becoming ready); `ready_for` is how long it had been
    /// ready, `None` if it never was.
    Ended {
        what: String,
        ready_for: Option<Duration>,
    },
}

/// Runs `spec` until `stop`, restarting it with backoff unless `up` is stopping; an error once it
/// failed to start [`MAX_FAILED_STARTS`] times in a row.
async fn keep_running(
    spec: &ProcessSpec,
    mut stop: oneshot::Receiver<()>,
    mut up_stopping: watch::Receiver<bool>,
    ready: watch::Sender<bool>,
) -> anyhow::Result<()> {
    let mut delays = RESTART_DELAYS.build();
    let mut restarts = 0u32;
    let mut failed_starts = 0u32;
    loop {
        let (what, ready_for) = match run_once(spec, &mut stop, &ready).await? {
            RunEnd::Stopped => return Ok(()),
            RunEnd::Ended { what, ready_for } => (what, ready_for),
        };
        tokio::select! {
            _ = &mut stop => return Ok(()),
            () = stopping(&mut up_stopping) => return Ok(()),
            () = tokio::time::sleep(STOPPING_TOGETHER) => {}
        }
        let before_ready = match ready_for {
            Some(ran) => {
                failed_starts = 0;
                if ran >= HEALTHY_RUN {
                    delays = RESTART_DELAYS.build();
                }
                ""
            }
            None => {
                failed_starts += 1;
                if failed_starts >= MAX_FAILED_STARTS {
                    anyhow::bail!(
                        "the {} {what} before it was ready, {failed_starts} starts in a row; last \
                         lines of {}:\n{}",
                        spec.name,
                        spec.log.display(),
                        log_tail(&spec.log)
                    );
                }
                " before it was ready"
            }
        };
        restarts += 1;
        let delay = next_delay(&mut delays);
        eprintln!(
            "tenantplane up: the {} {what}{before_ready}; restarting it (restart {restarts}) in \
             {delay:?}",
            spec.name
        );
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            _ = &mut stop => return Ok(()),
            () = stopping(&mut up_stopping) => return Ok(()),
        }
    }
}

/// The next restart delay.
fn next_delay(delays: &mut ExponentialBackoff) -> Duration {
    delays
        .next()
        .expect("the restart delays have no limit on their number")
}

/// Starts the process once and waits until it ends or `stop` says to stop it.
async fn run_once(
    spec: &ProcessSpec,
    stop: &mut oneshot::Receiver<()>,
    ready: &watch::Sender<bool>,
) -> anyhow::Result<RunEnd> {
    let mut child = spawn(spec)?;
    let started = tokio::select! {
        became_ready = wait_ready(&spec.ready) => became_ready,
        status = child.wait() => {
            return Ok(RunEnd::Ended { what: exited(status), ready_for: None });
        }
        _ = &mut *stop => {
            stop_child(&spec.name, &mut child).await;
            return Ok(RunEnd::Stopped);
        }
    };
    if !started {
        stop_child(&spec.name, &mut child).await;
        return Ok(RunEnd::Ended {
            what: format!(
                "was not ready within {}s (GET http://{}{}{})",
                READY_TIMEOUT.as_secs(),
                spec.ready.addr,
                spec.ready.path,
                match &spec.ready.file {
                    Some(file) => format!(", {}", file.display()),
                    None => String::new(),
                }
            ),
            ready_for: None,
        });
    }
    ready.send_replace(true);
    let ready_at = Instant::now();
    tokio::select! {
        status = child.wait() => Ok(RunEnd::Ended {
            what: exited(status),
            ready_for: Some(ready_at.elapsed()),
        }),
        _ = &mut *stop => {
            stop_child(&spec.name, &mut child).await;
            Ok(RunEnd::Stopped)
        }
    }
}

/// `exited (signal: 9 (SIGKILL))` and the like.
fn exited(status: std::io::Result<ExitStatus>) -> String {
    match status {
        Ok(status) => format!("exited ({status})"),
        Err(e) => format!("could not be waited for ({e})"),
    }
}

/// Starts the process, its stdout and stderr appended to its log.
fn spawn(spec: &ProcessSpec) -> anyhow::Result<Child> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&spec.log)
        .with_context(|| format!("opening {}", spec.log.display()))?;
    Command::new(&spec.exe)
        .args(&spec.args)
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting the {} ({})", spec.name, spec.exe.display()))
}

/// SIGTERM, then SIGKILL after the grace period.
async fn stop_child(name: &str, child: &mut Child) {
    if let Some(pid) = child.id() {
        let _ = kill(Pid::from_raw(pid as i32), Signal::SIGTERM);
    }
    if tokio::time::timeout(STOP_GRACE, child.wait())
        .await
        .is_err()
    {
        eprintln!(
            "tenantplane up: the {name} did not stop within {}s; killing it",
            STOP_GRACE.as_secs()
        );
        let _ = child.kill().await;
    }
}

/// The last lines of a process's log.
fn log_tail(log: &Path) -> String {
    std::fs::read_to_string(log)
        .map(|text| {
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(10)..].join("\n")
        })
        .unwrap_or_default()
}

/// Polls until the process is `ready` (true) or [`READY_TIMEOUT`] passes (false).
async fn wait_ready(ready: &Ready) -> bool {
    let deadline = Instant::now() + READY_TIMEOUT;
    while Instant::now() < deadline {
        if ready.file.as_ref().is_none_or(|file| file.exists())
            && http_status(&ready.addr, ready.path).await == Some(200)
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// The status code of a plain HTTP/1.0 GET, if the server answers.
async fn http_status(addr: &str, path: &str) -> Option<u16> {
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.ok()?;
    let status_line = String::from_utf8_lossy(&response);
    status_line.split_whitespace().nth(1)?.parse().ok()
}
