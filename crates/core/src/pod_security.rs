//! The Pod Security Standards, evaluated as kube-apiserver's PodSecurity admission evaluates a
//! pod: the same checks, the same versions, the same order and the same words.
//!
//! A port of Kubernetes' `k8s.io/pod-security-admission` (`policy/check_*.go`, `policy/registry.go`,
//! `api/helpers.go`) as of Kubernetes 1.36. Each check has the versions of the standard it
//! changed in ([`CHECKS`]); a level and version (`restricted:v1.34`) runs, for each check of the
//! level, its newest version not newer than the one asked for, the restricted checks replacing
//! the baseline checks they override. A version newer than the newest check version (`v1.35`),
//! `latest` included, runs the newest checks, as a 1.36 API server does. The findings come in
//! the API server's order (baseline checks by id, then restricted checks by id), and
//! [`PodSecurityRefusal::message`] is the API server's text, byte for byte:
//!
//! ```text
//! pods "web" is forbidden: violates PodSecurity "restricted:v1.34": allowPrivilegeEscalation != false
//! (container "app" must set securityContext.allowPrivilegeEscalation=false), ...
//! ```
//!
//! Pure: the planner calls it on the host pod a decision would create, the differential test
//! (`crates/local-apiserver/tests/pod_security_differential.rs`) against a real kube-apiserver.
//! Each finding also names the first offending field of the pod, which the API server does not.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::api::core::v1::{
    PodSecurityContext, SELinuxOptions, SecurityContext, WindowsSecurityContextOptions,
};
use serde::Deserialize;
use serde_json::{Map, Value};

/// The label of a namespace that sets the level Pod Security enforces in it.
pub const ENFORCE_LABEL: &str = "pod-security.kubernetes.io/enforce";
/// The label that sets the version of the standard it enforces.
pub const ENFORCE_VERSION_LABEL: &str = "pod-security.kubernetes.io/enforce-version";

/// A level of the Pod Security Standards.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Level {
    /// Unrestricted.
    Privileged,
    /// Known privilege escalations blocked.
    Baseline,
    /// Current pod hardening best practice.
    Restricted,
}

impl Level {
    /// The level's name, as in the labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }
}

/// A version of the Pod Security Standards: `latest`, or `v1.<minor>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Version {
    /// The newest checks this evaluator knows.
    Latest,
    /// `v1.<minor>`.
    V1(u32),
}

impl Version {
    /// Parses `latest` or `v1.<minor>` (no leading zero), as the API server does.
    pub fn parse(text: &str) -> Result<Version, String> {
        if text == "latest" {
            return Ok(Version::Latest);
        }
        text.strip_prefix("v1.")
            .filter(|minor| {
                !minor.is_empty()
                    && minor.bytes().all(|b| b.is_ascii_digit())
                    && (minor.len() == 1 || !minor.starts_with('0'))
            })
            .and_then(|minor| minor.parse().ok())
            .map(Version::V1)
            .ok_or_else(|| r#"must be "latest" or "v1.x""#.to_string())
    }

    /// The minor version whose checks run: a version newer than the newest check version runs
    /// the newest checks.
    fn effective_minor(self) -> u32 {
        match self {
            Version::Latest => NEWEST_CHECK_MINOR,
            Version::V1(minor) => minor.min(NEWEST_CHECK_MINOR),
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Version::Latest => f.write_str("latest"),
            Version::V1(minor) => write!(f, "v1.{minor}"),
        }
    }
}

/// A level at a version: what a namespace enforces (`restricted:v1.34`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LevelVersion {
    /// The level.
    pub level: Level,
    /// The version of the standard.
    pub version: Version,
}

impl fmt::Display for LevelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.level.as_str(), self.version)
    }
}

impl LevelVersion {
    /// What a namespace with these labels enforces, as the API server reads them: no enforce
    /// label is `privileged`, no version label `latest`; a level it cannot read is `restricted`
    /// and a version it cannot read `latest` (the API server fails closed).
    pub fn enforced_by_labels(labels: &BTreeMap<String, String>) -> LevelVersion {
        let level = match labels.get(ENFORCE_LABEL).map(String::as_str) {
            None | Some("privileged") => Level::Privileged,
            Some("baseline") => Level::Baseline,
            Some(_) => Level::Restricted,
        };
        let version = labels
            .get(ENFORCE_VERSION_LABEL)
            .and_then(|v| Version::parse(v).ok())
            .unwrap_or(Version::Latest);
        LevelVersion { level, version }
    }

    /// The checks of this level and version that a pod fails, in the API server's order
    /// (empty: admitted). A pod that does not read as a Pod is not judged here: the API server's
    /// validation refuses it first.
    pub fn evaluate(&self, pod: &Value) -> Vec<Finding> {
        if self.level == Level::Privileged {
            return Vec::new();
        }
        let Ok(pod) = PodDocument::deserialize(pod) else {
            return Vec::new();
        };
        let Some(spec) = &pod.spec else {
            return Vec::new();
        };
        let view = PodView::new(pod.metadata.annotations.as_ref(), spec);
        self.checks()
            .into_iter()
            .filter_map(|(check, run)| {
                run(&view).map(|f| Finding {
                    check,
                    reason: f.reason,
                    detail: f.detail,
                    field: f.field,
                })
            })
            .collect()
    }

    /// The checks in force, each at its version, in the API server's order.
    fn checks(&self) -> Vec<(&'static str, CheckFn)> {
        let minor = self.version.effective_minor();
        let in_force = |check: &Check| {
            check
                .versions
                .iter()
                .rev()
                .find(|v| v.since <= minor)
                .map(|v| (check.id, v))
        };
        let restricted: Vec<(&str, &Versioned)> = if self.level == Level::Restricted {
            CHECKS
                .iter()
                .filter(|c| c.level == Level::Restricted)
                .filter_map(in_force)
                .collect()
        } else {
            Vec::new()
        };
        let overridden: BTreeSet<&str> = restricted
            .iter()
            .flat_map(|(_, v)| v.overrides.iter().copied())
            .collect();
        let mut baseline: Vec<(&str, &Versioned)> = CHECKS
            .iter()
            .filter(|c| c.level == Level::Baseline && !overridden.contains(c.id))
            .filter_map(in_force)
            .collect();
        baseline.sort_by_key(|(id, _)| *id);
        let mut restricted = restricted;
        restricted.sort_by_key(|(id, _)| *id);
        baseline
            .into_iter()
            .chain(restricted)
            .map(|(id, v)| (id, v.run))
            .collect()
    }
}

/// A check a pod fails.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// The check's id in Kubernetes (`allowPrivilegeEscalation`, `hostPathVolumes`, ...).
    pub check: &'static str,
    /// The API server's short reason (`allowPrivilegeEscalation != false`).
    pub reason: String,
    /// The API server's detail (`container "app" must set ...`); may be empty.
    pub detail: String,
    /// The first offending field of the pod (`spec.containers[0].securityContext...`).
    pub field: String,
}

/// A pod the enforced level refuses, with the API server's words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodSecurityRefusal {
    /// What the namespace enforces.
    pub enforced: LevelVersion,
    /// The checks it fails, in order (never empty).
    pub findings: Vec<Finding>,
}

impl PodSecurityRefusal {
    /// `reason (detail), reason, ...`: the API server's aggregation of the findings.
    pub fn forbidden_detail(&self) -> String {
        self.findings
            .iter()
            .map(|f| match f.detail.as_str() {
                "" => f.reason.clone(),
                detail => format!("{} ({detail})", f.reason),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The message of the API server's Forbidden status for the pod `name`:
    /// `pods "<name>" is forbidden: violates PodSecurity "<level>:<version>": <detail>`.
    pub fn message(&self, name: &str) -> String {
        format!(
            "pods \"{name}\" is forbidden: violates PodSecurity \"{}\": {}",
            self.enforced,
            self.forbidden_detail()
        )
    }
}

/// The findings of one check.
struct Found {
    reason: String,
    detail: String,
    field: String,
}

fn found(reason: impl Into<String>, detail: impl Into<String>, field: String) -> Option<Found> {
    Some(Found {
        reason: reason.into(),
        detail: detail.into(),
        field,
    })
}

type CheckFn = fn(&PodView<'_>) -> Option<Found>;

/// One check of the standard, with the versions it changed in.
struct Check {
    id: &'static str,
    level: Level,
    /// Oldest first.
    versions: &'static [Versioned],
}

/// A check as of a version of the standard.
struct Versioned {
    /// The minor version of `v1.<minor>` this version of the check applies from.
    since: u32,
    run: CheckFn,
    /// Baseline checks it replaces at the restricted level.
    overrides: &'static [&'static str],
}

const fn since(minor: u32, run: CheckFn) -> Versioned {
    Versioned {
        since: minor,
        run,
        overrides: &[],
    }
}

const fn replacing(minor: u32, run: CheckFn, overrides: &'static [&'static str]) -> Versioned {
    Versioned {
        since: minor,
        run,
        overrides,
    }
}

/// The newest version any check changed in: later versions, `latest` included, run these.
const NEWEST_CHECK_MINOR: u32 = 35;

/// Every check of Kubernetes 1.36's `pod-security-admission/policy`.
const CHECKS: &[Check] = &[
    Check {
        id: "appArmorProfile",
        level: Level::Baseline,
        versions: &[since(0, app_armor_profile)],
    },
    Check {
        id: "capabilities_baseline",
        level: Level::Baseline,
        versions: &[since(0, capabilities_baseline)],
    },
    Check {
        id: "hostNamespaces",
        level: Level::Baseline,
        versions: &[since(0, host_namespaces)],
    },
    Check {
        id: "hostPathVolumes",
        level: Level::Baseline,
        versions: &[since(0, host_path_volumes)],
    },
    Check {
        id: "hostPorts",
        level: Level::Baseline,
        versions: &[since(0, host_ports)],
    },
    Check {
        id: "hostProbesAndHostLifecycle",
        level: Level::Baseline,
        versions: &[since(34, probe_and_lifecycle_hosts)],
    },
    Check {
        id: "privileged",
        level: Level::Baseline,
        versions: &[since(0, privileged)],
    },
    Check {
        id: "procMount",
        level: Level::Baseline,
        versions: &[
            since(0, proc_mount),
            since(35, proc_mount_unless_user_namespace),
        ],
    },
    Check {
        id: "seLinuxOptions",
        level: Level::Baseline,
        versions: &[
            since(0, se_linux_options_1_0),
            since(31, se_linux_options_1_31),
        ],
    },
    Check {
        id: "seccompProfile_baseline",
        level: Level::Baseline,
        versions: &[
            since(0, seccomp_annotations),
            since(19, seccomp_profile_baseline),
        ],
    },
    Check {
        id: "sysctls",
        level: Level::Baseline,
        versions: &[
            since(0, sysctls_1_0),
            since(27, sysctls_1_27),
            since(29, sysctls_1_29),
            since(32, sysctls_1_32),
        ],
    },
    Check {
        id: "windowsHostProcess",
        level: Level::Baseline,
        versions: &[since(0, windows_host_process)],
    },
    Check {
        id: "allowPrivilegeEscalation",
        level: Level::Restricted,
        versions: &[
            since(8, allow_privilege_escalation),
            since(25, allow_privilege_escalation_unless_windows),
        ],
    },
    Check {
        id: "capabilities_restricted",
        level: Level::Restricted,
        versions: &[
            replacing(22, capabilities_restricted, &["capabilities_baseline"]),
            replacing(
                25,
                capabilities_restricted_unless_windows,
                &["capabilities_baseline"],
            ),
        ],
    },
    Check {
        id: "procMount_restricted",
        level: Level::Restricted,
        versions: &[replacing(35, proc_mount, &["procMount"])],
    },
    Check {
        id: "restrictedVolumes",
        level: Level::Restricted,
        versions: &[replacing(0, restricted_volumes, &["hostPathVolumes"])],
    },
    Check {
        id: "runAsNonRoot",
        level: Level::Restricted,
        versions: &[
            since(0, run_as_non_root),
            since(35, run_as_non_root_unless_user_namespace),
        ],
    },
    Check {
        id: "runAsUser",
        level: Level::Restricted,
        versions: &[
            since(23, run_as_user),
            since(35, run_as_user_unless_user_namespace),
        ],
    },
    Check {
        id: "seccompProfile_restricted",
        level: Level::Restricted,
        versions: &[
            replacing(19, seccomp_profile_restricted, &["seccompProfile_baseline"]),
            replacing(
                25,
                seccomp_profile_restricted_unless_windows,
                &["seccompProfile_baseline"],
            ),
        ],
    },
];

/// The fields of a pod the checks read (the rest is ignored, so that a pod whose other fields
/// are written loosely, a quantity as a number say, is still judged).
#[derive(Deserialize)]
struct PodDocument {
    #[serde(default)]
    metadata: MetadataDocument,
    spec: Option<SpecDocument>,
}

#[derive(Deserialize, Default)]
struct MetadataDocument {
    annotations: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SpecDocument {
    host_network: Option<bool>,
    #[serde(rename = "hostPID")]
    host_pid: Option<bool>,
    #[serde(rename = "hostIPC")]
    host_ipc: Option<bool>,
    host_users: Option<bool>,
    os: Option<OsDocument>,
    security_context: Option<PodSecurityContext>,
    volumes: Option<Vec<VolumeDocument>>,
    init_containers: Option<Vec<ContainerDocument>>,
    containers: Option<Vec<ContainerDocument>>,
    ephemeral_containers: Option<Vec<ContainerDocument>>,
}

#[derive(Deserialize)]
struct OsDocument {
    name: String,
}

/// A volume: its name and its source, whichever it is.
#[derive(Deserialize)]
struct VolumeDocument {
    name: String,
    #[serde(flatten)]
    source: Map<String, Value>,
}

impl VolumeDocument {
    /// Whether the volume has the source `key` (`hostPath`, ...).
    fn has(&self, key: &str) -> bool {
        self.source.get(key).is_some_and(|v| !v.is_null())
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ContainerDocument {
    name: String,
    security_context: Option<SecurityContext>,
    ports: Option<Vec<PortDocument>>,
    liveness_probe: Option<HandlerDocument>,
    readiness_probe: Option<HandlerDocument>,
    startup_probe: Option<HandlerDocument>,
    lifecycle: Option<LifecycleDocument>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PortDocument {
    host_port: Option<i64>,
}

/// A probe or a lifecycle handler: where its HTTP GET and TCP socket actions go.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct HandlerDocument {
    http_get: Option<HostDocument>,
    tcp_socket: Option<HostDocument>,
}

#[derive(Deserialize)]
struct HostDocument {
    host: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LifecycleDocument {
    post_start: Option<HandlerDocument>,
    pre_stop: Option<HandlerDocument>,
}

/// A pod as the checks read it.
struct PodView<'a> {
    annotations: Option<&'a BTreeMap<String, String>>,
    spec: &'a SpecDocument,
    /// Init containers, containers, ephemeral containers: the API server's visiting order.
    containers: Vec<ContainerView<'a>>,
}

/// One container of any of the three lists.
struct ContainerView<'a> {
    name: &'a str,
    /// Its field path, `spec.initContainers[0]`.
    at: String,
    security_context: Option<&'a SecurityContext>,
    container: &'a ContainerDocument,
}

impl<'a> PodView<'a> {
    fn new(annotations: Option<&'a BTreeMap<String, String>>, spec: &'a SpecDocument) -> Self {
        let lists = [
            ("initContainers", &spec.init_containers),
            ("containers", &spec.containers),
            ("ephemeralContainers", &spec.ephemeral_containers),
        ];
        let containers = lists
            .into_iter()
            .flat_map(|(list, items)| {
                items
                    .iter()
                    .flatten()
                    .enumerate()
                    .map(move |(i, c)| ContainerView {
                        name: &c.name,
                        at: format!("spec.{list}[{i}]"),
                        security_context: c.security_context.as_ref(),
                        container: c,
                    })
            })
            .collect();
        PodView {
            annotations,
            spec,
            containers,
        }
    }

    fn annotations(&self) -> impl Iterator<Item = (&'a String, &'a String)> {
        self.annotations.into_iter().flatten()
    }

    fn annotation(&self, key: &str) -> Option<&'a String> {
        self.annotations.and_then(|a| a.get(key))
    }

    fn pod_context(&self) -> Option<&'a PodSecurityContext> {
        self.spec.security_context.as_ref()
    }

    fn volumes(&self) -> impl Iterator<Item = (usize, &'a VolumeDocument)> {
        self.spec.volumes.iter().flatten().enumerate()
    }

    /// The containers whose security context satisfies `bad`.
    fn containers_where(&self, bad: impl Fn(&SecurityContext) -> bool) -> Vec<&ContainerView<'a>> {
        self.containers
            .iter()
            .filter(|c| c.security_context.is_some_and(&bad))
            .collect()
    }

    /// `hostUsers: false`: the pod runs in a user namespace.
    fn in_user_namespace(&self) -> bool {
        self.spec.host_users == Some(false)
    }

    fn is_windows(&self) -> bool {
        self.spec.os.as_ref().is_some_and(|os| os.name == "windows")
    }
}

fn pluralize<'s>(singular: &'s str, plural: &'s str, count: usize) -> &'s str {
    if count == 1 { singular } else { plural }
}

/// `"a", "b"`, as the API server quotes lists (no escaping).
fn join_quote<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> String {
    let items: Vec<S> = items.into_iter().collect();
    if items.is_empty() {
        return String::new();
    }
    let joined: Vec<&str> = items.iter().map(AsRef::as_ref).collect();
    format!("\"{}\"", joined.join("\", \""))
}

/// `container "a"` or `containers "a", "b"`.
fn containers_named(containers: &[&ContainerView<'_>]) -> String {
    format!(
        "{} {}",
        pluralize("container", "containers", containers.len()),
        join_quote(containers.iter().map(|c| c.name))
    )
}

/// `key="value"` with the value quoted as Go's `%q` quotes it.
fn annotation_pair(key: &str, value: &str) -> String {
    format!("{key}={}", go_quote(value))
}

/// A string quoted as Go's `strconv.Quote` quotes it.
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// "pod" and/or "container(s) ...", joined with " and ".
fn setters(pod: bool, containers: &[&ContainerView<'_>], extra: Option<String>) -> String {
    let mut setters = Vec::new();
    if pod {
        setters.push("pod".to_string());
    }
    if !containers.is_empty() {
        setters.push(containers_named(containers));
    }
    setters.extend(extra);
    setters.join(" and ")
}

// Baseline checks.

fn windows_host_process(p: &PodView<'_>) -> Option<Found> {
    let host_process =
        |o: Option<&WindowsSecurityContextOptions>| o.and_then(|o| o.host_process) == Some(true);
    let bad = p.containers_where(|sc| host_process(sc.windows_options.as_ref()));
    let pod = p
        .pod_context()
        .is_some_and(|sc| host_process(sc.windows_options.as_ref()));
    if !pod && bad.is_empty() {
        return None;
    }
    let field = if pod {
        "spec.securityContext".to_string()
    } else {
        format!("{}.securityContext", bad[0].at)
    };
    found(
        "hostProcess",
        format!(
            "{} must not set securityContext.windowsOptions.hostProcess=true",
            setters(pod, &bad, None)
        ),
        format!("{field}.windowsOptions.hostProcess"),
    )
}

fn host_namespaces(p: &PodView<'_>) -> Option<Found> {
    let shared: Vec<&str> = [
        (p.spec.host_network, "hostNetwork"),
        (p.spec.host_pid, "hostPID"),
        (p.spec.host_ipc, "hostIPC"),
    ]
    .into_iter()
    .filter(|(on, _)| *on == Some(true))
    .map(|(_, name)| name)
    .collect();
    let first = shared.first()?;
    found(
        "host namespaces",
        shared
            .iter()
            .map(|name| format!("{name}=true"))
            .collect::<Vec<_>>()
            .join(", "),
        format!("spec.{first}"),
    )
}

fn privileged(p: &PodView<'_>) -> Option<Found> {
    let bad = p.containers_where(|sc| sc.privileged == Some(true));
    let first = bad.first()?;
    found(
        "privileged",
        format!(
            "{} must not set securityContext.privileged=true",
            containers_named(&bad)
        ),
        format!("{}.securityContext.privileged", first.at),
    )
}

/// The capabilities a baseline container may add.
const DEFAULT_CAPABILITIES: [&str; 13] = [
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

fn added_capabilities(sc: &SecurityContext) -> &[String] {
    sc.capabilities
        .as_ref()
        .and_then(|c| c.add.as_deref())
        .unwrap_or_default()
}

fn capabilities_baseline(p: &PodView<'_>) -> Option<Found> {
    fn non_default(sc: &SecurityContext) -> impl Iterator<Item = &String> {
        added_capabilities(sc)
            .iter()
            .filter(|c| !DEFAULT_CAPABILITIES.contains(&c.as_str()))
    }
    let bad = p.containers_where(|sc| non_default(sc).next().is_some());
    let first = bad.first()?;
    let capabilities: BTreeSet<&str> = bad
        .iter()
        .filter_map(|c| c.security_context)
        .flat_map(|sc| non_default(sc).map(String::as_str))
        .collect();
    found(
        "non-default capabilities",
        format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_named(&bad),
            join_quote(capabilities)
        ),
        format!("{}.securityContext.capabilities.add", first.at),
    )
}

fn host_path_volumes(p: &PodView<'_>) -> Option<Found> {
    let volumes: Vec<(usize, &str)> = p
        .volumes()
        .filter(|(_, v)| v.has("hostPath"))
        .map(|(i, v)| (i, v.name.as_str()))
        .collect();
    let (first, _) = volumes.first()?;
    found(
        "hostPath volumes",
        format!(
            "{} {}",
            pluralize("volume", "volumes", volumes.len()),
            join_quote(volumes.iter().map(|(_, name)| *name))
        ),
        format!("spec.volumes[{first}].hostPath"),
    )
}

fn host_ports(p: &PodView<'_>) -> Option<Found> {
    let mut bad = Vec::new();
    let mut ports = BTreeSet::new();
    let mut field = None;
    for c in &p.containers {
        let mut uses = false;
        for (j, port) in c.container.ports.iter().flatten().enumerate() {
            if let Some(host_port) = port.host_port.filter(|p| *p != 0) {
                uses = true;
                ports.insert(host_port.to_string());
                field.get_or_insert_with(|| format!("{}.ports[{j}].hostPort", c.at));
            }
        }
        if uses {
            bad.push(c);
        }
    }
    let field = field?;
    found(
        "hostPort",
        format!(
            "{} {} {} {}",
            containers_named(&bad),
            pluralize("uses", "use", bad.len()),
            pluralize("hostPort", "hostPorts", ports.len()),
            ports.into_iter().collect::<Vec<_>>().join(", ")
        ),
        field,
    )
}

fn probe_and_lifecycle_hosts(p: &PodView<'_>) -> Option<Found> {
    let mut containers = BTreeSet::new();
    let mut hosts = BTreeSet::new();
    let mut field = None;
    for c in &p.containers {
        let doc = c.container;
        let lifecycle = doc.lifecycle.as_ref();
        let handlers = [
            ("livenessProbe", doc.liveness_probe.as_ref()),
            ("readinessProbe", doc.readiness_probe.as_ref()),
            ("startupProbe", doc.startup_probe.as_ref()),
            (
                "lifecycle.postStart",
                lifecycle.and_then(|l| l.post_start.as_ref()),
            ),
            (
                "lifecycle.preStop",
                lifecycle.and_then(|l| l.pre_stop.as_ref()),
            ),
        ];
        for (name, handler) in handlers {
            let Some(handler) = handler else { continue };
            let actions = [
                ("httpGet", handler.http_get.as_ref()),
                ("tcpSocket", handler.tcp_socket.as_ref()),
            ];
            for (action, target) in actions {
                if let Some(host) = target
                    .and_then(|t| t.host.as_deref())
                    .filter(|h| !h.is_empty())
                {
                    containers.insert(c.name);
                    hosts.insert(host);
                    field.get_or_insert_with(|| format!("{}.{name}.{action}.host", c.at));
                }
            }
        }
    }
    let field = field?;
    found(
        "probe or lifecycle host",
        format!(
            "{} {} {} {} {}",
            pluralize("container", "containers", containers.len()),
            join_quote(&containers),
            pluralize("uses", "use", containers.len()),
            pluralize(
                "probe or lifecycle host",
                "probe or lifecycle hosts",
                hosts.len()
            ),
            join_quote(&hosts)
        ),
        field,
    )
}

/// The AppArmor annotations of Kubernetes before 1.30, one per container.
const APP_ARMOR_ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";

fn app_armor_profile(p: &PodView<'_>) -> Option<Found> {
    let allowed_type = |t: &str| matches!(t, "RuntimeDefault" | "Localhost");
    let mut values = BTreeSet::new();
    let pod_type = p
        .pod_context()
        .and_then(|sc| sc.app_armor_profile.as_ref())
        .map(|a| a.type_.as_str())
        .filter(|t| !allowed_type(t));
    values.extend(pod_type);
    let bad = p.containers_where(|sc| {
        sc.app_armor_profile
            .as_ref()
            .is_some_and(|a| !allowed_type(&a.type_))
    });
    values.extend(
        bad.iter()
            .filter_map(|c| c.security_context?.app_armor_profile.as_ref())
            .map(|a| a.type_.as_str()),
    );
    let mut annotations: Vec<(String, &str)> = p
        .annotations()
        .filter(|(k, v)| {
            k.starts_with(APP_ARMOR_ANNOTATION_PREFIX)
                && !(v.is_empty() || *v == "runtime/default" || v.starts_with("localhost/"))
        })
        .map(|(k, v)| (annotation_pair(k, v), k.as_str()))
        .collect();
    annotations.sort();
    let mut listed: Vec<String> = values.into_iter().map(str::to_string).collect();
    listed.extend(annotations.iter().map(|(pair, _)| pair.clone()));
    let extra = (!annotations.is_empty())
        .then(|| pluralize("annotation", "annotations", annotations.len()).to_string());
    let field = match (pod_type, bad.first(), annotations.first()) {
        (Some(_), _, _) => "spec.securityContext.appArmorProfile.type".to_string(),
        (None, Some(c), _) => format!("{}.securityContext.appArmorProfile.type", c.at),
        (None, None, Some((_, key))) => format!("metadata.annotations[{key}]"),
        (None, None, None) => return None,
    };
    found(
        pluralize(
            "forbidden AppArmor profile",
            "forbidden AppArmor profiles",
            listed.len(),
        ),
        format!(
            "{} must not set AppArmor profile type to {}",
            setters(pod_type.is_some(), &bad, extra),
            join_quote(&listed)
        ),
        field,
    )
}

fn se_linux_options_1_0(p: &PodView<'_>) -> Option<Found> {
    se_linux_options(
        p,
        &["", "container_t", "container_init_t", "container_kvm_t"],
    )
}

fn se_linux_options_1_31(p: &PodView<'_>) -> Option<Found> {
    se_linux_options(
        p,
        &[
            "",
            "container_t",
            "container_init_t",
            "container_kvm_t",
            "container_engine_t",
        ],
    )
}

fn se_linux_options(p: &PodView<'_>, allowed_types: &[&str]) -> Option<Found> {
    fn bad_type<'o>(o: &'o SELinuxOptions, allowed: &[&str]) -> Option<&'o str> {
        Some(o.type_.as_deref().unwrap_or("")).filter(|t| !allowed.contains(t))
    }
    let set = |v: &Option<String>| v.as_deref().is_some_and(|s| !s.is_empty());
    let invalid =
        |o: &SELinuxOptions| bad_type(o, allowed_types).is_some() || set(&o.user) || set(&o.role);
    let pod_options = p.pod_context().and_then(|sc| sc.se_linux_options.as_ref());
    let pod = pod_options.is_some_and(invalid);
    let bad = p.containers_where(|sc| sc.se_linux_options.as_ref().is_some_and(invalid));
    let all: Vec<&SELinuxOptions> = pod_options
        .filter(|_| pod)
        .into_iter()
        .chain(
            bad.iter()
                .filter_map(|c| c.security_context?.se_linux_options.as_ref()),
        )
        .collect();
    let field = match (pod, bad.first()) {
        (true, _) => "spec.securityContext.seLinuxOptions".to_string(),
        (false, Some(c)) => format!("{}.securityContext.seLinuxOptions", c.at),
        (false, None) => return None,
    };
    let types: BTreeSet<&str> = all
        .iter()
        .filter_map(|o| bad_type(o, allowed_types))
        .collect();
    let mut data = Vec::new();
    if !types.is_empty() {
        data.push(format!(
            "{} {}",
            pluralize("type", "types", types.len()),
            join_quote(&types)
        ));
    }
    if all.iter().any(|o| set(&o.user)) {
        data.push("user may not be set".to_string());
    }
    if all.iter().any(|o| set(&o.role)) {
        data.push("role may not be set".to_string());
    }
    found(
        "seLinuxOptions",
        format!(
            "{} set forbidden securityContext.seLinuxOptions: {}",
            setters(pod, &bad, None),
            data.join("; ")
        ),
        field,
    )
}

fn proc_mount(p: &PodView<'_>) -> Option<Found> {
    fn unmasked(sc: &SecurityContext) -> Option<&str> {
        sc.proc_mount.as_deref().filter(|m| *m != "Default")
    }
    let bad = p.containers_where(|sc| unmasked(sc).is_some());
    let first = bad.first()?;
    let types: BTreeSet<&str> = bad
        .iter()
        .filter_map(|c| unmasked(c.security_context?))
        .collect();
    found(
        "procMount",
        format!(
            "{} must not set securityContext.procMount to {}",
            containers_named(&bad),
            join_quote(&types)
        ),
        format!("{}.securityContext.procMount", first.at),
    )
}

fn proc_mount_unless_user_namespace(p: &PodView<'_>) -> Option<Found> {
    if p.in_user_namespace() {
        return None;
    }
    proc_mount(p)
}

/// The seccomp annotation of a whole pod, before Kubernetes 1.19's field.
const SECCOMP_POD_ANNOTATION: &str = "seccomp.security.alpha.kubernetes.io/pod";
/// The seccomp annotations of each container, before Kubernetes 1.19's field.
const SECCOMP_CONTAINER_ANNOTATION_PREFIX: &str = "container.seccomp.security.alpha.kubernetes.io/";

fn seccomp_annotations(p: &PodView<'_>) -> Option<Found> {
    let valid =
        |v: &str| v == "runtime/default" || v == "docker/default" || v.starts_with("localhost/");
    let keys = std::iter::once(SECCOMP_POD_ANNOTATION.to_string()).chain(
        p.containers
            .iter()
            .map(|c| format!("{SECCOMP_CONTAINER_ANNOTATION_PREFIX}{}", c.name)),
    );
    let mut forbidden = BTreeSet::new();
    let mut field = None;
    for key in keys {
        if let Some(value) = p.annotation(&key).filter(|v| !valid(v)) {
            forbidden.insert(annotation_pair(&key, value));
            field.get_or_insert_with(|| format!("metadata.annotations[{key}]"));
        }
    }
    let field = field?;
    found(
        "seccompProfile",
        format!(
            "forbidden {} {}",
            pluralize("annotation", "annotations", forbidden.len()),
            forbidden.into_iter().collect::<Vec<_>>().join(", ")
        ),
        field,
    )
}

fn valid_seccomp(t: &str) -> bool {
    t == "Localhost" || t == "RuntimeDefault"
}

/// Whether the pod, and which containers, set a seccomp profile type other than
/// RuntimeDefault or Localhost; the values they set; and the first offending field.
struct SeccompSetters<'p, 'a> {
    pod: bool,
    containers: Vec<&'p ContainerView<'a>>,
    values: BTreeSet<&'a str>,
    field: Option<String>,
}

fn seccomp_setters<'p, 'a>(p: &'p PodView<'a>) -> SeccompSetters<'p, 'a> {
    let pod_type = p
        .pod_context()
        .and_then(|sc| sc.seccomp_profile.as_ref())
        .map(|s| s.type_.as_str())
        .filter(|t| !valid_seccomp(t));
    let containers = p.containers_where(|sc| {
        sc.seccomp_profile
            .as_ref()
            .is_some_and(|s| !valid_seccomp(&s.type_))
    });
    let mut values: BTreeSet<&str> = pod_type.into_iter().collect();
    values.extend(
        containers
            .iter()
            .filter_map(|c| c.security_context?.seccomp_profile.as_ref())
            .map(|s| s.type_.as_str()),
    );
    let field = match (pod_type, containers.first()) {
        (Some(_), _) => Some("spec.securityContext.seccompProfile.type".to_string()),
        (None, Some(c)) => Some(format!("{}.securityContext.seccompProfile.type", c.at)),
        (None, None) => None,
    };
    SeccompSetters {
        pod: pod_type.is_some(),
        containers,
        values,
        field,
    }
}

impl SeccompSetters<'_, '_> {
    fn refusal(self) -> Option<Found> {
        let field = self.field?;
        found(
            "seccompProfile",
            format!(
                "{} must not set securityContext.seccompProfile.type to {}",
                setters(self.pod, &self.containers, None),
                join_quote(&self.values)
            ),
            field,
        )
    }
}

fn seccomp_profile_baseline(p: &PodView<'_>) -> Option<Found> {
    seccomp_setters(p).refusal()
}

/// The sysctls a baseline pod may set as of v1.0.
const SYSCTLS_1_0: [&str; 5] = [
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
];
/// Added in v1.27.
const SYSCTLS_1_27: [&str; 1] = ["net.ipv4.ip_local_reserved_ports"];
/// Added in v1.29.
const SYSCTLS_1_29: [&str; 4] = [
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];
/// Added in v1.32.
const SYSCTLS_1_32: [&str; 2] = ["net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"];

fn sysctls_1_0(p: &PodView<'_>) -> Option<Found> {
    sysctls(p, &[&SYSCTLS_1_0])
}

fn sysctls_1_27(p: &PodView<'_>) -> Option<Found> {
    sysctls(p, &[&SYSCTLS_1_0, &SYSCTLS_1_27])
}

fn sysctls_1_29(p: &PodView<'_>) -> Option<Found> {
    sysctls(p, &[&SYSCTLS_1_0, &SYSCTLS_1_27, &SYSCTLS_1_29])
}

fn sysctls_1_32(p: &PodView<'_>) -> Option<Found> {
    sysctls(
        p,
        &[&SYSCTLS_1_0, &SYSCTLS_1_27, &SYSCTLS_1_29, &SYSCTLS_1_32],
    )
}

fn sysctls(p: &PodView<'_>, allowed: &[&[&str]]) -> Option<Found> {
    let forbidden: Vec<(usize, &str)> = p
        .pod_context()
        .and_then(|sc| sc.sysctls.as_deref())
        .unwrap_or_default()
        .iter()
        .enumerate()
        .filter(|(_, s)| !allowed.iter().any(|set| set.contains(&s.name.as_str())))
        .map(|(i, s)| (i, s.name.as_str()))
        .collect();
    let (first, _) = forbidden.first()?;
    found(
        "forbidden sysctls",
        forbidden
            .iter()
            .map(|(_, name)| *name)
            .collect::<Vec<_>>()
            .join(", "),
        format!("spec.securityContext.sysctls[{first}].name"),
    )
}

// Restricted checks.

fn allow_privilege_escalation(p: &PodView<'_>) -> Option<Found> {
    let bad: Vec<&ContainerView<'_>> = p
        .containers
        .iter()
        .filter(|c| {
            c.security_context
                .and_then(|sc| sc.allow_privilege_escalation)
                .is_none_or(|allowed| allowed)
        })
        .collect();
    let first = bad.first()?;
    found(
        "allowPrivilegeEscalation != false",
        format!(
            "{} must set securityContext.allowPrivilegeEscalation=false",
            containers_named(&bad)
        ),
        format!("{}.securityContext.allowPrivilegeEscalation", first.at),
    )
}

fn allow_privilege_escalation_unless_windows(p: &PodView<'_>) -> Option<Found> {
    if p.is_windows() {
        return None;
    }
    allow_privilege_escalation(p)
}

fn capabilities_restricted(p: &PodView<'_>) -> Option<Found> {
    let drops_all = |c: &ContainerView<'_>| {
        c.security_context
            .and_then(|sc| sc.capabilities.as_ref())
            .and_then(|caps| caps.drop.as_deref())
            .is_some_and(|drop| drop.iter().any(|d| d == "ALL"))
    };
    let forbidden_added = |c: &ContainerView<'_>| {
        c.security_context
            .map(added_capabilities)
            .unwrap_or_default()
            .iter()
            .filter(|a| *a != "NET_BIND_SERVICE")
            .cloned()
            .collect::<Vec<String>>()
    };
    let missing_drop: Vec<&ContainerView<'_>> =
        p.containers.iter().filter(|c| !drops_all(c)).collect();
    let adding: Vec<&ContainerView<'_>> = p
        .containers
        .iter()
        .filter(|c| !forbidden_added(c).is_empty())
        .collect();
    let mut details = Vec::new();
    if !missing_drop.is_empty() {
        details.push(format!(
            "{} must set securityContext.capabilities.drop=[\"ALL\"]",
            containers_named(&missing_drop)
        ));
    }
    if !adding.is_empty() {
        let capabilities: BTreeSet<String> =
            adding.iter().flat_map(|c| forbidden_added(c)).collect();
        details.push(format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_named(&adding),
            join_quote(&capabilities)
        ));
    }
    let field = match (missing_drop.first(), adding.first()) {
        (Some(c), _) => format!("{}.securityContext.capabilities.drop", c.at),
        (None, Some(c)) => format!("{}.securityContext.capabilities.add", c.at),
        (None, None) => return None,
    };
    found("unrestricted capabilities", details.join("; "), field)
}

fn capabilities_restricted_unless_windows(p: &PodView<'_>) -> Option<Found> {
    if p.is_windows() {
        return None;
    }
    capabilities_restricted(p)
}

/// The inline volume sources a restricted pod may use.
const ALLOWED_RESTRICTED_VOLUMES: [&str; 9] = [
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "image",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// The other volume sources, in the order the API server names the first one a volume has.
const RESTRICTED_VOLUMES: [&str; 21] = [
    "hostPath",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "nfs",
    "iscsi",
    "glusterfs",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "fc",
    "azureFile",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "portworxVolume",
    "scaleIO",
    "storageos",
];

/// The restricted volume type of a volume a restricted pod may not use (`unknown` for a source
/// this evaluator does not know).
fn restricted_volume_type(v: &VolumeDocument) -> Option<&'static str> {
    if ALLOWED_RESTRICTED_VOLUMES
        .iter()
        .any(|source| v.has(source))
    {
        return None;
    }
    Some(
        RESTRICTED_VOLUMES
            .into_iter()
            .find(|source| v.has(source))
            .unwrap_or("unknown"),
    )
}

fn restricted_volumes(p: &PodView<'_>) -> Option<Found> {
    let bad: Vec<(usize, &str, &str)> = p
        .volumes()
        .filter_map(|(i, v)| Some((i, v.name.as_str(), restricted_volume_type(v)?)))
        .collect();
    let (first, _, first_type) = bad.first()?;
    let types: BTreeSet<&str> = bad.iter().map(|(_, _, t)| *t).collect();
    let field = match *first_type {
        "unknown" => format!("spec.volumes[{first}]"),
        t => format!("spec.volumes[{first}].{t}"),
    };
    found(
        "restricted volume types",
        format!(
            "{} {} {} {} {}",
            pluralize("volume", "volumes", bad.len()),
            join_quote(bad.iter().map(|(_, name, _)| *name)),
            pluralize("uses", "use", bad.len()),
            pluralize(
                "restricted volume type",
                "restricted volume types",
                types.len()
            ),
            join_quote(&types)
        ),
        field,
    )
}

fn run_as_non_root(p: &PodView<'_>) -> Option<Found> {
    let pod = p.pod_context().and_then(|sc| sc.run_as_non_root);
    let explicit: Vec<&ContainerView<'_>> =
        p.containers_where(|sc| sc.run_as_non_root == Some(false));
    if pod == Some(false) || !explicit.is_empty() {
        let field = match explicit.first() {
            Some(c) if pod != Some(false) => format!("{}.securityContext.runAsNonRoot", c.at),
            _ => "spec.securityContext.runAsNonRoot".to_string(),
        };
        return found(
            "runAsNonRoot != true",
            format!(
                "{} must not set securityContext.runAsNonRoot=false",
                setters(pod == Some(false), &explicit, None)
            ),
            field,
        );
    }
    if pod == Some(true) {
        return None;
    }
    let implicit: Vec<&ContainerView<'_>> = p
        .containers
        .iter()
        .filter(|c| {
            c.security_context
                .and_then(|sc| sc.run_as_non_root)
                .is_none()
        })
        .collect();
    if implicit.is_empty() {
        return None;
    }
    found(
        "runAsNonRoot != true",
        format!(
            "pod or {} must set securityContext.runAsNonRoot=true",
            containers_named(&implicit)
        ),
        "spec.securityContext.runAsNonRoot".to_string(),
    )
}

fn run_as_non_root_unless_user_namespace(p: &PodView<'_>) -> Option<Found> {
    if p.in_user_namespace() {
        return None;
    }
    run_as_non_root(p)
}

fn run_as_user(p: &PodView<'_>) -> Option<Found> {
    let pod = p.pod_context().and_then(|sc| sc.run_as_user) == Some(0);
    let bad = p.containers_where(|sc| sc.run_as_user == Some(0));
    let field = match (pod, bad.first()) {
        (true, _) => "spec.securityContext.runAsUser".to_string(),
        (false, Some(c)) => format!("{}.securityContext.runAsUser", c.at),
        (false, None) => return None,
    };
    found(
        "runAsUser=0",
        format!("{} must not set runAsUser=0", setters(pod, &bad, None)),
        field,
    )
}

fn run_as_user_unless_user_namespace(p: &PodView<'_>) -> Option<Found> {
    if p.in_user_namespace() {
        return None;
    }
    run_as_user(p)
}

fn seccomp_profile_restricted(p: &PodView<'_>) -> Option<Found> {
    let pod_set = p
        .pod_context()
        .and_then(|sc| sc.seccomp_profile.as_ref())
        .is_some_and(|s| valid_seccomp(&s.type_));
    let explicit = seccomp_setters(p);
    if explicit.field.is_some() {
        return explicit.refusal();
    }
    if pod_set {
        return None;
    }
    let implicit: Vec<&ContainerView<'_>> = p
        .containers
        .iter()
        .filter(|c| {
            c.security_context
                .and_then(|sc| sc.seccomp_profile.as_ref())
                .is_none()
        })
        .collect();
    if implicit.is_empty() {
        return None;
    }
    found(
        "seccompProfile",
        format!(
            "pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"",
            containers_named(&implicit)
        ),
        "spec.securityContext.seccompProfile.type".to_string(),
    )
}

fn seccomp_profile_restricted_unless_windows(p: &PodView<'_>) -> Option<Found> {
    if p.is_windows() {
        return None;
    }
    seccomp_profile_restricted(p)
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use serde_json::json;

    use super::*;

    fn at(level: Level, version: &str) -> LevelVersion {
        LevelVersion {
            level,
            version: Version::parse(version).unwrap(),
        }
    }

    fn refusal(level: Level, version: &str, pod: Value) -> String {
        let enforced = at(level, version);
        let findings = enforced.evaluate(&pod);
        assert!(!findings.is_empty(), "{enforced} admits {pod}");
        PodSecurityRefusal { enforced, findings }.message("web")
    }

    fn pod(spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"}, "spec": spec})
    }

    fn compliant() -> Value {
        pod(json!({
            "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "app", "image": "nginx", "securityContext": {
                "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}],
        }))
    }

    #[test]
    fn an_ordinary_pod_fails_four_restricted_checks_in_the_api_servers_words() {
        let plain = pod(json!({"containers": [{"name": "app", "image": "nginx"}]}));
        assert_eq!(
            refusal(Level::Restricted, "v1.34", plain.clone()),
            "pods \"web\" is forbidden: violates PodSecurity \"restricted:v1.34\": \
             allowPrivilegeEscalation != false (container \"app\" must set \
             securityContext.allowPrivilegeEscalation=false), unrestricted capabilities \
             (container \"app\" must set securityContext.capabilities.drop=[\"ALL\"]), \
             runAsNonRoot != true (pod or container \"app\" must set \
             securityContext.runAsNonRoot=true), seccompProfile (pod or container \"app\" must \
             set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")"
        );
        assert!(at(Level::Baseline, "v1.34").evaluate(&plain).is_empty());
        assert!(
            at(Level::Restricted, "latest")
                .evaluate(&compliant())
                .is_empty()
        );
        let findings = at(Level::Restricted, "v1.34").evaluate(&plain);
        assert_eq!(
            findings
                .iter()
                .map(|f| (f.check, f.field.as_str()))
                .collect::<Vec<_>>(),
            [
                (
                    "allowPrivilegeEscalation",
                    "spec.containers[0].securityContext.allowPrivilegeEscalation"
                ),
                (
                    "capabilities_restricted",
                    "spec.containers[0].securityContext.capabilities.drop"
                ),
                ("runAsNonRoot", "spec.securityContext.runAsNonRoot"),
                (
                    "seccompProfile_restricted",
                    "spec.securityContext.seccompProfile.type"
                ),
            ]
        );
    }

    #[test]
    fn baseline_checks_come_first_by_id_and_lists_are_pluralized() {
        let p = pod(json!({
            "hostNetwork": true, "hostPID": true,
            "volumes": [{"name": "root", "hostPath": {"path": "/"}}, {"name": "etc", "hostPath": {"path": "/etc"}}],
            "containers": [
                {"name": "a", "image": "x", "securityContext": {"privileged": true, "capabilities": {"add": ["SYS_ADMIN", "NET_RAW", "CHOWN"]}},
                 "ports": [{"containerPort": 80, "hostPort": 8080}, {"containerPort": 90, "hostPort": 9}]},
                {"name": "b", "image": "x", "securityContext": {"privileged": true}},
            ],
        }));
        assert_eq!(
            refusal(Level::Baseline, "latest", p),
            "pods \"web\" is forbidden: violates PodSecurity \"baseline:latest\": non-default \
             capabilities (container \"a\" must not include \"NET_RAW\", \"SYS_ADMIN\" in \
             securityContext.capabilities.add), host namespaces (hostNetwork=true, hostPID=true), \
             hostPath volumes (volumes \"root\", \"etc\"), hostPort (container \"a\" uses hostPorts \
             8080, 9), privileged (containers \"a\", \"b\" must not set \
             securityContext.privileged=true)"
        );
    }

    #[test]
    fn each_version_runs_the_checks_of_its_standard() {
        let sysctl = pod(
            json!({"securityContext": {"sysctls": [{"name": "net.ipv4.tcp_rmem", "value": "4096"}]},
            "containers": [{"name": "app", "image": "x"}]}),
        );
        assert_eq!(
            refusal(Level::Baseline, "v1.31", sysctl.clone()),
            "pods \"web\" is forbidden: violates PodSecurity \"baseline:v1.31\": forbidden sysctls (net.ipv4.tcp_rmem)"
        );
        assert!(at(Level::Baseline, "v1.32").evaluate(&sysctl).is_empty());

        let probe = pod(json!({"containers": [{"name": "app", "image": "x",
            "livenessProbe": {"httpGet": {"host": "10.0.0.1", "port": 80}}}]}));
        assert!(at(Level::Baseline, "v1.33").evaluate(&probe).is_empty());
        assert_eq!(
            refusal(Level::Baseline, "v1.34", probe),
            "pods \"web\" is forbidden: violates PodSecurity \"baseline:v1.34\": probe or lifecycle \
             host (container \"app\" uses probe or lifecycle host \"10.0.0.1\")"
        );

        // In a user namespace, 1.35 relaxes procMount for baseline but restricted still refuses.
        let unmasked = pod(
            json!({"hostUsers": false, "containers": [{"name": "app", "image": "x",
            "securityContext": {"procMount": "Unmasked"}}]}),
        );
        assert!(at(Level::Baseline, "v1.35").evaluate(&unmasked).is_empty());
        assert!(at(Level::Baseline, "latest").evaluate(&unmasked).is_empty());
        assert_eq!(
            at(Level::Baseline, "v1.34").evaluate(&unmasked)[0].check,
            "procMount"
        );
        let restricted = at(Level::Restricted, "v1.40").evaluate(&unmasked);
        assert!(restricted.iter().any(|f| f.check == "procMount_restricted"));
        assert!(
            !restricted.iter().any(|f| f.check == "runAsNonRoot"),
            "user namespaces relax it"
        );

        // Before 1.19 seccomp was annotations; before 1.22 restricted did not require drop ALL.
        let annotated = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "annotations": {"seccomp.security.alpha.kubernetes.io/pod": "unconfined"}},
            "spec": {"containers": [{"name": "app", "image": "x"}]}});
        assert_eq!(
            at(Level::Baseline, "v1.18").evaluate(&annotated)[0].detail,
            "forbidden annotation seccomp.security.alpha.kubernetes.io/pod=\"unconfined\""
        );
        assert!(at(Level::Baseline, "v1.19").evaluate(&annotated).is_empty());
        let checks = |v| {
            at(Level::Restricted, v)
                .evaluate(&pod(json!({"containers": [{"name": "app", "image": "x"}]})))
                .into_iter()
                .map(|f| f.check)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            checks("v1.21"),
            [
                "allowPrivilegeEscalation",
                "runAsNonRoot",
                "seccompProfile_restricted"
            ]
        );
    }

    #[test]
    fn windows_pods_are_spared_the_linux_only_checks_from_1_25() {
        let windows = pod(
            json!({"os": {"name": "windows"}, "securityContext": {"runAsNonRoot": true},
            "containers": [{"name": "app", "image": "x"}]}),
        );
        assert!(at(Level::Restricted, "v1.25").evaluate(&windows).is_empty());
        assert_eq!(at(Level::Restricted, "v1.24").evaluate(&windows).len(), 3);
    }

    #[test]
    fn app_armor_fields_and_annotations_are_listed_together() {
        let p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "annotations": {
                "container.apparmor.security.beta.kubernetes.io/app": "unconfined"}},
            "spec": {"containers": [{"name": "app", "image": "x",
                "securityContext": {"appArmorProfile": {"type": "Unconfined"}}}]}});
        assert_eq!(
            refusal(Level::Baseline, "v1.34", p),
            "pods \"web\" is forbidden: violates PodSecurity \"baseline:v1.34\": forbidden \
             AppArmor profiles (container \"app\" and annotation must not set AppArmor profile \
             type to \"Unconfined\", \"container.apparmor.security.beta.kubernetes.io/app=\"unconfined\"\")"
        );
    }

    #[test]
    fn namespace_labels_read_as_the_api_server_reads_them() {
        let labels = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        };
        assert_eq!(
            LevelVersion::enforced_by_labels(&labels(&[])),
            at(Level::Privileged, "latest")
        );
        assert_eq!(
            LevelVersion::enforced_by_labels(&labels(&[
                (ENFORCE_LABEL, "baseline"),
                (ENFORCE_VERSION_LABEL, "v1.30")
            ]))
            .to_string(),
            "baseline:v1.30"
        );
        assert_eq!(
            LevelVersion::enforced_by_labels(&labels(&[
                (ENFORCE_LABEL, "strict"),
                (ENFORCE_VERSION_LABEL, "1.30")
            ]))
            .to_string(),
            "restricted:latest",
            "fails closed"
        );
        assert!(Version::parse("v1.05").is_err());
        assert_eq!(Version::parse("v1.0"), Ok(Version::V1(0)));
    }
}
