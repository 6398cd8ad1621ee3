//! Keeping `up`'s services running: each is a process of this executable, restarted with the
//! same flags when it exits unexpectedly.
//!
//! ```text
//!  start ──ready (GET /ready 200)──▶ running ──exits──▶ "restarting it (restart N) in D" ─┐
//!    ▲  └─exits, or not ready in 60 s: a failed start ───────────────────────────────────┤
//!    └──────────────────────────────── after D (1 s, doubling up to 30 s) ◀───────────────┘
//! ```
//!
//! The delay D doubles with each restart and starts again from 1 s once a service has run for a
//! minute; [`MAX_FAILED_STARTS`] failed starts in a row and the service is given up, which stops
//! `up` with the last lines of the service's log. Stopping is SIGTERM, then SIGKILL after a
//! grace period.

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

/// How long a service gets to become ready after each start.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long each service gets to stop after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(15);
/// Starts in a row that end before the service is ready, after which `up` gives it up.
const MAX_FAILED_STARTS: u32 = 3;
/// How long an exited service waits for `up`'s own stop before it counts as a crash: Ctrl-C in a
/// terminal signals the whole process group, so the services may exit just before `up` stops
/// them.
const STOPPING_TOGETHER: Duration = Duration::from_millis(500);
/// How long a service must have run, ready, for its restart delay to start again from the first.
const HEALTHY_RUN: Duration = Duration::from_secs(60);
/// The restart delays: 1 s, doubling up to 30 s.
const RESTART_DELAYS: ExponentialBuilder = ExponentialBuilder::new()
    .with_min_delay(Duration::from_secs(1))
    .with_max_delay(Duration::from_secs(30))
    .without_max_times();

/// How to start one service: the `service NAME FLAGS...` subcommand of `exe`, its output
/// appended to `log`, ready when `GET http://ADMIN/ready` answers 200.
#[derive(Debug, Clone)]
pub(super) struct ServiceSpec {
    pub name: &'static str,
    pub exe: PathBuf,
    pub flags: Vec<String>,
    pub admin: String,
    pub log: PathBuf,
}

/// The services `up` keeps running.
#[derive(Debug)]
pub(super) struct Supervisor {
    /// In start order.
    services: Vec<Supervised>,
    /// The error of a service given up.
    given_up: mpsc::Receiver<anyhow::Error>,
}

/// One service's keeper task.
#[derive(Debug)]
struct Supervised {
    stop: oneshot::Sender<()>,
    /// True once the service was first ready.
    ready: watch::Receiver<bool>,
    task: JoinHandle<()>,
}

impl Supervisor {
    /// Starts every service, in order, each kept running by a task of its own.
    pub(super) fn start(specs: Vec<ServiceSpec>) -> Supervisor {
        let (gave_up, given_up) = mpsc::channel(specs.len().max(1));
        let services = specs
            .into_iter()
            .map(|spec| {
                let (stop, stopped) = oneshot::channel();
                let (ready_tx, ready) = watch::channel(false);
                let gave_up = gave_up.clone();
                let task = tokio::spawn(async move {
                    if let Err(e) = keep_running(&spec, stopped, ready_tx).await {
                        let _ = gave_up.send(e).await;
                    }
                });
                Supervised { stop, ready, task }
            })
            .collect();
        Supervisor { services, given_up }
    }

    /// Resolves once every service has been ready, or with the error of a service given up.
    pub(super) async fn ready(&mut self) -> anyhow::Result<()> {
        let Supervisor { services, given_up } = self;
        let all_ready = async {
            for service in services {
                // An error: its task ended, which `given_up` reports.
                if service.ready.wait_for(|ready| *ready).await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::select! {
            () = all_ready => Ok(()),
            e = first_given_up(given_up) => Err(e),
        }
    }

    /// Resolves with the error of the first service given up.
    pub(super) async fn given_up(&mut self) -> anyhow::Error {
        first_given_up(&mut self.given_up).await
    }

    /// Stops the services in reverse order (the syncer first, so that nothing is planned without
    /// a planner), each within its grace period.
    pub(super) async fn stop(self) {
        for service in self.services.into_iter().rev() {
            let _ = service.stop.send(());
            let _ = service.task.await;
        }
    }
}

/// The first error of a service given up; pending while none is.
async fn first_given_up(given_up: &mut mpsc::Receiver<anyhow::Error>) -> anyhow::Error {
    match given_up.recv().await {
        Some(e) => e,
        // Every keeper task ended without giving up: only stopping does that.
        None => std::future::pending().await,
    }
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

/// Runs `spec` until `stop`, restarting it with backoff; an error once it failed to start
/// [`MAX_FAILED_STARTS`] times in a row.
async fn keep_running(
    spec: &ServiceSpec,
    mut stop: oneshot::Receiver<()>,
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
                        "the {} service {what} before it was ready, {failed_starts} starts in a \
                         row; last lines of {}:\n{}",
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
            "tenantplane up: the {} service {what}{before_ready}; restarting it (restart \
             {restarts}) in {delay:?}",
            spec.name
        );
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            _ = &mut stop => return Ok(()),
        }
    }
}

/// The next restart delay.
fn next_delay(delays: &mut ExponentialBackoff) -> Duration {
    delays
        .next()
        .expect("the restart delays have no limit on their number")
}

/// Starts the service once and waits until it ends or `stop` says to stop it.
async fn run_once(
    spec: &ServiceSpec,
    stop: &mut oneshot::Receiver<()>,
    ready: &watch::Sender<bool>,
) -> anyhow::Result<RunEnd> {
    let mut child = spawn(spec)?;
    let started = tokio::select! {
        became_ready = wait_ready(&spec.admin) => became_ready,
        status = child.wait() => {
            return Ok(RunEnd::Ended { what: exited(status), ready_for: None });
        }
        _ = &mut *stop => {
            stop_child(spec.name, &mut child).await;
            return Ok(RunEnd::Stopped);
        }
    };
    if !started {
        stop_child(spec.name, &mut child).await;
        return Ok(RunEnd::Ended {
            what: format!(
                "was not ready within {}s (GET http://{}/ready)",
                READY_TIMEOUT.as_secs(),
                spec.admin
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
            stop_child(spec.name, &mut child).await;
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

/// Starts the service process, its stdout and stderr appended to its log.
fn spawn(spec: &ServiceSpec) -> anyhow::Result<Child> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&spec.log)
        .with_context(|| format!("opening {}", spec.log.display()))?;
    Command::new(&spec.exe)
        .arg("service")
        .arg(spec.name)
        .args(&spec.flags)
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting the {} service", spec.name))
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
            "tenantplane up: {name} did not stop within {}s; killing it",
            STOP_GRACE.as_secs()
        );
        let _ = child.kill().await;
    }
}

/// The last lines of a service's log.
fn log_tail(log: &Path) -> String {
    std::fs::read_to_string(log)
        .map(|text| {
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(10)..].join("\n")
        })
        .unwrap_or_default()
}

/// Polls `GET /ready` on a service's admin port until it answers 200 (true) or
/// [`READY_TIMEOUT`] passes (false).
async fn wait_ready(admin: &str) -> bool {
    let deadline = Instant::now() + READY_TIMEOUT;
    while Instant::now() < deadline {
        if http_status(admin, "/ready").await == Some(200) {
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
