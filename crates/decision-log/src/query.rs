//! Query filters and pages: what `Query` in the gRPC service and `tenantplane decisions` take.

use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};
use tenantplane_core::decision::{Decision, Outcome};

use crate::chain::Entry;
use crate::index::IndexRef;

/// An object selector: each part that is set must match.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectFilter {
    /// Kind.
    pub kind: Option<String>,
    /// Namespace.
    pub namespace: Option<String>,
    /// Name.
    pub name: Option<String>,
}

impl ObjectFilter {
    /// Parses `kind/namespace/name`, `namespace/name` or `name`; an empty or `*` part matches
    /// anything (`Pod//web` is any Pod named web in any namespace).
    pub fn parse(s: &str) -> ObjectFilter {
        let part = |p: &str| (!p.is_empty() && p != "*").then(|| p.to_string());
        let parts: Vec<&str> = s.split('/').collect();
        match parts.as_slice() {
            [name] => ObjectFilter {
                name: part(name),
                ..ObjectFilter::default()
            },
            [namespace, name] => ObjectFilter {
                kind: None,
                namespace: part(namespace),
                name: part(name),
            },
            [kind, namespace, rest @ ..] => ObjectFilter {
                kind: part(kind),
                namespace: part(namespace),
                name: part(&rest.join("/")),
            },
            [] => ObjectFilter::default(),
        }
    }

    /// True when nothing is selected.
    pub fn is_empty(&self) -> bool {
        self.kind.is_none() && self.namespace.is_none() && self.name.is_none()
    }

    /// True when an object `kind/namespace/name` is selected.
    pub fn matches(&self, kind: &str, namespace: &str, name: &str) -> bool {
        let eq = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        eq(&self.kind, kind) && eq(&self.namespace, namespace) && eq(&self.name, name)
    }
}

/// Which decisions a query returns. Every field that is set must match.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Filter {
    /// Tenant name.
    pub tenant: Option<String>,
    /// The tenant object decided about.
    pub subject: ObjectFilter,
    /// The host object targeted.
    pub host: ObjectFilter,
    /// Any of these outcomes (empty: all).
    pub outcomes: Vec<Outcome>,
    /// SyncPolicy rule name.
    pub rule: Option<String>,
    /// Decisions taken at or after this time.
    pub since: Option<Timestamp>,
    /// Decisions taken before this time.
    pub until: Option<Timestamp>,
}

impl Filter {
    /// True when `d` matches, by the same rules as the SQL a store runs for a query on the
    /// index columns (Watch filters entries in memory with this).
    pub fn matches(&self, d: &Decision) -> bool {
        let c = IndexRef::of(d);
        self.tenant.as_deref().is_none_or(|t| t == c.tenant)
            && self
                .subject
                .matches(c.subject_kind, c.subject_namespace, c.subject_name)
            && self
                .host
                .matches(c.host_kind, c.host_namespace, c.host_name)
            && (self.outcomes.is_empty() || self.outcomes.contains(&d.outcome))
            && self.rule.as_deref().is_none_or(|r| r == c.rule)
            && self.since.is_none_or(|t| c.time_us >= t.as_microsecond())
            && self.until.is_none_or(|t| c.time_us < t.as_microsecond())
    }
}

/// A page request: decisions matching `filter`, in sequence order, after the page token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Query {
    /// What to return.
    pub filter: Filter,
    /// Newest first (descending sequence) instead of oldest first.
    pub newest_first: bool,
    /// The `next_page_token` of the previous page.
    pub page_token: Option<u64>,
    /// Page size (at most [`Query::MAX_LIMIT`]).
    pub limit: u32,
}

impl Query {
    /// Largest page a store returns.
    pub const MAX_LIMIT: u32 = 1000;

    /// The first page of `filter`, oldest first.
    pub fn new(filter: Filter, limit: u32) -> Query {
        Query {
            filter,
            newest_first: false,
            page_token: None,
            limit,
        }
    }

    /// The page size actually used.
    pub fn effective_limit(&self) -> u32 {
        self.limit.clamp(1, Query::MAX_LIMIT)
    }
}

/// One page of results.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Page {
    /// The decisions, in the requested order.
    pub entries: Vec<Entry>,
    /// Pass as `page_token` to get the next page; absent on the last page.
    pub next_page_token: Option<u64>,
}

/// Builds a page from rows fetched with one more than `limit` (see `sql::select_query`).
pub(crate) fn page(mut links: Vec<crate::chain::Link>, limit: u32) -> Result<Page, crate::Error> {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let next_page_token = if links.len() > limit {
        links.truncate(limit);
        links.last().map(|l| l.sequence)
    } else {
        None
    };
    Ok(Page {
        entries: links
            .into_iter()
            .map(Entry::try_from)
            .collect::<Result<_, _>>()?,
        next_page_token,
    })
}
