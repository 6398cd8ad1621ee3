//! A PostgreSQL server for tests: `TENANTPLANE_TEST_POSTGRES_URL` when set (CI starts one),
//! otherwise a throwaway cluster started here from `initdb`/`postgres` found in `PATH` or in
//! `/usr/lib/postgresql/*/bin`, stopped and its files removed when the test process exits. Each
//! test gets its own database. Without either, PostgreSQL tests are skipped with a message,
//! unless `TENANTPLANE_REQUIRE_POSTGRES=1`, when they fail.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The env var naming a server to use (a URL whose database the user may create others from).
pub const URL_VAR: &str = "TENANTPLANE_TEST_POSTGRES_URL";

static SERVER: OnceLock<Option<String>> = OnceLock::new();
static WATCHDOG: OnceLock<Mutex<Child>> = OnceLock::new();

/// A URL to a fresh, empty database, or `None` when no PostgreSQL is available.
pub async fn fresh_database() -> Option<String> {
    let base = SERVER.get_or_init(server).clone();
    let Some(base) = base else {
        assert!(
            std::env::var("TENANTPLANE_REQUIRE_POSTGRES").as_deref() != Ok("1"),
            "PostgreSQL is required: set {URL_VAR} or install PostgreSQL"
        );
        eprintln!("skipping PostgreSQL: set {URL_VAR} or install PostgreSQL");
        return None;
    };
    let name = format!("tp_{}", uuid::Uuid::now_v7().simple());
    let (client, conn) = tokio_postgres::connect(&base, tokio_postgres::NoTls)
        .await
        .expect("connect to the test PostgreSQL");
    tokio::spawn(conn);
    client
        .execute(&format!("CREATE DATABASE {name}"), &[])
        .await
        .expect("create a test database");
    Some(with_database(&base, &name))
}

/// `url` with its database replaced by `name`.
fn with_database(url: &str, name: &str) -> String {
    let (before_query, query) = url.split_once('?').map_or((url, ""), |(a, b)| (a, b));
    let authority_end = before_query
        .find("://")
        .map(|i| i + 3)
        .and_then(|start| before_query[start..].find('/').map(|j| start + j))
        .unwrap_or(before_query.len());
    let mut out = format!("{}/{name}", &before_query[..authority_end]);
    if !query.is_empty() {
        out.push('?');
        out.push_str(query);
    }
    out
}

fn server() -> Option<String> {
    if let Ok(url) = std::env::var(URL_VAR) {
        return Some(url);
    }
    let bin = find_bin_dir()?;
    Some(start_cluster(&bin))
}

fn find_bin_dir() -> Option<PathBuf> {
    let in_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>());
    let debian = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"));
    in_path
        .chain(debian)
        .find(|dir| dir.join("initdb").is_file() && dir.join("postgres").is_file())
}

/// Runs `initdb` as the unprivileged `postgres` user when we are root (it refuses root).
fn initdb(bin: &Path, as_postgres: bool) -> Command {
    if as_postgres {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(bin.join("initdb"));
        c
    } else {
        Command::new(bin.join("initdb"))
    }
}

fn start_cluster(bin: &Path) -> String {
    let as_postgres = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    let dir = tempfile::Builder::new()
        .prefix("tenantplane-pg-")
        .tempdir()
        .expect("tempdir")
        .keep();
    if as_postgres {
        let ok = Command::new("chown")
            .args(["-R", "postgres"])
            .arg(&dir)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "chown the test cluster directory to postgres");
    }
    let data = dir.join("data");
    let status = initdb(bin, as_postgres)
        .args(["-U", "tenantplane", "--auth=trust", "-E", "UTF8", "-D"])
        .arg(&data)
        .stdout(Stdio::null())
        .status()
        .expect("run initdb");
    assert!(status.success(), "initdb failed");
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    // A watchdog shell starts postgres, and stops it and removes its directory when this test
    // process exits.
    let runuser = if as_postgres {
        "runuser -u postgres -- "
    } else {
        ""
    };
    let script = format!(
        "exec 2>/dev/null; {runuser}'{postgres}' -D '{data}' -h 127.0.0.1 -p {port} -k '{dir}' -F \
         -c max_connections=200 >/dev/null 2>&1 & pg=$!; \
         while kill -0 {parent} 2>/dev/null; do sleep 1; done; kill -TERM $pg; wait $pg; \
         rm -rf '{dir}'",
        postgres = bin.join("postgres").display(),
        data = data.display(),
        dir = dir.display(),
        parent = std::process::id(),
    );
    let watchdog = Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .spawn()
        .expect("start postgres");
    // Kept, never waited for: it outlives the tests by design.
    WATCHDOG.get_or_init(|| Mutex::new(watchdog));
    let url = format!("postgres://tenantplane@127.0.0.1:{port}/postgres");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "postgres did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Accepting TCP comes a moment before accepting logins.
    std::thread::sleep(Duration::from_millis(500));
    url
}
