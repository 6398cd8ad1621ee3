//! The `tenantplane.decisions.v1.DecisionLog` gRPC service over any [`DecisionStore`], and the
//! conversions its clients (the CLI) share.
//!
//! The syncer mounts [`DecisionLogService::into_server`] on its gRPC server. Watch reads the
//! store by sequence: it wakes on appends made through the same store object, and polls for
//! those made by other replicas (PostgreSQL), so a stream never skips a sequence.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use tenantplane_core::decision::Outcome;
use tenantplane_grpc::convert::{from_proto, to_proto};
use tenantplane_proto::decisions::v1 as pb;
use tenantplane_proto::decisions::v1::decision_log_server::{DecisionLog, DecisionLogServer};
use tenantplane_proto::types::v1 as types;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::chain::Entry;
use crate::query::{Filter, ObjectFilter, Query};
use crate::store::DecisionStore;
use crate::{Error, entries_after};

/// Page size when a request asks for 0.
const DEFAULT_PAGE_SIZE: u32 = 100;
/// Entries a Watch reads from the store per round trip.
const WATCH_CHUNK: u32 = 512;

/// The DecisionLog service.
#[derive(Clone, Debug)]
pub struct DecisionLogService {
    store: Arc<dyn DecisionStore>,
    poll: Duration,
}

impl DecisionLogService {
    /// Serves `store`; Watch polls for other writers' appends once a second.
    pub fn new(store: Arc<dyn DecisionStore>) -> DecisionLogService {
        DecisionLogService {
            store,
            poll: Duration::from_secs(1),
        }
    }

    /// Sets how often an idle Watch looks for appends made by other processes.
    pub fn with_poll_interval(mut self, poll: Duration) -> DecisionLogService {
        self.poll = poll;
        self
    }

    /// The tonic server to add to a router.
    pub fn into_server(self) -> DecisionLogServer<DecisionLogService> {
        DecisionLogServer::new(self)
    }
}

/// Store errors at the gRPC edge: a stopped appender is UNAVAILABLE (retry elsewhere), bad
/// URLs and export lines are the caller's INVALID_ARGUMENT, everything else is INTERNAL.
impl From<Error> for Status {
    fn from(e: Error) -> Status {
        match e {
            Error::Closed => Status::unavailable(e.to_string()),
            Error::Url(_) | Error::Export { .. } => Status::invalid_argument(e.to_string()),
            _ => Status::internal(e.to_string()),
        }
    }
}

#[tonic::async_trait]
impl DecisionLog for DecisionLogService {
    async fn get(&self, request: Request<pb::GetRequest>) -> Result<Response<pb::Entry>, Status> {
        let id = request.into_inner().id;
        match self.store.get(id.clone()).await? {
            Some(entry) => Ok(Response::new(entry_to_proto(&entry))),
            None => Err(Status::not_found(format!("no decision with id {id:?}"))),
        }
    }

    async fn query(
        &self,
        request: Request<pb::QueryRequest>,
    ) -> Result<Response<pb::QueryResponse>, Status> {
        let r = request.into_inner();
        let page_token = if r.page_token.is_empty() {
            None
        } else {
            Some(r.page_token.parse::<u64>().map_err(|_| {
                Status::invalid_argument(format!("page_token {:?} is not a token", r.page_token))
            })?)
        };
        let query = Query {
            filter: filter_from_proto(r.filter.as_ref())?,
            newest_first: r.newest_first,
            page_token,
            limit: if r.page_size == 0 {
                DEFAULT_PAGE_SIZE
            } else {
                r.page_size
            },
        };
        let page = self.store.query(query).await?;
        Ok(Response::new(pb::QueryResponse {
            entries: page.entries.iter().map(entry_to_proto).collect(),
            next_page_token: page
                .next_page_token
                .map(|t| t.to_string())
                .unwrap_or_default(),
        }))
    }

    type WatchStream = ReceiverStream<Result<pb::Entry, Status>>;

    async fn watch(
        &self,
        request: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let r = request.into_inner();
        let filter = filter_from_proto(r.filter.as_ref())?;
        let store = self.store.clone();
        let after = match r.start {
            None => store.head().await?.sequence,
            Some(pb::watch_request::Start::AfterSequence(s)) => s,
            Some(pb::watch_request::Start::AfterId(id)) => {
                store
                    .get(id.clone())
                    .await?
                    .ok_or_else(|| Status::not_found(format!("no decision with id {id:?}")))?
                    .sequence
            }
        };
        if after > 0
            && let Some(c) = store.checkpoints().await?.last()
            && after + 1 < c.next_sequence
        {
            return Err(Status::out_of_range(format!(
                "decisions {}..{} were removed by retention (checkpoint {}); \
                 resume from sequence 0 for everything kept",
                after + 1,
                c.next_sequence - 1,
                c.number
            )));
        }
        let (tx, rx) = mpsc::channel(WATCH_CHUNK as usize);
        tokio::spawn(stream_entries(store, filter, after, self.poll, tx));
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// Sends every entry after `after` that matches `filter`, then waits for more, until the
/// client goes away.
async fn stream_entries(
    store: Arc<dyn DecisionStore>,
    filter: Filter,
    mut after: u64,
    poll: Duration,
    tx: mpsc::Sender<Result<pb::Entry, Status>>,
) {
    let mut appended = store.subscribe();
    loop {
        // Mark the head seen before reading, so an append right after the read wakes us.
        appended.borrow_and_update();
        let entries = match entries_after(&*store, after, WATCH_CHUNK).await {
            Ok(entries) => entries,
            Err(e) => {
                let _ = tx.send(Err(e.into())).await;
                return;
            }
        };
        if entries.is_empty() {
            tokio::select! {
                _ = appended.changed() => {}
                _ = tokio::time::sleep(poll) => {}
                _ = tx.closed() => return,
            }
            continue;
        }
        for entry in entries {
            after = entry.sequence;
            if filter.matches(&entry.decision) && tx.send(Ok(entry_to_proto(&entry))).await.is_err()
            {
                return;
            }
        }
    }
}

/// An entry on the wire.
pub fn entry_to_proto(e: &Entry) -> pb::Entry {
    pb::Entry {
        sequence: e.sequence,
        prev_hash: e.prev_hash.clone(),
        hash: e.hash.clone(),
        decision: Some(to_proto::decision(&e.decision)),
    }
}

/// An entry from the wire.
pub fn entry_from_proto(e: &pb::Entry) -> Result<Entry, Status> {
    let decision = e
        .decision
        .as_ref()
        .ok_or_else(|| Status::invalid_argument("entry.decision is required"))?;
    Ok(Entry {
        sequence: e.sequence,
        prev_hash: e.prev_hash.clone(),
        hash: e.hash.clone(),
        decision: from_proto::decision("entry.decision", decision)
            .map_err(|e| Status::invalid_argument(e.to_string()))?,
    })
}

/// A filter from the wire.
pub fn filter_from_proto(f: Option<&pb::Filter>) -> Result<Filter, Status> {
    let Some(f) = f else {
        return Ok(Filter::default());
    };
    let text = |s: &str| (!s.is_empty()).then(|| s.to_string());
    let object = |o: Option<&pb::ObjectSelector>| {
        o.map_or_else(ObjectFilter::default, |o| ObjectFilter {
            kind: text(&o.kind),
            namespace: text(&o.namespace),
            name: text(&o.name),
        })
    };
    let time = |t: Option<&prost_types::Timestamp>| {
        t.map(|t| {
            Timestamp::new(t.seconds, t.nanos)
                .map_err(|e| Status::invalid_argument(format!("filter time: {e}")))
        })
        .transpose()
    };
    let outcomes = f
        .outcomes()
        .map(|o| {
            let name = o.as_str_name().trim_start_matches("OUTCOME_");
            name.parse::<Outcome>()
                .map_err(|_| Status::invalid_argument(format!("filter outcome {name}")))
        })
        .collect::<Result<_, _>>()?;
    Ok(Filter {
        tenant: text(&f.tenant),
        subject: object(f.subject.as_ref()),
        host: object(f.host.as_ref()),
        outcomes,
        rule: text(&f.rule),
        since: time(f.since.as_ref())?,
        until: time(f.until.as_ref())?,
    })
}

/// A filter on the wire.
pub fn filter_to_proto(f: &Filter) -> pb::Filter {
    let object = |o: &ObjectFilter| {
        (!o.is_empty()).then(|| pb::ObjectSelector {
            kind: o.kind.clone().unwrap_or_default(),
            namespace: o.namespace.clone().unwrap_or_default(),
            name: o.name.clone().unwrap_or_default(),
        })
    };
    let time = |t: Option<Timestamp>| {
        t.map(|t| prost_types::Timestamp {
            seconds: t.as_second(),
            nanos: t.subsec_nanosecond(),
        })
    };
    pb::Filter {
        tenant: f.tenant.clone().unwrap_or_default(),
        subject: object(&f.subject),
        host: object(&f.host),
        outcomes: f
            .outcomes
            .iter()
            .map(|o| {
                let name = format!("OUTCOME_{}", o.as_str().to_uppercase());
                types::Outcome::from_str_name(&name).map_or(0, i32::from)
            })
            .collect(),
        rule: f.rule.clone().unwrap_or_default(),
        since: time(f.since),
        until: time(f.until),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_round_trip_through_the_wire() {
        let f = Filter {
            tenant: Some("acme".into()),
            subject: ObjectFilter::parse("Pod/default/web"),
            host: ObjectFilter::parse("web-x-default"),
            outcomes: Outcome::ALL.to_vec(),
            rule: Some("no-host-network".into()),
            since: Some(Timestamp::from_second(1_700_000_000).unwrap()),
            until: None,
        };
        assert_eq!(filter_from_proto(Some(&filter_to_proto(&f))).unwrap(), f);
        assert_eq!(filter_from_proto(None).unwrap(), Filter::default());
    }
}
