//! Service account tokens, issued and checked as kube-apiserver 1.36 does: the TokenRequest
//! API (the `token` subresource of ServiceAccounts, `pkg/registry/core/serviceaccount/storage/
//! token.go`) and the token authenticator that TokenReview and bearer tokens go through
//! (`pkg/serviceaccount/jwt.go` and `claims.go`), with their defaults, checks and messages.
//!
//! A token is a JWT carrying kube-apiserver's claims for a bound token: `iss`, `sub`
//! (`system:serviceaccount:<namespace>:<name>`), `aud`, `exp`, `iat`, `nbf`, `jti`, and
//! `kubernetes.io` with the namespace, the ServiceAccount and the Pod, Secret or Node it is
//! bound to. kube-apiserver signs with its service-account key pair (`RS256`); this server
//! signs with HMAC-SHA256 (`HS256`) under a key drawn at each start and kept in memory only,
//! so a token from an earlier start is refused as one signed with a rotated-out key is. No
//! token is ever stored: not in the `--data` snapshot, a log line or an Event.
//!
//! The issuer, and the only API audience, is [`ISSUER`], as kube-apiserver's
//! `--service-account-issuer` with `--api-audiences` left to default to it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use data_encoding::BASE64URL_NOPAD;
use k8s_openapi::api::authentication::v1::{TokenRequest, UserInfo};
use ring::hmac;
use ring::rand::{SecureRandom as _, SystemRandom};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::storage::error::{ApiError, ApiResult};
use crate::storage::resources::AUTHENTICATION_GROUP as GROUP;
use crate::storage::store::{Store, check_type_meta};

/// The tokens' issuer (`iss`) and the server's API audience.
pub const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// `apiVersion` of a TokenRequest.
pub const TOKEN_REQUEST_API_VERSION: &str = "authentication.k8s.io/v1";

/// The expiry a TokenRequest gets when it asks for none (one hour).
const DEFAULT_EXPIRATION_SECONDS: i64 = 60 * 60;

/// The shortest expiry a TokenRequest may ask for (ten minutes).
const MIN_EXPIRATION_SECONDS: i64 = 10 * 60;

/// The longest expiry a TokenRequest may ask for.
const MAX_EXPIRATION_SECONDS: i64 = 1 << 32;

/// The expiry the kubelet asks for in the projected volume the ServiceAccount admission adds
/// (one hour and seven seconds): kube-apiserver extends pod-bound tokens asking for it.
pub const KUBELET_EXPIRATION_SECONDS: i64 = 60 * 60 + 7;

/// How long such an extended token lives (`--service-account-extend-token-expiration`, on by
/// default): a year. The TokenRequest still reports the expiry it asked for.
const EXTENDED_EXPIRATION_SECONDS: i64 = 24 * 365 * 60 * 60;

/// The leeway of time checks, go-jose's default: a token is still valid a minute after `exp`,
/// and an object deleted less than a minute ago still counts.
const LEEWAY: TimeDelta = TimeDelta::seconds(60);

/// go-jose's error for a signature that does not verify.
const CRYPTO_FAILURE: &str = "go-jose/go-jose: error in cryptographic primitive";

/// What kube-apiserver's bearer token authenticators say of a token none of them knows.
const INVALID_BEARER_TOKEN: &str = "invalid bearer token";

/// Issues and authenticates this server's tokens.
#[derive(Debug)]
pub struct Issuer {
    key: hmac::Key,
    /// The `kid` header of every token: random, so it says nothing about the key.
    key_id: String,
    /// Seconds the clock of tokens runs ahead of the system clock (see
    /// [`advance_clock`](Self::advance_clock)).
    clock_offset: AtomicI64,
}

/// The claims of a token, as kube-apiserver writes them (go-jose sorts them by name).
#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    aud: Vec<String>,
    exp: i64,
    iat: i64,
    iss: String,
    jti: String,
    #[serde(rename = "kubernetes.io")]
    kubernetes: PrivateClaims,
    nbf: i64,
    sub: String,
}

/// The `kubernetes.io` claim.
#[derive(Debug, Serialize, Deserialize)]
struct PrivateClaims {
    namespace: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    node: Option<Named>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pod: Option<Named>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    secret: Option<Named>,
    serviceaccount: Named,
    /// Set on an extended token: when it would have expired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    warnafter: Option<i64>,
}

/// An object a token names (a Node's uid is empty when no Node object was found).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Named {
    name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    uid: String,
}

impl Named {
    fn of(object: &Value) -> Self {
        let field = |name: &str| {
            object
                .pointer(&format!("/metadata/{name}"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        Self {
            name: field("name"),
            uid: field("uid"),
        }
    }
}

/// Why a token does not authenticate. Displayed as kube-apiserver's TokenReview says it: its
/// authenticators' errors aggregated, where the loopback token authenticator that comes
/// first knows no token and says [`INVALID_BEARER_TOKEN`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Not a token of this issuer (not a JWT, or another `iss`): no authenticator knows it.
    #[error("{INVALID_BEARER_TOKEN}")]
    NotIssuedHere,
    /// A token of this issuer that does not authenticate, with kube-apiserver's reason.
    #[error("[{INVALID_BEARER_TOKEN}, {0}]")]
    Invalid(String),
}

/// The user a token authenticates as, and the audiences it was accepted for.
#[derive(Debug, Clone)]
pub struct Authenticated {
    pub user: UserInfo,
    pub audiences: Vec<String>,
}

/// RFC 3339 in whole seconds, as `metav1.Time` is written.
pub fn timestamp(time: DateTime<Utc>) -> String {
    time.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// Go's `%q` of a string list: `["a" "b"]`.
fn go_quoted(list: &[String]) -> String {
    let quoted: Vec<String> = list.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", quoted.join(" "))
}

/// A core/v1 object, or kube-apiserver's 404 for it.
fn core_object(store: &Store, plural: &str, namespace: &str, name: &str) -> ApiResult<Value> {
    let rt = store.resource("", "v1", plural)?;
    store.get(&rt, namespace, name)
}

/// Whether an object was marked deleted before `cutoff`.
fn deleted_before(object: &Value, cutoff: DateTime<Utc>) -> bool {
    object
        .pointer("/metadata/deletionTimestamp")
        .and_then(Value::as_str)
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .is_some_and(|t| t < cutoff)
}

fn uid_of(object: &Value) -> &str {
    object
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

impl Issuer {
    /// A new issuer with a fresh random key.
    pub fn new() -> anyhow::Result<Self> {
        let random = SystemRandom::new();
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &random)
            .map_err(|_| anyhow::anyhow!("drawing a token signing key failed"))?;
        let mut key_id = [0u8; 32];
        random
            .fill(&mut key_id)
            .map_err(|_| anyhow::anyhow!("drawing a token key id failed"))?;
        Ok(Self {
            key,
            key_id: BASE64URL_NOPAD.encode(&key_id),
            clock_offset: AtomicI64::new(0),
        })
    }

    /// Moves the clock of tokens (issue times, expiry and deletion checks) forward.
    pub fn advance_clock(&self, by: Duration) {
        let seconds = i64::try_from(by.as_secs()).unwrap_or(i64::MAX);
        self.clock_offset.fetch_add(seconds, Ordering::Relaxed);
    }

    fn now(&self) -> DateTime<Utc> {
        Utc::now() + TimeDelta::seconds(self.clock_offset.load(Ordering::Relaxed))
    }

    fn sign(&self, claims: &Claims) -> ApiResult<String> {
        let encode = |value: &Value| BASE64URL_NOPAD.encode(value.to_string().as_bytes());
        let claims = serde_json::to_value(claims)
            .map_err(|e| ApiError::internal(format!("failed to generate token: {e}")))?;
        let signing_input = format!(
            "{}.{}",
            encode(&json!({"alg": "HS256", "kid": self.key_id})),
            encode(&claims)
        );
        let signature = hmac::sign(&self.key, signing_input.as_bytes());
        Ok(format!(
            "{signing_input}.{}",
            BASE64URL_NOPAD.encode(signature.as_ref())
        ))
    }

    /// Answers a TokenRequest (`body`) for the ServiceAccount `name` of `namespace`: the
    /// request with its defaults, metadata and `status.token`, or kube-apiserver's error.
    pub fn request(
        &self,
        store: &Store,
        namespace: &str,
        name: &str,
        mut body: Value,
    ) -> ApiResult<Value> {
        check_type_meta(&body, TOKEN_REQUEST_API_VERSION, "TokenRequest")?;
        // The status is the server's to write (a protobuf body carries an empty one).
        if let Value::Object(fields) = &mut body {
            fields.remove("status");
        }
        let mut request: TokenRequest = serde_json::from_value(body).map_err(|e| {
            ApiError::bad_request(format!("the request body is not a TokenRequest: {e}"))
        })?;
        let invalid = |name: &str, field: &str, message: String| {
            ApiError::invalid(GROUP, "TokenRequest", name, field, &message)
        };
        let meta = &mut request.metadata;
        if let Some(requested) = meta.name.as_deref().filter(|n| !n.is_empty() && *n != name) {
            return Err(invalid(
                name,
                "metadata.name",
                format!(
                    "Invalid value: {requested:?}: must match the service account name if specified"
                ),
            ));
        }
        if let Some(requested) = meta
            .namespace
            .as_deref()
            .filter(|n| !n.is_empty() && *n != namespace)
        {
            return Err(invalid(
                name,
                "metadata.namespace",
                format!(
                    "Invalid value: {requested:?}: must match the service account namespace if specified"
                ),
            ));
        }
        let service_account = core_object(store, "serviceaccounts", namespace, name)?;
        let service_account_uid = uid_of(&service_account).to_string();
        if let Some(requested) = meta
            .uid
            .as_deref()
            .filter(|u| !u.is_empty() && *u != service_account_uid)
        {
            return Err(ApiError::conflict(
                GROUP,
                "TokenRequest",
                name,
                &format!(
                    "the UID in the token request ({requested}) does not match the UID of the service account ({service_account_uid})"
                ),
            ));
        }
        let spec = &mut request.spec;
        if spec.audiences.is_empty() {
            spec.audiences = vec![ISSUER.to_string()];
        }
        let expiration = *spec
            .expiration_seconds
            .get_or_insert(DEFAULT_EXPIRATION_SECONDS);
        meta.name = Some(name.to_string());
        meta.namespace = Some(namespace.to_string());
        meta.uid = Some(service_account_uid.clone());
        let now = self.now();
        if expiration < MIN_EXPIRATION_SECONDS {
            return Err(invalid(
                "",
                "spec.expirationSeconds",
                format!(
                    "Invalid value: {expiration}: may not specify a duration less than 10 minutes"
                ),
            ));
        }
        if expiration > MAX_EXPIRATION_SECONDS {
            return Err(invalid(
                "",
                "spec.expirationSeconds",
                format!(
                    "Invalid value: {expiration}: may not specify a duration larger than 2^32 seconds"
                ),
            ));
        }
        let mut private = PrivateClaims {
            namespace: namespace.to_string(),
            node: None,
            pod: None,
            secret: None,
            serviceaccount: Named::of(&service_account),
            warnafter: None,
        };
        if let Some(reference) = &spec.bound_object_ref {
            bind(store, namespace, name, reference, &mut private)?;
        }
        // The kubelet's pod-bound tokens for the API server live a year, and say when they
        // would have expired (kube-apiserver's safe rollout of bound tokens).
        let mut lifetime = expiration;
        if private.pod.is_some()
            && expiration == KUBELET_EXPIRATION_SECONDS
            && spec.audiences.iter().all(|a| a == ISSUER)
        {
            private.warnafter = Some((now + TimeDelta::seconds(expiration)).timestamp());
            lifetime = EXTENDED_EXPIRATION_SECONDS;
        }
        let claims = Claims {
            aud: spec.audiences.clone(),
            exp: (now + TimeDelta::seconds(lifetime)).timestamp(),
            iat: now.timestamp(),
            iss: ISSUER.to_string(),
            jti: uuid::Uuid::new_v4().to_string(),
            kubernetes: private,
            nbf: now.timestamp(),
            sub: service_account_username(namespace, name),
        };
        let token = self.sign(&claims)?;
        let mut answer = serde_json::to_value(&request)
            .map_err(|e| ApiError::internal(format!("encoding the TokenRequest: {e}")))?;
        answer["metadata"]["creationTimestamp"] = json!(timestamp(now));
        answer["status"] = json!({
            "token": token,
            "expirationTimestamp": timestamp(now + TimeDelta::seconds(expiration)),
        });
        Ok(answer)
    }

    /// Authenticates `token` for `audiences` (the server's when empty), as kube-apiserver's
    /// service account token authenticator and its validator do.
    pub fn authenticate(
        &self,
        store: &Store,
        token: &str,
        audiences: &[String],
    ) -> Result<Authenticated, Refusal> {
        let parts: Vec<&str> = token.split('.').collect();
        let [header_part, payload, signature] = parts.as_slice() else {
            return Err(Refusal::NotIssuedHere);
        };
        let decode = |part: &str| -> Option<Value> {
            serde_json::from_slice(&BASE64URL_NOPAD.decode(part.as_bytes()).ok()?).ok()
        };
        let issued_here =
            decode(payload).is_some_and(|claims| claims.get("iss") == Some(&json!(ISSUER)));
        if token.trim_start().starts_with('{') || !issued_here {
            return Err(Refusal::NotIssuedHere);
        }
        let header = decode(header_part).ok_or(Refusal::NotIssuedHere)?;
        let invalid = |message: &str| Refusal::Invalid(message.to_string());
        match header.get("kid").and_then(Value::as_str) {
            Some(kid) if !kid.is_empty() && kid != self.key_id => {
                return Err(invalid("invalid signature, no keys found"));
            }
            _ => {}
        }
        let verified = header.get("alg") == Some(&json!("HS256"))
            && BASE64URL_NOPAD
                .decode(signature.as_bytes())
                .is_ok_and(|signature| {
                    let signing_input = format!("{header_part}.{payload}");
                    hmac::verify(&self.key, signing_input.as_bytes(), &signature).is_ok()
                });
        if !verified {
            return Err(invalid(CRYPTO_FAILURE));
        }
        let claims: Claims = BASE64URL_NOPAD
            .decode(payload.as_bytes())
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .ok_or_else(|| invalid("service account token claims could not be validated"))?;
        let api_audiences = [ISSUER.to_string()];
        let token_audiences = if claims.aud.is_empty() {
            &api_audiences[..]
        } else {
            &claims.aud[..]
        };
        let requested = if audiences.is_empty() {
            &api_audiences[..]
        } else {
            audiences
        };
        let accepted: Vec<String> = token_audiences
            .iter()
            .filter(|a| requested.contains(a))
            .cloned()
            .collect();
        if accepted.is_empty() {
            return Err(Refusal::Invalid(format!(
                "token audiences {} is invalid for the target audiences {}",
                go_quoted(token_audiences),
                go_quoted(requested)
            )));
        }
        let user = self.validate(store, &claims).map_err(Refusal::Invalid)?;
        Ok(Authenticated {
            user,
            audiences: accepted,
        })
    }

    /// The checks of kube-apiserver's validator: times, then the ServiceAccount and the
    /// bound object still there with the uids the token names.
    fn validate(&self, store: &Store, claims: &Claims) -> Result<UserInfo, String> {
        let now = self.now();
        let at = |seconds: i64| DateTime::from_timestamp(seconds, 0).unwrap_or_default();
        if now + LEEWAY < at(claims.nbf) {
            return Err("service account token is not valid yet".into());
        }
        if now - LEEWAY > at(claims.exp) {
            return Err("service account token has expired".into());
        }
        if now + LEEWAY < at(claims.iat) {
            return Err("service account token is issued in the future".into());
        }
        let cutoff = now - LEEWAY;
        let private = &claims.kubernetes;
        let namespace = private.namespace.as_str();
        let sa = &private.serviceaccount;
        let service_account =
            core_object(store, "serviceaccounts", namespace, &sa.name).map_err(|e| e.message)?;
        if uid_of(&service_account) != sa.uid {
            return Err(format!(
                "service account UID ({}) does not match claim ({})",
                uid_of(&service_account),
                sa.uid
            ));
        }
        if deleted_before(&service_account, cutoff) {
            return Err(format!(
                "service account {namespace}/{} has been deleted",
                sa.name
            ));
        }
        let invalidated = || "service account token has been invalidated".to_string();
        for (plural, bound) in [("secrets", &private.secret), ("pods", &private.pod)] {
            let Some(bound) = bound else {
                continue;
            };
            let object =
                core_object(store, plural, namespace, &bound.name).map_err(|_| invalidated())?;
            if uid_of(&object) != bound.uid {
                let kind = if plural == "pods" { "pod" } else { "secret" };
                return Err(format!(
                    "{kind} UID ({}) does not match service account {kind} ref claim ({})",
                    uid_of(&object),
                    bound.uid
                ));
            }
            if deleted_before(&object, cutoff) {
                return Err(invalidated());
            }
        }
        // A token bound to a Node itself needs that Node, and this server has none.
        if private.node.is_some() && private.pod.is_none() {
            return Err(invalidated());
        }
        let mut extra = BTreeMap::new();
        if let Some(pod) = private.pod.as_ref().filter(|p| !p.uid.is_empty()) {
            extra.insert(
                "authentication.kubernetes.io/pod-name".to_string(),
                vec![pod.name.clone()],
            );
            extra.insert(
                "authentication.kubernetes.io/pod-uid".to_string(),
                vec![pod.uid.clone()],
            );
        }
        if !claims.jti.is_empty() {
            extra.insert(
                "authentication.kubernetes.io/credential-id".to_string(),
                vec![format!("JTI={}", claims.jti)],
            );
        }
        if let Some(node) = &private.node {
            extra.insert(
                "authentication.kubernetes.io/node-name".to_string(),
                vec![node.name.clone()],
            );
            if !node.uid.is_empty() {
                extra.insert(
                    "authentication.kubernetes.io/node-uid".to_string(),
                    vec![node.uid.clone()],
                );
            }
        }
        Ok(UserInfo {
            username: Some(service_account_username(namespace, &sa.name)),
            uid: Some(sa.uid.clone()),
            groups: Some(vec![
                "system:serviceaccounts".to_string(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".to_string(),
            ]),
            extra: (!extra.is_empty()).then_some(extra),
        })
    }
}

/// `system:serviceaccount:<namespace>:<name>`.
fn service_account_username(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// Checks a TokenRequest's `boundObjectRef` as kube-apiserver does and names the object in
/// the claims: a Pod that runs as the ServiceAccount `service_account`, or a Secret, of
/// `namespace`, with the uid the reference gives, if any. A Pod bound to a node also names
/// the node (without a uid: this server has no Node objects, as when a Node is not found).
fn bind(
    store: &Store,
    namespace: &str,
    service_account: &str,
    reference: &k8s_openapi::api::authentication::v1::BoundObjectReference,
    private: &mut PrivateClaims,
) -> ApiResult<()> {
    let api_version = reference.api_version.as_deref().unwrap_or_default();
    let kind = reference.kind.as_deref().unwrap_or_default();
    let name = reference.name.as_deref().unwrap_or_default();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let object = match (group, kind) {
        ("", "Pod") => {
            let pod = core_object(store, "pods", namespace, name)?;
            if pod
                .pointer("/spec/serviceAccountName")
                .and_then(Value::as_str)
                != Some(service_account)
            {
                return Err(ApiError::bad_request(format!(
                    "cannot bind token for serviceaccount {service_account:?} to pod running with different serviceaccount name."
                )));
            }
            private.node = pod
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .map(|n| Named {
                    name: n.to_string(),
                    uid: String::new(),
                });
            private.pod = Some(Named::of(&pod));
            pod
        }
        ("", "Secret") => {
            let secret = core_object(store, "secrets", namespace, name)?;
            private.secret = Some(Named::of(&secret));
            secret
        }
        ("", "Node") => return Err(ApiError::not_found("", "nodes", name)),
        _ => {
            return Err(ApiError::bad_request(format!(
                "cannot bind token to object of type {group}/{version}, Kind={kind}"
            )));
        }
    };
    match reference.uid.as_deref() {
        Some(uid) if !uid.is_empty() && uid != uid_of(&object) => Err(ApiError::conflict(
            "",
            kind,
            name,
            &format!(
                "the UID in the bound object reference ({uid}) does not match the UID in record. The object might have been deleted and then recreated"
            ),
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_quoting_of_audience_lists() {
        assert_eq!(
            go_quoted(&["a".to_string(), "b c".to_string()]),
            r#"["a" "b c"]"#
        );
    }

    #[test]
    fn tokens_of_another_key_or_tampered_are_refused() {
        let store = Store::new(10, std::sync::Arc::new(crate::admission::chain::Chain));
        let issuer = Issuer::new().unwrap();
        let other = Issuer::new().unwrap();
        let claims = Claims {
            aud: vec![ISSUER.to_string()],
            exp: 0,
            iat: 0,
            iss: ISSUER.to_string(),
            jti: String::new(),
            kubernetes: PrivateClaims {
                namespace: "default".into(),
                node: None,
                pod: None,
                secret: None,
                serviceaccount: Named {
                    name: "default".into(),
                    uid: String::new(),
                },
                warnafter: None,
            },
            nbf: 0,
            sub: service_account_username("default", "default"),
        };
        let token = other.sign(&claims).unwrap();
        assert_eq!(
            issuer.authenticate(&store, &token, &[]).unwrap_err(),
            Refusal::Invalid("invalid signature, no keys found".into())
        );
        let token = issuer.sign(&claims).unwrap();
        let mut parts: Vec<&str> = token.split('.').collect();
        let forged = BASE64URL_NOPAD.encode(
            b"{\"iss\":\"https://kubernetes.default.svc.cluster.local\",\"exp\":99999999999}",
        );
        parts[1] = &forged;
        assert_eq!(
            issuer
                .authenticate(&store, &parts.join("."), &[])
                .unwrap_err(),
            Refusal::Invalid(CRYPTO_FAILURE.into())
        );
        assert_eq!(
            issuer.authenticate(&store, "not-a-jwt", &[]).unwrap_err(),
            Refusal::NotIssuedHere
        );
        // Signed and unexpired checks come after the signature: this one expired in 1970.
        assert_eq!(
            issuer.authenticate(&store, &token, &[]).unwrap_err(),
            Refusal::Invalid("service account token has expired".into())
        );
    }
}
