//! explain-sync over a realistic export, end to end through the `tenantplane` binary, beside the
//! cost of only parsing the same input, measured in the same run.
//!
//! `cargo bench -p tenantplane-cli --bench explain_sync` writes a cluster export of 100,000
//! tenant objects (`--objects`), deterministic from `--seed`: Deployments, the pods of their
//! ReplicaSets (three containers with env, probes and volume mounts; configMap, secret, emptyDir
//! and projected token volumes; ownerReferences; status; one pod in eight on the host network,
//! which the default policy refuses), Services and ConfigMaps of a few KiB, grouped by kind as
//! `kubectl get -o json` lists them. It writes the export as a JSON `v1 List` (kubectl's layout
//! and indentation) and as multi-document YAML, then, `--runs` times and for each format, runs:
//!
//! - **parse only**, the baseline: a process that reads the file and parses every document with
//!   the reader explain-sync uses (`tenantplane_core::documents`), on as many cores, dropping
//!   each one;
//! - **explain-sync** as a user runs it, the table and `-o json`, output to /dev/null.
//!
//! Each is a child process of its own, so that its peak RSS (`ru_maxrss`) and its CPU time (user
//! and system) are its own. It prints each measurement, then the medians: wall time, CPU time,
//! peak RSS, RSS ÷ input size, and wall and CPU time ÷ the parse-only run's of the same round and
//! format (the CPU ratio moves much less with the machine's load than the wall ratio).

use std::convert::Infallible;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::{Value, json};
use tenantplane_core::documents::Reader;

/// The baseline runs in a process of this benchmark: the same allocator as the `tenantplane`
/// binary.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
struct Args {
    /// Tenant objects in the export.
    #[arg(long, default_value_t = 100_000)]
    objects: usize,
    /// Seed of the export's names, sizes and choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Rounds of measurements (each: parse only, then explain-sync, per format).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Write the export here and keep it (default: a temporary directory).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Formats to measure.
    #[arg(long, value_delimiter = ',', default_value = "json,yaml")]
    formats: Vec<String>,
    /// explain-sync outputs to measure.
    #[arg(long, value_delimiter = ',', default_value = "table,json")]
    outputs: Vec<String>,
    /// Only write the export.
    #[arg(long)]
    generate_only: bool,
    /// Internal: parse FILE as explain-sync reads it and drop every document.
    #[arg(long, value_name = "FILE", hide = true)]
    parse_only: Option<PathBuf>,
    /// Internal: run the command after `--`, then print its wall time, CPU time and peak RSS.
    #[arg(long, hide = true)]
    measure: bool,
    /// The command `--measure` runs.
    #[arg(last = true, hide = true)]
    command: Vec<String>,
    /// Passed by `cargo bench`.
    #[arg(long, hide = true)]
    bench: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(file) = &args.parse_only {
        let documents = parse_only(file);
        eprintln!("{documents} documents");
        return ExitCode::SUCCESS;
    }
    if args.measure {
        return measure_child(&args.command);
    }
    let temporary = tempfile::tempdir().expect("a temporary directory");
    let dir = args.dir.clone().unwrap_or_else(|| temporary.path().into());
    std::fs::create_dir_all(&dir).expect("the export's directory");
    let started = Instant::now();
    let files = Export::new(args.objects, args.seed).write(&dir);
    println!(
        "export of {} objects (seed {}) written in {:.1} s: {}",
        args.objects,
        args.seed,
        started.elapsed().as_secs_f64(),
        files
            .iter()
            .map(|(format, path)| format!("{format} {}", mib(file_size(path))))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if args.generate_only {
        println!("{}", dir.display());
        return ExitCode::SUCCESS;
    }
    run_rounds(&args, &files);
    ExitCode::SUCCESS
}

/// One measured run: wall time, CPU time and peak RSS of a child process.
#[derive(Clone, Copy, Debug)]
struct Measured {
    wall: Duration,
    cpu: Duration,
    peak_rss: u64,
}

/// What is measured, per format.
const BASELINE: &str = "parse only";

/// One measurement of a round, with the baseline of its round and format.
struct Row<'a> {
    format: &'a str,
    what: String,
    measured: Measured,
    baseline: Measured,
    input: u64,
}

impl Row<'_> {
    fn rss_ratio(&self) -> f64 {
        self.measured.peak_rss as f64 / self.input as f64
    }

    fn wall_ratio(&self) -> f64 {
        self.measured.wall.as_secs_f64() / self.baseline.wall.as_secs_f64()
    }

    fn cpu_ratio(&self) -> f64 {
        self.measured.cpu.as_secs_f64() / self.baseline.cpu.as_secs_f64()
    }
}

fn run_rounds(args: &Args, files: &[(&'static str, PathBuf)]) {
    let mut rows: Vec<Row> = Vec::new();
    println!(
        "\n{:<4} {:<6} {:<22} {:>9} {:>9} {:>11} {:>10} {:>11} {:>10}",
        "run",
        "format",
        "command",
        "wall",
        "CPU",
        "peak RSS",
        "RSS÷input",
        "wall÷parse",
        "CPU÷parse"
    );
    let this = std::env::current_exe().expect("the benchmark's own path");
    for run in 1..=args.runs {
        for (format, path) in files {
            if !args.formats.iter().any(|f| f == format) {
                continue;
            }
            let input = file_size(path);
            let path = path.to_str().expect("a UTF-8 path");
            let baseline = measure(&[this.to_str().unwrap(), "--parse-only", path]);
            let mut commands = vec![(BASELINE.to_string(), baseline)];
            for output in &args.outputs {
                let mut command = vec![
                    env!("CARGO_BIN_EXE_tenantplane"),
                    "explain-sync",
                    path,
                    "--fail-on",
                    "none",
                ];
                if output != "table" {
                    command.extend(["-o", output]);
                }
                commands.push((format!("explain-sync -o {output}"), measure(&command)));
            }
            for (what, measured) in commands {
                let row = Row {
                    format,
                    what,
                    measured,
                    baseline,
                    input,
                };
                print_row(
                    &run.to_string(),
                    &row,
                    row.measured,
                    [row.rss_ratio(), row.wall_ratio(), row.cpu_ratio()],
                );
                rows.push(row);
            }
        }
    }
    println!(
        "\nmedians of {} runs (the ratios: medians of each run's):",
        args.runs
    );
    for (format, path) in files {
        let whats = std::iter::once(BASELINE.to_string())
            .chain(args.outputs.iter().map(|o| format!("explain-sync -o {o}")));
        for what in whats {
            let runs: Vec<&Row> = rows
                .iter()
                .filter(|r| r.format == *format && r.what == what)
                .collect();
            if runs.is_empty() {
                continue;
            }
            let median = |value: &dyn Fn(&Row) -> f64| {
                let mut values: Vec<f64> = runs.iter().map(|r| value(r)).collect();
                values.sort_by(f64::total_cmp);
                values[values.len() / 2]
            };
            let measured = Measured {
                wall: Duration::from_secs_f64(median(&|r| r.measured.wall.as_secs_f64())),
                cpu: Duration::from_secs_f64(median(&|r| r.measured.cpu.as_secs_f64())),
                peak_rss: median(&|r| r.measured.peak_rss as f64) as u64,
            };
            let ratios = [
                median(&|r| r.rss_ratio()),
                median(&|r| r.wall_ratio()),
                median(&|r| r.cpu_ratio()),
            ];
            print_row("med", runs[0], measured, ratios);
        }
        println!("     {format} input: {}", mib(file_size(path)));
    }
}

/// Prints a measurement (`measured`, of `row`'s command) and its ratios: RSS ÷ input, wall and
/// CPU time ÷ the parse-only run's.
fn print_row(run: &str, row: &Row, measured: Measured, [rss, wall, cpu]: [f64; 3]) {
    println!(
        "{run:<4} {:<6} {:<22} {:>7.2} s {:>7.2} s {:>11} {rss:>9.2}× {wall:>10.2}× {cpu:>9.2}×",
        row.format,
        row.what,
        measured.wall.as_secs_f64(),
        measured.cpu.as_secs_f64(),
        mib(measured.peak_rss),
    );
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn file_size(path: &Path) -> u64 {
    std::fs::metadata(path).expect("the export exists").len()
}

/// Runs `command` through this benchmark's `--measure`, a process of its own whose only child is
/// the command, so that the peak RSS of its children is the command's.
fn measure(command: &[&str]) -> Measured {
    let this = std::env::current_exe().expect("the benchmark's own path");
    let out = Command::new(this)
        .arg("--measure")
        .arg("--")
        .args(command)
        .stderr(Stdio::inherit())
        .output()
        .expect("the measuring process runs");
    assert!(out.status.success(), "{command:?} failed");
    let report = String::from_utf8(out.stdout).expect("a report in UTF-8");
    let mut fields = report.split_whitespace().map(|f| f.parse::<u64>().unwrap());
    Measured {
        wall: Duration::from_nanos(fields.next().expect("the wall time")),
        cpu: Duration::from_nanos(fields.next().expect("the CPU time")),
        peak_rss: fields.next().expect("the peak RSS"),
    }
}

/// `--measure`: runs the command with its output to /dev/null and prints its wall time and CPU
/// time (ns) and peak RSS (bytes).
fn measure_child(command: &[String]) -> ExitCode {
    let started = Instant::now();
    let status = Command::new(&command[0])
        .args(&command[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("the measured command starts");
    let wall = started.elapsed();
    if !status.success() {
        eprintln!("{command:?}: {status}");
        return ExitCode::FAILURE;
    }
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
        .expect("getrusage");
    // Linux reports ru_maxrss in KiB.
    let cpu = [usage.user_time(), usage.system_time()]
        .iter()
        .map(|t| Duration::new(t.tv_sec() as u64, t.tv_usec() as u32 * 1000))
        .sum::<Duration>();
    println!(
        "{} {} {}",
        wall.as_nanos(),
        cpu.as_nanos(),
        usage.max_rss() as u64 * 1024
    );
    ExitCode::SUCCESS
}

/// The baseline: reads the file and parses every document with explain-sync's reader, on as
/// many cores, dropping each one. Returns how many there were.
fn parse_only(file: &Path) -> usize {
    let text = std::fs::read_to_string(file).expect("the export is readable");
    let mut documents = 0;
    Reader::new(&file.display().to_string(), &text)
        .read(drop, |()| {
            documents += 1;
            Ok::<_, Infallible>(())
        })
        .unwrap_or_else(|never| match never {});
    documents
}

/// A small deterministic generator (SplitMix64): the export depends on the seed alone.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }

    /// `n` characters of the alphabet Kubernetes uses for generated name suffixes.
    fn suffix(&mut self, n: usize) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        (0..n)
            .map(|_| ALPHABET[self.below(ALPHABET.len() as u64) as usize] as char)
            .collect()
    }

    fn uid(&mut self) -> String {
        let (a, b) = (self.next(), self.next());
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            (b >> 48) & 0x3fff | 0x8000,
            b & 0xffff_ffff_ffff
        )
    }
}

const NAMESPACES: [&str; 12] = [
    "payments",
    "checkout",
    "search",
    "catalog",
    "identity",
    "notifications",
    "analytics",
    "shipping",
    "recommendations",
    "frontend",
    "inventory",
    "monitoring",
];

const COMPONENTS: [&str; 16] = [
    "api",
    "worker",
    "web",
    "gateway",
    "scheduler",
    "indexer",
    "cache",
    "exporter",
    "consumer",
    "producer",
    "reconciler",
    "ingest",
    "render",
    "auth",
    "billing",
    "report",
];

/// One application of the export: a Deployment, the pods of its current ReplicaSet, a Service
/// and a ConfigMap, all in one namespace.
struct App {
    namespace: &'static str,
    name: String,
    replicas: usize,
    template_hash: String,
    seed: u64,
}

/// The export: its applications, listed by kind as `kubectl get pods,services,deployments,configmaps`
/// lists them.
struct Export {
    apps: Vec<App>,
    objects: usize,
}

impl Export {
    fn new(objects: usize, seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let mut apps = Vec::new();
        let mut count = 0;
        while count < objects {
            let namespace = rng.pick(&NAMESPACES);
            let name = format!(
                "{}-{}-{}",
                rng.pick(&COMPONENTS),
                rng.pick(&COMPONENTS),
                apps.len()
            );
            let replicas = 2 + rng.below(3) as usize;
            count += replicas + 3;
            apps.push(App {
                namespace,
                name,
                replicas,
                template_hash: rng.suffix(10),
                seed: rng.next(),
            });
        }
        Export { apps, objects }
    }

    /// Every object, in the export's order.
    fn objects(&self) -> impl Iterator<Item = Value> + '_ {
        let pods = self
            .apps
            .iter()
            .flat_map(|app| (0..app.replicas).map(move |i| pod(app, i)));
        let services = self.apps.iter().map(service);
        let deployments = self.apps.iter().map(deployment);
        let config_maps = self.apps.iter().map(config_map);
        pods.chain(services)
            .chain(deployments)
            .chain(config_maps)
            .take(self.objects)
    }

    /// Writes `export.json` and `export.yaml` into `dir`.
    fn write(&self, dir: &Path) -> Vec<(&'static str, PathBuf)> {
        let json_path = dir.join("export.json");
        let yaml_path = dir.join("export.yaml");
        let mut json = std::io::BufWriter::new(std::fs::File::create(&json_path).unwrap());
        let mut yaml = std::io::BufWriter::new(std::fs::File::create(&yaml_path).unwrap());
        // kubectl's List: its fields in order, `items` before `kind`; each item on a line of its
        // own (as `jq -c` writes it), which keeps the export at the size the issue measured.
        write!(json, "{{\n    \"apiVersion\": \"v1\",\n    \"items\": [").unwrap();
        for (i, object) in self.objects().enumerate() {
            json.write_all(if i == 0 { b"\n" } else { b",\n" }).unwrap();
            serde_json::to_writer(&mut json, &object).unwrap();
            writeln!(
                yaml,
                "---\n{}",
                serde_norway::to_string(&object).unwrap().trim_end()
            )
            .unwrap();
        }
        write!(
            json,
            "\n    ],\n    \"kind\": \"List\",\n    \"metadata\": {{\n        \"resourceVersion\": \"\"\n    }}\n}}\n"
        )
        .unwrap();
        json.flush().unwrap();
        yaml.flush().unwrap();
        vec![("json", json_path), ("yaml", yaml_path)]
    }
}

fn labels(app: &App) -> Value {
    json!({"app.kubernetes.io/name": app.name, "app.kubernetes.io/part-of": app.namespace,
        "app.kubernetes.io/managed-by": "helm", "tier": "backend"})
}

fn time(rng: &mut Rng) -> String {
    format!(
        "2026-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        1 + rng.below(12),
        1 + rng.below(28),
        rng.below(24),
        rng.below(60),
        rng.below(60)
    )
}

/// The application's container, or one of its two sidecars (a mesh proxy, a log shipper).
fn container(app: &App, rng: &mut Rng, role: &str) -> Value {
    let port = 8000 + rng.below(1000);
    let probe = |path: &str| json!({"httpGet": {"path": path, "port": port}, "periodSeconds": 10, "failureThreshold": 3});
    match role {
        "app" => json!({
            "name": "app",
            "image": format!("registry.example.com/{}/{}:1.{}.{}", app.namespace, app.name, rng.below(40), rng.below(10)),
            "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
            "env": [
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "LOG_LEVEL", "value": rng.pick(&["info", "debug", "warn"])},
                {"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": format!("{}-db", app.name), "key": "password"}}},
                {"name": "FEATURES", "valueFrom": {"configMapKeyRef": {"name": format!("{}-config", app.name), "key": "features"}}},
            ],
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
            "livenessProbe": probe("/healthz"),
            "readinessProbe": probe("/ready"),
            "securityContext": {"allowPrivilegeEscalation": false, "runAsNonRoot": true},
            "volumeMounts": [
                {"name": "config", "mountPath": "/etc/app", "readOnly": true},
                {"name": "credentials", "mountPath": "/var/run/secrets/app", "readOnly": true},
                {"name": "scratch", "mountPath": "/tmp"},
            ],
        }),
        "proxy" => json!({
            "name": "proxy",
            "image": "registry.example.com/mesh/proxy:1.22.4",
            "env": [{"name": "UPSTREAM_PORT", "value": port.to_string()}],
            "ports": [{"name": "mesh", "containerPort": 15001, "protocol": "TCP"}],
            "readinessProbe": probe("/proxy/ready"),
            "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
        }),
        _ => json!({
            "name": "logs",
            "image": "registry.example.com/observability/log-shipper:3.1.0",
            "volumeMounts": [{"name": "scratch", "mountPath": "/var/log/app", "readOnly": true}],
        }),
    }
}

fn pod(app: &App, replica: usize) -> Value {
    let mut rng = Rng::new(app.seed ^ (replica as u64 + 1).wrapping_mul(0x2545_f491_4f6c_dd1d));
    let replica_set = format!("{}-{}", app.name, app.template_hash);
    let name = format!("{replica_set}-{}", rng.suffix(5));
    let mut labels = labels(app);
    labels["pod-template-hash"] = json!(app.template_hash);
    let containers: Vec<Value> = ["app", "proxy", "logs"]
        .iter()
        .map(|role| container(app, &mut rng, role))
        .collect();
    let started = time(&mut rng);
    let statuses: Vec<Value> = ["app", "proxy", "logs"]
        .iter()
        .map(|name| json!({"name": name, "ready": true, "restartCount": rng.below(3)}))
        .collect();
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": app.namespace,
            "uid": rng.uid(),
            "resourceVersion": rng.below(90_000_000).to_string(),
            "creationTimestamp": started,
            "labels": labels,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": replica_set,
                "uid": rng.uid(), "controller": true}],
        },
        "spec": {
            "hostNetwork": rng.below(8) == 0,
            "containers": containers,
            "volumes": [
                {"name": "config", "configMap": {"name": format!("{}-config", app.name)}},
                {"name": "credentials", "secret": {"secretName": format!("{}-db", app.name)}},
                {"name": "scratch", "emptyDir": {}},
                {"name": format!("kube-api-access-{}", rng.suffix(5)), "projected": {"sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                ]}},
            ],
            "serviceAccountName": app.name,
            "nodeName": format!("node-{}", rng.below(200)),
        },
        "status": {
            "phase": "Running",
            "podIP": format!("10.{}.{}.{}", 100 + rng.below(100), rng.below(256), rng.below(256)),
            "startTime": started,
            "containerStatuses": statuses,
        },
    })
}

fn service(app: &App) -> Value {
    let mut rng = Rng::new(app.seed ^ 0x5e41);
    let ip = format!("10.96.{}.{}", rng.below(256), rng.below(256));
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": app.name, "namespace": app.namespace, "uid": rng.uid(),
            "resourceVersion": rng.below(90_000_000).to_string(), "creationTimestamp": time(&mut rng),
            "labels": labels(app),
            "annotations": {"meta.helm.sh/release-name": app.name, "meta.helm.sh/release-namespace": app.namespace}},
        "spec": {
            "type": if rng.below(20) == 0 { "NodePort" } else { "ClusterIP" },
            "clusterIP": ip, "clusterIPs": [ip], "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
            "internalTrafficPolicy": "Cluster", "sessionAffinity": "None",
            "selector": {"app.kubernetes.io/name": app.name},
            "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": "http"},
                      {"name": "metrics", "port": 9090, "protocol": "TCP", "targetPort": "metrics"}],
        },
        "status": {"loadBalancer": {}},
    })
}

fn deployment(app: &App) -> Value {
    let mut rng = Rng::new(app.seed ^ 0xde91);
    let mut template_labels = labels(app);
    template_labels["pod-template-hash"] = json!(app.template_hash);
    let containers: Vec<Value> = ["app", "proxy"]
        .iter()
        .map(|role| container(app, &mut rng, role))
        .collect();
    let created = time(&mut rng);
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": app.name, "namespace": app.namespace, "uid": rng.uid(),
            "resourceVersion": rng.below(90_000_000).to_string(), "generation": 1 + rng.below(30),
            "creationTimestamp": created, "labels": labels(app),
            "annotations": {"deployment.kubernetes.io/revision": (1 + rng.below(30)).to_string(),
                "meta.helm.sh/release-name": app.name, "meta.helm.sh/release-namespace": app.namespace}},
        "spec": {
            "replicas": app.replicas,
            "revisionHistoryLimit": 10,
            "progressDeadlineSeconds": 600,
            "selector": {"matchLabels": {"app.kubernetes.io/name": app.name}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
            "template": {
                "metadata": {"labels": template_labels},
                "spec": {"containers": containers, "serviceAccountName": app.name,
                    "restartPolicy": "Always", "dnsPolicy": "ClusterFirst", "terminationGracePeriodSeconds": 30},
            },
        },
        "status": {"replicas": app.replicas, "readyReplicas": app.replicas, "availableReplicas": app.replicas,
            "updatedReplicas": app.replicas, "observedGeneration": 1,
            "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
                "lastUpdateTime": created, "lastTransitionTime": created}]},
    })
}

fn config_map(app: &App) -> Value {
    let mut rng = Rng::new(app.seed ^ 0xc0f1);
    let properties: String = (0..50 + rng.below(10))
        .map(|i| format!("{}.setting.{i}={}\n", app.name, rng.suffix(12)))
        .collect();
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": format!("{}-config", app.name), "namespace": app.namespace, "uid": rng.uid(),
            "resourceVersion": rng.below(90_000_000).to_string(), "creationTimestamp": time(&mut rng),
            "labels": labels(app)},
        "data": {
            "application.properties": properties,
            "features": format!("checkout-v2={},search-ranking={}", rng.below(2) == 0, rng.below(2) == 0),
            "log-level": "info",
        },
    })
}
