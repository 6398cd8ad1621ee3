//! A service runtime on loopback sockets: health, reflection, the admin port, TLS and mutual
//! TLS, and graceful shutdown, called with real clients.

use std::net::SocketAddr;
use std::time::Duration;

use prost::Message;
use prost_types::FileDescriptorProto;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use tenantplane_client::{ClientConfig, ClientError, ClientTls, PlannerClient};
use tenantplane_decision_log::grpc::DecisionLogService;
use tenantplane_grpc::{IsolationService, PlannerService};
use tenantplane_service::{GrpcApi, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_reflection::pb::{v1, v1alpha};

/// A running service: its addresses, the trigger of its shutdown and its task.
struct Running {
    grpc: SocketAddr,
    admin: SocketAddr,
    stop: oneshot::Sender<()>,
    task: JoinHandle<anyhow::Result<()>>,
}

async fn start(tls: Option<ServerTlsConfig>) -> Running {
    let api = GrpcApi::new().with_service(PlannerService::new().into_server());
    start_serving(api, tls).await
}

/// A server of `api` on loopback ports.
async fn start_serving(api: GrpcApi, tls: Option<ServerTlsConfig>) -> Running {
    let loopback: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let server = Server::bind(loopback, loopback, tls).await.unwrap();
    let (grpc, admin) = (server.grpc_addr(), server.admin_addr());
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(server.serve(api, async {
        let _ = stopped.await;
    }));
    Running {
        grpc,
        admin,
        stop,
        task,
    }
}

async fn channel(addr: SocketAddr) -> tonic::transport::Channel {
    tenantplane_client::connect(&ClientConfig::new(addr.to_string()))
        .await
        .unwrap()
}

/// GET `path` on the admin port: status code and body.
async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let status = response[9..12].parse().unwrap();
    let body = response.split_once("\r\n\r\n").unwrap().1.to_string();
    (status, body)
}

#[tokio::test]
async fn health_reports_serving_for_the_server_and_its_api() {
    let running = start(None).await;
    let mut health = HealthClient::new(channel(running.grpc).await);
    for service in ["", "tenantplane.planner.v1.Planner"] {
        let status = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .status();
        assert_eq!(status, ServingStatus::Serving, "{service:?}");
    }
    let unknown = health
        .check(HealthCheckRequest {
            service: "no.such.Service".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::NotFound);
}

const PLANNER: &str = "tenantplane.planner.v1.Planner";
const ISOLATION_COMPILER: &str = "tenantplane.isolation.v1.IsolationCompiler";
const DECISION_LOG: &str = "tenantplane.decisions.v1.DecisionLog";

/// The answer to one server reflection (v1) request (tonic's reflection answers a symbol or
/// file it does not have with a status that ends the stream).
async fn reflect(
    addr: SocketAddr,
    request: v1::server_reflection_request::MessageRequest,
) -> Result<v1::server_reflection_response::MessageResponse, tonic::Status> {
    let mut client = v1::server_reflection_client::ServerReflectionClient::new(channel(addr).await);
    let request = v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(request),
    };
    let mut responses = client
        .server_reflection_info(tokio_stream::iter([request]))
        .await?
        .into_inner();
    let response = responses.message().await?.expect("an answer");
    Ok(response.message_response.expect("an answer"))
}

/// The services reflection v1alpha lists (grpcio-reflection, older grpcurl).
async fn listed_v1alpha(addr: SocketAddr) -> Vec<String> {
    use v1alpha::server_reflection_request::MessageRequest;
    use v1alpha::server_reflection_response::MessageResponse;
    let mut client =
        v1alpha::server_reflection_client::ServerReflectionClient::new(channel(addr).await);
    let request = v1alpha::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut responses = client
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    let response = responses.message().await.unwrap().unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = response.message_response else {
        panic!("{response:?}")
    };
    sorted(list.service.into_iter().map(|s| s.name))
}

fn sorted(names: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut names: Vec<String> = names.into_iter().collect();
    names.sort();
    names
}

/// The files describing `symbol`, fetched as grpcurl's `describe` does: the file containing it,
/// then each import by file name, transitively.
async fn describe(
    addr: SocketAddr,
    symbol: &str,
) -> Result<Vec<FileDescriptorProto>, tonic::Status> {
    use v1::server_reflection_request::MessageRequest;
    use v1::server_reflection_response::MessageResponse;
    let mut request = MessageRequest::FileContainingSymbol(symbol.to_string());
    let mut files: Vec<FileDescriptorProto> = Vec::new();
    let mut pending: Vec<String> = Vec::new();
    loop {
        match reflect(addr, request).await? {
            MessageResponse::FileDescriptorResponse(response) => {
                for encoded in response.file_descriptor_proto {
                    let file = FileDescriptorProto::decode(encoded.as_slice()).unwrap();
                    pending.extend(file.dependency.iter().cloned());
                    files.push(file);
                }
            }
            MessageResponse::ErrorResponse(error) => {
                return Err(tonic::Status::new(
                    error.error_code.into(),
                    error.error_message,
                ));
            }
            other => panic!("{other:?}"),
        }
        pending.retain(|name| !files.iter().any(|f| f.name() == name));
        let Some(next) = pending.pop() else {
            return Ok(files);
        };
        request = MessageRequest::FileByFilename(next);
    }
}

#[tokio::test]
async fn reflection_lists_and_describes_exactly_the_services_served() {
    use v1::server_reflection_request::MessageRequest;
    use v1::server_reflection_response::MessageResponse;
    let log = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", log.path().join("decisions.db").display());
    let store = tenantplane_decision_log::open(&url).await.unwrap();
    let servers = [
        (
            PLANNER,
            GrpcApi::new().with_service(PlannerService::new().into_server()),
        ),
        (
            ISOLATION_COMPILER,
            GrpcApi::new().with_service(IsolationService::new(Default::default()).into_server()),
        ),
        (
            DECISION_LOG,
            GrpcApi::new().with_service(DecisionLogService::new(store).into_server()),
        ),
    ];
    for (served, api) in servers {
        let running = start_serving(api, None).await;
        let expected = sorted(
            [
                served,
                "grpc.health.v1.Health",
                "grpc.reflection.v1.ServerReflection",
                "grpc.reflection.v1alpha.ServerReflection",
            ]
            .map(String::from),
        );
        let MessageResponse::ListServicesResponse(list) =
            reflect(running.grpc, MessageRequest::ListServices(String::new()))
                .await
                .unwrap()
        else {
            panic!("no service list")
        };
        assert_eq!(sorted(list.service.into_iter().map(|s| s.name)), expected);
        assert_eq!(listed_v1alpha(running.grpc).await, expected);

        // Each listed service is described, with every file it imports.
        for service in &expected {
            let files = describe(running.grpc, service)
                .await
                .unwrap_or_else(|e| panic!("{service} on the {served} server: {e:?}"));
            let defined = files.iter().any(|f| {
                f.service
                    .iter()
                    .any(|s| format!("{}.{}", f.package(), s.name()) == *service)
            });
            assert!(defined, "{service} is in none of {files:?}");
        }
        let files = describe(running.grpc, served).await.unwrap();
        assert!(
            files
                .iter()
                .any(|f| f.name() == "tenantplane/types/v1/types.proto"),
            "{served}: the shared messages are resolved"
        );

        // What the server does not serve is not described either.
        for other in [PLANNER, ISOLATION_COMPILER, DECISION_LOG] {
            if other != served {
                let error = describe(running.grpc, other).await.unwrap_err();
                assert_eq!(
                    error.code(),
                    tonic::Code::NotFound,
                    "{other} on the {served} server: {error:?}"
                );
            }
        }
        running.stop.send(()).unwrap();
        running.task.await.unwrap().unwrap();
    }
}

#[tokio::test]
async fn admin_port_answers_live_ready_and_metrics_per_rpc() {
    let running = start(None).await;
    assert_eq!(get(running.admin, "/live").await.0, 200);
    assert_eq!(
        get(running.admin, "/ready").await,
        (200, "ready\n".to_string())
    );
    assert_eq!(get(running.admin, "/nothing").await.0, 404);

    let mut client = PlannerClient::new(channel(running.grpc).await);
    client.version().await.unwrap();
    let tenant = tenantplane_api::Tenant::new("Bad_Name", Default::default());
    let object = tenantplane_core::TenantObject::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}
    }))
    .unwrap();
    client
        .plan(&tenant, None, None, &[object], &[])
        .await
        .unwrap_err();

    let (status, metrics) = get(running.admin, "/metrics").await;
    assert_eq!(status, 200);
    for line in [
        r#"tenantplane_grpc_server_handled_total{grpc_service="tenantplane.planner.v1.Planner",grpc_method="GetVersion",grpc_code="Ok"} 1"#,
        r#"tenantplane_grpc_server_handled_total{grpc_service="tenantplane.planner.v1.Planner",grpc_method="Plan",grpc_code="InvalidArgument"} 1"#,
        r#"tenantplane_grpc_server_handling_seconds_count{grpc_service="tenantplane.planner.v1.Planner",grpc_method="Plan"} 1"#,
    ] {
        assert!(metrics.contains(line), "{line}\nnot in\n{metrics}");
    }
}

#[tokio::test]
async fn shutdown_completes_calls_then_closes_both_ports() {
    let running = start(None).await;
    let mut client = PlannerClient::new(channel(running.grpc).await);
    client.version().await.unwrap();
    running.stop.send(()).unwrap();
    let result = tokio::time::timeout(Duration::from_secs(10), running.task)
        .await
        .expect("the server stops promptly")
        .unwrap();
    result.unwrap();
    assert!(TcpStream::connect(running.grpc).await.is_err());
    assert!(TcpStream::connect(running.admin).await.is_err());
}

/// A CA and a certificate it signed for `localhost`, both PEM: (CA cert, cert, key).
fn pki() -> (String, (String, String), (String, String)) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::from_params(&ca_params, &ca_key);
    let leaf = |names: Vec<String>| {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(names)
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let server = leaf(vec!["localhost".into()]);
    let client = leaf(vec!["tenantplane-syncer".into()]);
    (ca.pem(), server, client)
}

fn tls_client(addr: SocketAddr, ca: &str, identity: Option<&(String, String)>) -> ClientConfig {
    ClientConfig::new(format!("https://localhost:{}", addr.port())).with_tls(ClientTls {
        ca_pem: ca.as_bytes().to_vec(),
        identity: identity.map(|(c, k)| (c.as_bytes().to_vec(), k.as_bytes().to_vec())),
        domain: None,
    })
}

#[tokio::test]
async fn tls_serves_clients_that_trust_its_ca() {
    let (ca, (cert, key), _) = pki();
    let running = start(Some(
        ServerTlsConfig::new().identity(Identity::from_pem(cert, key)),
    ))
    .await;
    let mut client = PlannerClient::connect(&tls_client(running.grpc, &ca, None))
        .await
        .unwrap();
    client.version().await.unwrap();

    // A plaintext client gets no answer from a TLS port.
    let mut plaintext = PlannerClient::new(channel(running.grpc).await);
    let error = plaintext.version().await.unwrap_err();
    assert!(matches!(error, ClientError::Status(_)), "{error:?}");
}

#[tokio::test]
async fn mutual_tls_refuses_clients_without_a_certificate() {
    let (ca, (cert, key), client_identity) = pki();
    let tls = ServerTlsConfig::new()
        .identity(Identity::from_pem(cert, key))
        .client_ca_root(Certificate::from_pem(&ca));
    let running = start(Some(tls)).await;

    let mut client = PlannerClient::connect(&tls_client(running.grpc, &ca, Some(&client_identity)))
        .await
        .unwrap();
    client.version().await.unwrap();

    let anonymous = match PlannerClient::connect(&tls_client(running.grpc, &ca, None)).await {
        Ok(mut client) => client.version().await.map(|_| ()),
        Err(e) => Err(e),
    };
    assert!(
        anonymous.is_err(),
        "a client without a certificate was served"
    );
}

#[tokio::test]
async fn a_service_s_own_metrics_are_served_on_the_admin_port() {
    let mut registry = prometheus_client::registry::Registry::default();
    let decisions = prometheus_client::metrics::counter::Counter::<u64>::default();
    registry.register(
        "tenantplane_sync_decisions",
        "Sync decisions recorded",
        decisions.clone(),
    );
    decisions.inc_by(3);
    let loopback: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let server = Server::bind(loopback, loopback, None)
        .await
        .unwrap()
        .with_registry(registry);
    let admin = server.admin_addr();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(server.serve(GrpcApi::new(), async {
        let _ = stopped.await;
    }));
    let (status, metrics) = get(admin, "/metrics").await;
    assert_eq!(status, 200);
    assert!(
        metrics.contains("tenantplane_sync_decisions_total 3"),
        "{metrics}"
    );
    let _ = stop.send(());
    task.await.unwrap().unwrap();
}
