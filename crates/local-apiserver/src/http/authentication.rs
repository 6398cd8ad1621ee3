//! The reviews of `authentication.k8s.io/v1`, create-only and never stored like the access
//! reviews (`http/reviews.rs`): TokenReview authenticates a token with this server's token
//! authenticator (`admission/tokens.rs`), and SelfSubjectReview, which `kubectl auth whoami`
//! sends, says whom the request's own credentials authenticate.
//!
//! The server authenticates no other request. A SelfSubjectReview carrying a bearer token
//! this server issued is answered with that token's service account, or refused with 401
//! Unauthorized when the token no longer authenticates (expired, bound object deleted, ...),
//! as kube-apiserver refuses it; one with any other credentials or none is answered as
//! [`ADMIN`], the user every request acts as here.

use axum::http::{HeaderMap, header};
use chrono::Utc;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewStatus, UserInfo};
use serde_json::{Value, json};

use crate::admission::tokens::{Issuer, Refusal, timestamp};
use crate::storage::error::{ApiError, ApiResult};
use crate::storage::resources::{AUTHENTICATION_GROUP, ResourceType};
use crate::storage::store::{Store, check_type_meta};

/// The user every request without a token of this server's issuing acts as.
pub const ADMIN: &str = "tenantplane-local-admin";

/// The groups of [`ADMIN`], a cluster administrator's.
const ADMIN_GROUPS: [&str; 2] = ["system:masters", "system:authenticated"];

/// The answered review of `rt` (TokenReview or SelfSubjectReview).
pub fn answer(
    issuer: &Issuer,
    store: &Store,
    rt: &ResourceType,
    headers: &HeaderMap,
    review: Value,
) -> ApiResult<Value> {
    check_type_meta(&review, &rt.api_version(), &rt.kind)?;
    if rt.kind == "TokenReview" {
        token_review(issuer, store, review)
    } else {
        self_subject_review(issuer, store, headers)
    }
}

fn token_review(issuer: &Issuer, store: &Store, review: Value) -> ApiResult<Value> {
    let mut review: TokenReview = serde_json::from_value(review).map_err(|e| {
        ApiError::bad_request(format!("the request body is not a TokenReview: {e}"))
    })?;
    let token = review.spec.token.as_deref().unwrap_or_default();
    if token.is_empty() {
        return Err(ApiError::bad_request(
            "token is required for TokenReview in authentication",
        ));
    }
    let audiences = review.spec.audiences.clone().unwrap_or_default();
    review.status = Some(match issuer.authenticate(store, token, &audiences) {
        Ok(authenticated) => TokenReviewStatus {
            authenticated: Some(true),
            user: Some(authenticated.user),
            audiences: Some(authenticated.audiences),
            error: None,
        },
        Err(refusal) => TokenReviewStatus {
            user: Some(UserInfo::default()),
            error: Some(refusal.to_string()),
            ..TokenReviewStatus::default()
        },
    });
    serde_json::to_value(&review)
        .map_err(|e| ApiError::internal(format!("encoding the TokenReview: {e}")))
}

/// The bearer token of a request, read as kube-apiserver's bearer token authenticator reads
/// the `Authorization` header.
fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let mut parts = value.splitn(3, ' ');
    let scheme = parts.next()?;
    let token = parts.next()?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

fn self_subject_review(issuer: &Issuer, store: &Store, headers: &HeaderMap) -> ApiResult<Value> {
    let user = match bearer_token(headers).map(|token| issuer.authenticate(store, token, &[])) {
        Some(Ok(authenticated)) => authenticated.user,
        Some(Err(Refusal::Invalid(_))) => return Err(ApiError::unauthorized()),
        Some(Err(Refusal::NotIssuedHere)) | None => UserInfo {
            username: Some(ADMIN.to_string()),
            groups: Some(ADMIN_GROUPS.iter().map(|g| g.to_string()).collect()),
            ..UserInfo::default()
        },
    };
    Ok(json!({
        "kind": "SelfSubjectReview",
        "apiVersion": format!("{}/v1", AUTHENTICATION_GROUP),
        "metadata": {"creationTimestamp": timestamp(Utc::now())},
        "status": {"userInfo": user},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn bearer_tokens_are_read_as_kube_apiserver_reads_them() {
        let with = |value: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::AUTHORIZATION, HeaderValue::from_static(value));
            headers
        };
        assert_eq!(bearer_token(&with("Bearer abc")), Some("abc"));
        assert_eq!(bearer_token(&with("  bearer abc extra")), Some("abc"));
        assert_eq!(bearer_token(&with("Bearer  abc")), None);
        assert_eq!(bearer_token(&with("Basic abc")), None);
        assert_eq!(bearer_token(&HeaderMap::new()), None);
    }
}
