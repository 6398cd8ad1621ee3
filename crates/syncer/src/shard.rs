//! Lease sharding: several syncer replicas split the Tenants between them through
//! `coordination.k8s.io/v1` Leases in the syncer's namespace; nothing home-made coordinates them.
//!
//! ```text
//!  replica a ──renew every R──▶ Lease tenantplane-syncer-a ┐
//!  replica b ──renew every R──▶ Lease tenantplane-syncer-b ┼─ list (label tenantplane.io/syncer-shard=member)
//!                                                          ┘     │ live: a renewal seen within D
//!  Tenant t ──▶ owner = the live member with the highest hash(member, t)   (rendezvous hashing)
//! ```
//!
//! Each replica holds a membership Lease, `tenantplane-syncer-<replica id>`, renewed every renew
//! interval R (a `resourceVersion`-guarded replace). The live members, in a replica's view, are
//! the Leases whose last change it saw less than the lease duration D ago, measured on its own
//! clock from the moment it saw the change (as client-go's leader election does: clocks need not
//! agree). A Tenant belongs to the live member with the highest rendezvous hash of (member,
//! Tenant name): a member joining or leaving moves only the Tenants it takes or had.
//!
//! Fencing, so that a Tenant is never served by two replicas at once:
//! - a replica whose renew-and-list round has not succeeded for D − 3R serves nothing (its view
//!   is too old to be trusted; others will see its Lease expire no earlier than D after its last
//!   renewal);
//! - a replica stops a Tenant's runtime as soon as its view gives the Tenant to someone else;
//! - a replica starts a Tenant only when its view has given it the Tenant continuously for the
//!   last D: a previous owner has by then either seen the new view (it lists every R) and stopped,
//!   or stopped renewing, and so fenced itself.
//!
//! So a Tenant of a replica that dies is served again after about 2D (its Lease expiring, then
//! the new owner's wait), and a replica that starts serves its first Tenants after D. Handover
//! needs nothing else: the syncer is level-triggered, and a new owner finds the host objects in
//! place (Unchanged, no write, nothing recorded).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt as _};
use sha2::{Digest, Sha256};

/// Label on every membership Lease (value [`MEMBER`]).
pub const SHARD_LABEL: &str = "tenantplane.io/syncer-shard";
/// Value of [`SHARD_LABEL`].
pub const MEMBER: &str = "member";
/// Prefix of a membership Lease's name; the replica id follows.
pub const LEASE_PREFIX: &str = "tenantplane-syncer-";

/// How a replica takes part in sharding.
#[derive(Debug, Clone)]
pub struct ShardConfig {
    /// This replica's id (the pod name): its Lease's holder identity and name suffix.
    pub replica_id: String,
    /// Namespace of the membership Leases (the syncer's own).
    pub namespace: String,
    /// How long a Lease stays live without a renewal (D).
    pub lease_duration: Duration,
    /// How often the Lease is renewed and the members listed (R).
    pub renew_interval: Duration,
}

impl ShardConfig {
    /// Checks the settings: the replica id must make a valid Lease name, and the lease duration
    /// must exceed three renew intervals (the margin of the fencing rule).
    pub fn new(
        replica_id: &str,
        namespace: &str,
        lease_duration: Duration,
        renew_interval: Duration,
    ) -> anyhow::Result<ShardConfig> {
        let name = format!("{LEASE_PREFIX}{replica_id}");
        let valid = !replica_id.is_empty()
            && name.len() <= 253
            && replica_id
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
            && replica_id
                .chars()
                .last()
                .is_some_and(|c| c.is_ascii_alphanumeric());
        if !valid {
            bail!(
                "replica id {replica_id:?} cannot name a Lease ({name:?}): use lowercase letters, \
                 digits, '-' and '.', ending with a letter or digit (a pod name does)"
            );
        }
        if namespace.is_empty() {
            bail!("the shard lease namespace is empty");
        }
        if renew_interval.is_zero() || lease_duration <= renew_interval * 3 {
            bail!(
                "the shard lease duration ({lease_duration:?}) must be more than three renew \
                 intervals ({renew_interval:?} each)"
            );
        }
        Ok(ShardConfig {
            replica_id: replica_id.to_string(),
            namespace: namespace.to_string(),
            lease_duration,
            renew_interval,
        })
    }

    fn lease_name(&self) -> String {
        format!("{LEASE_PREFIX}{}", self.replica_id)
    }

    /// How long a replica keeps serving after its last good round.
    fn fence_after(&self) -> Duration {
        self.lease_duration - self.renew_interval * 3
    }
}

/// What a replica has seen of the membership.
#[derive(Debug, Default)]
struct View {
    /// The live members (sorted) from the moment this replica saw them so, oldest first; an
    /// empty set while fenced.
    history: VecDeque<(Instant, Vec<String>)>,
    /// Per other member's Lease: its last resourceVersion and when it was seen to change.
    seen: HashMap<String, (String, Instant)>,
    /// When the last round in which both the renewal and the list succeeded began.
    last_good: Option<Instant>,
}

impl View {
    /// Whether the last good round is too old for the view to be trusted.
    fn fenced(&self, config: &ShardConfig, now: Instant) -> bool {
        self.last_good
            .is_none_or(|t| now.duration_since(t) > config.fence_after())
    }

    fn serves(&self, config: &ShardConfig, tenant: &str, running: bool, now: Instant) -> bool {
        if self.fenced(config, now) {
            return false;
        }
        let me = config.replica_id.as_str();
        let Some((_, current)) = self.history.back() else {
            return false;
        };
        if owner(tenant, current) != Some(me) {
            return false;
        }
        if running {
            return true;
        }
        let Some(window_start) = now.checked_sub(config.lease_duration) else {
            return false;
        };
        // The view in effect at the window's start, and every later one.
        let Some(first) = self.history.iter().rposition(|(t, _)| *t <= window_start) else {
            return false;
        };
        self.history
            .iter()
            .skip(first)
            .all(|(_, members)| owner(tenant, members) == Some(me))
    }
}

/// This replica's membership and its view of the others.
#[derive(Debug)]
pub struct Shard {
    config: ShardConfig,
    leases: Api<Lease>,
    view: Mutex<View>,
}

/// The owner of `tenant` among `members`: the highest rendezvous hash.
pub fn owner<'a>(tenant: &str, members: &'a [String]) -> Option<&'a str> {
    let score = |member: &str| {
        let digest = Sha256::new()
            .chain_update(member.as_bytes())
            .chain_update([0])
            .chain_update(tenant.as_bytes())
            .finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        u64::from_be_bytes(first)
    };
    members
        .iter()
        .max_by_key(|m| (score(m), m.as_str()))
        .map(String::as_str)
}

impl Shard {
    /// A member of the shard through `client`; nothing is written before [`Shard::round`].
    pub fn new(client: Client, config: ShardConfig) -> Shard {
        Shard {
            leases: Api::namespaced(client, &config.namespace),
            config,
            view: Mutex::new(View::default()),
        }
    }

    /// This replica's id.
    pub fn replica_id(&self) -> &str {
        &self.config.replica_id
    }

    /// How often [`Shard::round`] should run.
    pub fn renew_interval(&self) -> Duration {
        self.config.renew_interval
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, View> {
        self.view.lock().expect("shard view lock")
    }

    /// Renews this replica's Lease and lists the members, within one renew interval; then
    /// updates the view (or fences this replica when rounds have failed for too long).
    pub async fn round(&self) {
        let began = Instant::now();
        let result = tokio::time::timeout(self.config.renew_interval, async {
            self.renew().await?;
            self.leases
                .list(&ListParams::default().labels(&format!("{SHARD_LABEL}={MEMBER}")))
                .await
                .context("listing the shard's Leases")
        })
        .await
        .unwrap_or_else(|_| Err(anyhow::anyhow!("the shard round timed out")));
        let now = Instant::now();
        let mut view = self.lock();
        match result {
            Ok(list) => {
                view.last_good = Some(began);
                let mut members = vec![self.config.replica_id.clone()];
                let mut present = HashMap::new();
                for lease in list {
                    let Some(holder) = lease.spec.as_ref().and_then(|s| s.holder_identity.clone())
                    else {
                        continue;
                    };
                    if holder == self.config.replica_id {
                        continue;
                    }
                    let version = lease.resource_version().unwrap_or_default();
                    let seen_at = match view.seen.get(&holder) {
                        Some((v, at)) if *v == version => *at,
                        _ => now,
                    };
                    if now.duration_since(seen_at) < self.config.lease_duration {
                        members.push(holder.clone());
                    }
                    present.insert(holder, (version, seen_at));
                }
                view.seen = present;
                members.sort();
                members.dedup();
                record_view(&mut view, now, members, self.config.lease_duration);
            }
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), replica = %self.config.replica_id, "shard round failed");
                if view.fenced(&self.config, now) {
                    record_view(&mut view, now, Vec::new(), self.config.lease_duration);
                }
            }
        }
    }

    /// Creates or renews this replica's Lease.
    async fn renew(&self) -> anyhow::Result<()> {
        let name = self.config.lease_name();
        let now = MicroTime(Timestamp::now());
        let seconds =
            i32::try_from(self.config.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX);
        match self
            .leases
            .get_opt(&name)
            .await
            .context("reading our Lease")?
        {
            Some(mut lease) => {
                let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
                if spec.holder_identity.as_deref() != Some(&self.config.replica_id) {
                    tracing::warn!(lease = %name, holder = ?spec.holder_identity, "taking over a Lease held under another identity");
                    spec.acquire_time = Some(now.clone());
                }
                spec.holder_identity = Some(self.config.replica_id.clone());
                spec.lease_duration_seconds = Some(seconds);
                spec.renew_time = Some(now);
                self.leases
                    .replace(&name, &PostParams::default(), &lease)
                    .await
                    .context("renewing our Lease")?;
            }
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(name),
                        namespace: Some(self.config.namespace.clone()),
                        labels: Some([(SHARD_LABEL.to_string(), MEMBER.to_string())].into()),
                        ..Default::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(self.config.replica_id.clone()),
                        lease_duration_seconds: Some(seconds),
                        acquire_time: Some(now.clone()),
                        renew_time: Some(now),
                        ..Default::default()
                    }),
                };
                self.leases
                    .create(&PostParams::default(), &lease)
                    .await
                    .context("creating our Lease")?;
            }
        }
        Ok(())
    }

    /// Whether this replica serves `tenant` now. `running`: it already does (then it goes on
    /// while the Tenant is still its own); otherwise it starts only when the Tenant has been its
    /// own for the whole last lease duration.
    pub fn serves(&self, tenant: &str, running: bool) -> bool {
        self.lock()
            .serves(&self.config, tenant, running, Instant::now())
    }

    /// The live members in this replica's view (empty while fenced).
    pub fn members(&self) -> Vec<String> {
        let view = self.lock();
        if view.fenced(&self.config, Instant::now()) {
            return Vec::new();
        }
        view.history
            .back()
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }

    /// Deletes this replica's Lease (at shutdown, once its tenants are stopped), so the others
    /// see it leave at their next round rather than after the lease duration.
    pub async fn release(&self) {
        if let Err(e) = self
            .leases
            .delete(&self.config.lease_name(), &DeleteParams::default())
            .await
        {
            tracing::warn!(error = %e, "releasing the shard Lease failed; it expires by itself");
        }
    }
}

/// Appends `members` to the history when they differ from the current view, and forgets views
/// that ended more than `keep` ago.
fn record_view(view: &mut View, at: Instant, members: Vec<String>, keep: Duration) {
    if view.history.back().map(|(_, m)| m) != Some(&members) {
        if let Some((_, previous)) = view.history.back() {
            tracing::info!(?previous, ?members, "shard members changed");
        }
        view.history.push_back((at, members));
    }
    if let Some(horizon) = at.checked_sub(keep) {
        while view.history.len() > 1 && view.history[1].0 <= horizon {
            view.history.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn rendezvous_moves_only_the_tenants_of_the_member_that_joins_or_leaves() {
        let two = names(&["a", "b"]);
        let three = names(&["a", "b", "c"]);
        let tenants: Vec<String> = (0..200).map(|i| format!("tenant-{i}")).collect();
        let mut to_c = 0;
        for t in &tenants {
            let before = owner(t, &two).unwrap();
            let after = owner(t, &three).unwrap();
            if after == "c" {
                to_c += 1;
            } else {
                assert_eq!(before, after, "{t} moved between the members that stayed");
            }
        }
        assert!((40..=90).contains(&to_c), "c takes about a third: {to_c}");
        assert_eq!(owner("x", &[]), None);
    }

    #[test]
    fn bad_settings_get_specific_errors() {
        let d = Duration::from_secs;
        assert!(ShardConfig::new("syncer-7d4b9-x2x9q", "tenantplane-system", d(15), d(2)).is_ok());
        let e = ShardConfig::new("Syncer_1", "ns", d(15), d(2)).unwrap_err();
        assert!(e.to_string().contains("cannot name a Lease"), "{e}");
        let e = ShardConfig::new("a", "ns", d(6), d(2)).unwrap_err();
        assert!(
            e.to_string().contains("more than three renew intervals"),
            "{e}"
        );
    }

    #[test]
    fn a_tenant_starts_only_after_a_whole_lease_duration_as_ours_and_stops_when_fenced() {
        let ms = Duration::from_millis;
        let config = ShardConfig::new("a", "ns", ms(400), ms(100)).unwrap();
        let t0 = Instant::now();
        let mut view = View {
            last_good: Some(t0),
            ..View::default()
        };
        record_view(&mut view, t0, names(&["a"]), ms(400));
        let at = |d: u64| t0 + ms(d);
        assert!(
            !view.serves(&config, "t", false, at(50)),
            "ours for less than D"
        );
        assert!(
            view.serves(&config, "t", true, at(50)),
            "a running tenant goes on"
        );
        view.last_good = Some(at(400));
        assert!(
            view.serves(&config, "t", false, at(410)),
            "ours for the whole of D"
        );

        // b joins and takes t: stop at once; b leaves again: t is ours only D later.
        let b_takes = (0..100)
            .map(|i| format!("t{i}"))
            .find(|t| owner(t, &names(&["a", "b"])) == Some("b"))
            .unwrap();
        view.last_good = Some(at(500));
        record_view(&mut view, at(500), names(&["a", "b"]), ms(400));
        assert!(!view.serves(&config, &b_takes, true, at(510)));
        view.last_good = Some(at(600));
        record_view(&mut view, at(600), names(&["a"]), ms(400));
        assert!(!view.serves(&config, &b_takes, false, at(700)));
        view.last_good = Some(at(1000));
        assert!(view.serves(&config, &b_takes, false, at(1010)));

        // No good round for more than D - 3R (100 ms): nothing is served.
        assert!(!view.serves(&config, "t", true, at(1150)));
    }
}
