//! Where the commands that read decisions (`decisions`, `why`) get them: the syncer's
//! DecisionLog gRPC service, or the log database itself.

use std::sync::Arc;

use anyhow::{Context, bail};
use tenantplane_decision_log::grpc::{entry_from_proto, filter_to_proto};
use tenantplane_decision_log::{DecisionStore, Entry, Filter, Query};
use tenantplane_proto::decisions::v1 as pb;
use tenantplane_proto::decisions::v1::decision_log_client::DecisionLogClient;
use tonic::transport::Channel;

/// The flags that choose a decision source, shared by every command that reads decisions.
#[derive(Debug, Clone, clap::Args)]
pub struct SourceArgs {
    /// Address of the DecisionLog gRPC service the syncer serves (e.g. http://127.0.0.1:7421).
    #[arg(long, env = "TENANTPLANE_DECISIONS_SERVER", conflicts_with = "db")]
    pub server: Option<String>,
    /// Read the log database directly: a SQLite file path (or sqlite:PATH) or a postgres:// URL.
    #[arg(long, env = "TENANTPLANE_DECISION_LOG")]
    pub db: Option<String>,
}

/// A connected decision source.
pub enum DecisionSource {
    /// The DecisionLog gRPC service.
    Grpc(DecisionLogClient<Channel>),
    /// The log database, read directly.
    Store(Arc<dyn DecisionStore>),
}

impl DecisionSource {
    /// Connects to the source the flags name.
    pub async fn connect(args: &SourceArgs) -> anyhow::Result<DecisionSource> {
        Ok(match (&args.server, &args.db) {
            (Some(addr), _) => DecisionSource::Grpc(
                DecisionLogClient::connect(addr.clone())
                    .await
                    .with_context(|| format!("connecting to the DecisionLog service at {addr}"))?,
            ),
            (None, Some(db)) => {
                DecisionSource::Store(crate::commands::audit::open_existing(db).await?)
            }
            (None, None) => {
                bail!("give --server (the syncer's DecisionLog address) or --db (the log database)")
            }
        })
    }

    /// Up to `limit` matching entries, newest first or oldest first.
    pub async fn query(
        &mut self,
        filter: &Filter,
        limit: u32,
        newest_first: bool,
    ) -> anyhow::Result<Vec<Entry>> {
        Ok(match self {
            DecisionSource::Store(store) => {
                let mut query = Query::new(filter.clone(), limit);
                query.newest_first = newest_first;
                store.query(query).await?.entries
            }
            DecisionSource::Grpc(client) => client
                .query(pb::QueryRequest {
                    filter: Some(filter_to_proto(filter)),
                    page_size: limit,
                    page_token: String::new(),
                    newest_first,
                })
                .await?
                .into_inner()
                .entries
                .iter()
                .map(entry_from_proto)
                .collect::<Result<_, _>>()?,
        })
    }

    /// The entry of decision `id`, if the log has it.
    pub async fn get(&mut self, id: &str) -> anyhow::Result<Option<Entry>> {
        Ok(match self {
            DecisionSource::Store(store) => store.get(id.to_string()).await?,
            DecisionSource::Grpc(client) => {
                match client.get(pb::GetRequest { id: id.to_string() }).await {
                    Ok(entry) => Some(entry_from_proto(&entry.into_inner())?),
                    Err(status) if status.code() == tonic::Code::NotFound => None,
                    Err(status) => return Err(status.into()),
                }
            }
        })
    }
}
