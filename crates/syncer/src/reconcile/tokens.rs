//! The decisions about a tenant pod's token Secret: tokens of its own ServiceAccount issued,
//! refreshed or replaced, or refused (the TokenRequest failed, or something else is at the
//! Secret's name); the Secret drifted (edited or deleted on the host by someone else), and the
//! issue that corrects it. Each names the tokens' ServiceAccount, audiences, expiry and key;
//! never a token.

use tenantplane_api::tenant::DriftPolicy;
use tenantplane_core::TenantObject;
use tenantplane_core::decision::{
    Decision, HostAction, HostTarget, IssuedToken, Outcome, Stamp, Subject,
};
use tenantplane_core::drift::{Drift, DriftChange};
use tenantplane_core::mapping::TenantPlacement;
use tenantplane_core::pod_world::{self, MintedToken, TokenUpkeep};

/// The decision to put tokens of a tenant pod's own ServiceAccount (`service_account`) into its
/// token Secret `secret` (what `upkeep` found of it): issued when there is none (Create), else
/// refreshed or replaced (Update). It names each token's ServiceAccount, audiences, expiry and
/// key; never a token.
pub fn issued(
    tenant: &TenantPlacement,
    pod: &TenantObject,
    secret: &str,
    upkeep: &TokenUpkeep,
    minted: &[MintedToken],
    service_account: &str,
    stamp: Stamp,
) -> Decision {
    let (action, reason, why) = match upkeep {
        TokenUpkeep::Issue => (
            HostAction::Create,
            "ServiceAccountTokenIssued",
            String::new(),
        ),
        TokenUpkeep::Replace(why) => (
            HostAction::Update,
            "ServiceAccountTokenIssued",
            format!(" (the Secret was replaced: {why})"),
        ),
        _ => (
            HostAction::Update,
            "ServiceAccountTokenRefreshed",
            String::new(),
        ),
    };
    let tokens: Vec<IssuedToken> = minted
        .iter()
        .map(|t| IssuedToken {
            audiences: t.request.audience.iter().cloned().collect(),
            expires: t.expires,
            key: t.request.key.clone(),
            service_account: service_account.to_string(),
        })
        .collect();
    let each: Vec<String> = minted
        .iter()
        .map(|t| {
            format!(
                "{} (audience {}, expires {}, refreshed at {})",
                t.request.key,
                t.request
                    .audience
                    .as_deref()
                    .unwrap_or("of the tenant API server"),
                t.expires,
                pod_world::refresh_at(t.issued, t.expires)
            )
        })
        .collect();
    let message = format!(
        "tokens of ServiceAccount {service_account} from the tenant API server's TokenRequest, \
         bound to pod {} (uid {}), in host Secret {}/{secret}{why}: {}",
        pod.identity,
        pod.identity.uid,
        tenant.host_namespace,
        each.join("; ")
    );
    let mut d = about_secret(tenant, pod, secret, Outcome::Synced, reason, message, stamp);
    d.action = action;
    d.tokens = tokens;
    d
}

/// The decision that a tenant pod gets no tokens now: its TokenRequest failed (`Failed`,
/// retried) or something else is at its token Secret's name (`Conflict`, left untouched).
pub fn refused(
    tenant: &TenantPlacement,
    pod: &TenantObject,
    secret: &str,
    outcome: Outcome,
    reason: &str,
    message: String,
    stamp: Stamp,
) -> Decision {
    about_secret(tenant, pod, secret, outcome, reason, message, stamp)
}

/// The Drifted decision about a tenant pod's token Secret that someone else changed or deleted
/// on the host (`drift`, after `streak` drifts in a row), under `policy`.
pub fn drifted(
    tenant: &TenantPlacement,
    pod: &TenantObject,
    secret: &str,
    drift: Drift,
    streak: u32,
    policy: DriftPolicy,
    stamp: Stamp,
) -> Decision {
    let d = about_secret(
        tenant,
        pod,
        secret,
        Outcome::Drifted,
        "",
        String::new(),
        stamp,
    );
    super::drift::drifted_decision(d, drift, streak, policy)
}

/// `issued` (new tokens, [`issued`]) made the correction of `drift`, recorded by the Drifted
/// decision `drift_id`: it names that decision and says what it corrects.
pub fn correcting(mut issued: Decision, drift: &Drift, drift_id: &str) -> Decision {
    let what = match drift.change {
        DriftChange::Deleted => "the Secret deleted on the host, re-created with new tokens",
        DriftChange::Edited | DriftChange::ProvenanceRemoved => {
            "the Secret edited on the host, replaced with new tokens and every field tenantplane \
             sets"
        }
    };
    issued.message = format!("{what} (drift decision {drift_id}): {}", issued.message);
    issued.drift = Some(drift.correcting(drift_id));
    issued
}

fn about_secret(
    tenant: &TenantPlacement,
    pod: &TenantObject,
    secret: &str,
    outcome: Outcome,
    reason: &str,
    message: String,
    stamp: Stamp,
) -> Decision {
    let id = &pod.identity;
    Decision {
        id: stamp.id,
        time: stamp.time,
        tenant: tenant.tenant.clone(),
        subject: Subject {
            api_version: id.api_version.clone(),
            kind: id.kind.clone(),
            namespace: id.namespace.clone(),
            name: id.name.clone(),
            uid: id.uid.clone(),
            resource_version: pod.resource_version.clone().unwrap_or_default(),
        },
        target: Some(HostTarget {
            api_version: "v1".into(),
            kind: "Secret".into(),
            namespace: tenant.host_namespace.clone(),
            name: secret.to_string(),
        }),
        outcome,
        action: HostAction::None,
        policy: None,
        profile: None,
        reason: reason.into(),
        message,
        field_path: None,
        stripped_keys: Vec::new(),
        input_digest: tenantplane_core::planner::input_digest(&pod.object),
        mapping_version: tenant.mapping.to_string(),
        component: stamp.component,
        component_version: stamp.component_version,
        trace_id: stamp.trace_id,
        span_id: stamp.span_id,
        closes: None,
        tokens: Vec::new(),
        drift: None,
    }
}
