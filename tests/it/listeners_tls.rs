//! TLS on both listeners, on real sockets.
//!
//! - The proxy listener (`tls`): a streamed chat completion over `https`
//!   is forwarded byte for byte and metered, and the handshake is counted
//!   in no request's time (its TTFT starts when the request arrives).
//! - The admin listener behind a Prometheus exporter-toolkit web config
//!   (`admin.web_config_file`): credentials asked for everywhere but the
//!   probes, the configured headers on every answer, a certificate
//!   replaced on disk served after a reload with no restart, and a bad web
//!   config refused at its line, by `check` and by a reload (which keeps
//!   the running one).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use tokenmeter::app::{ConfigSource, Running};
use tokenmeter::config::{Config, Overrides};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_rustls::rustls::{self, pki_types};

use crate::common::*;

/// A test CA, and server certificates it signs for 127.0.0.1.
struct Ca {
    issuer: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
}

impl Ca {
    fn new() -> Self {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "tokenmeter test CA");
        let key = rcgen::KeyPair::generate().unwrap();
        Self {
            issuer: rcgen::CertifiedIssuer::self_signed(params, key).unwrap(),
        }
    }

    /// A server certificate named `name` (its common name), and its key,
    /// both PEM.
    fn server(&self, name: &str) -> (String, String) {
        let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn client_config(&self) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.issuer.der().clone()).unwrap();
        Arc::new(
            rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
        )
    }
}

/// What an HTTPS GET got: the status, the head's lines, and the common
/// name of the certificate the server presented.
struct Got {
    status: u16,
    head: String,
    served: String,
}

/// `GET path` over TLS to `addr`, with basic credentials when given.
async fn https_get(
    addr: SocketAddr,
    client: Arc<rustls::ClientConfig>,
    path: &str,
    user: Option<(&str, &str)>,
) -> Got {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = pki_types::ServerName::IpAddress(addr.ip().into());
    let mut tls = tokio_rustls::TlsConnector::from(client)
        .connect(name, tcp)
        .await
        .unwrap();
    let served = {
        let (_, conn) = tls.get_ref();
        let leaf = &conn.peer_certificates().unwrap()[0];
        common_name(leaf.as_ref())
    };
    let mut request = format!("GET {path} HTTP/1.1\r\nhost: admin\r\nconnection: close\r\n");
    if let Some((user, password)) = user {
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        request.push_str(&format!("authorization: Basic {token}\r\n"));
    }
    request.push_str("\r\n");
    tls.write_all(request.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), tls.read_to_end(&mut buf))
        .await
        .expect("no answer within 30 s")
        .ok();
    let text = String::from_utf8_lossy(&buf).into_owned();
    let head = text.split("\r\n\r\n").next().unwrap_or_default().to_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Got {
        status,
        head,
        served,
    }
}

/// The common name of a DER certificate: the printable string after the
/// CN attribute's identifier (the test certificates hold one).
fn common_name(der: &[u8]) -> String {
    let oid = [0x06, 0x03, 0x55, 0x04, 0x03];
    let mut last = String::new();
    let mut i = 0;
    while let Some(at) = der[i..].windows(oid.len()).position(|w| w == oid) {
        let start = i + at + oid.len();
        let len = der[start + 1] as usize;
        last = String::from_utf8_lossy(&der[start + 2..start + 2 + len]).into_owned();
        i = start;
    }
    last
}

fn hash(password: &str) -> String {
    // Cost 4: bcrypt's cheapest, so the test is quick.
    bcrypt::hash_with_result(password, 4)
        .unwrap()
        .format_for_version(bcrypt::Version::TwoY)
}

const WEB: &str = "\
tls_server_config:
  cert_file: tls.crt
  key_file: tls.key
http_server_config:
  headers:
    X-Frame-Options: DENY
basic_auth_users:
  prometheus: HASH
";

fn write_files(dir: &Path, ca: &Ca, name: &str, upstream: SocketAddr) -> PathBuf {
    let (cert, key) = ca.server(name);
    std::fs::write(dir.join("tls.crt"), cert).unwrap();
    std::fs::write(dir.join("tls.key"), key).unwrap();
    std::fs::write(dir.join("web.yml"), WEB.replace("HASH", &hash("s3cret"))).unwrap();
    let main = dir.join("main.yaml");
    std::fs::write(
        &main,
        format!(
            "admin:\n  web_config_file: web.yml\nroutes:\n  - name: chat\n    upstream: http://{upstream}\n"
        ),
    )
    .unwrap();
    main
}

fn overrides() -> Overrides {
    Overrides {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        admin_listen: Some("127.0.0.1:0".parse().unwrap()),
        ..Default::default()
    }
}

async fn start_files(path: PathBuf) -> Running {
    let config = Config::load(&path, &overrides()).unwrap();
    tokenmeter::app::start_with(
        config,
        Some(ConfigSource {
            path,
            overrides: overrides(),
            watch: false,
        }),
        None,
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn the_admin_listener_asks_for_credentials_over_tls_and_serves_a_new_certificate_after_a_reload()
 {
    let sim = start_sim(sim::SimConfig::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let running = start_files(write_files(dir.path(), &ca, "first", sim)).await;
    let admin = running.admin_addr;
    let client = ca.client_config();

    for path in ["/metrics", "/config", "/slo", "/"] {
        for user in [
            None,
            Some(("prometheus", "wrong")),
            Some(("nobody", "s3cret")),
        ] {
            let got = https_get(admin, client.clone(), path, user).await;
            assert_eq!(got.status, 401, "{path} {user:?}: {}", got.head);
            assert!(
                got.head
                    .to_ascii_lowercase()
                    .contains("www-authenticate: basic realm=\"tokenmeter\""),
                "{}",
                got.head
            );
        }
        let got = https_get(admin, client.clone(), path, Some(("prometheus", "s3cret"))).await;
        assert_eq!(got.status, 200, "{path}: {}", got.head);
        assert!(
            got.head
                .to_ascii_lowercase()
                .contains("x-frame-options: deny")
        );
        assert_eq!(got.served, "first");
    }
    for probe in ["/healthz", "/readyz"] {
        let got = https_get(admin, client.clone(), probe, None).await;
        assert_eq!(got.status, 200, "{probe}: {}", got.head);
    }
    // Plain HTTP gets no answer from a TLS listener.
    let mut plain = TcpStream::connect(admin).await.unwrap();
    plain
        .write_all(b"GET /metrics HTTP/1.1\r\nhost: admin\r\n\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), plain.read_to_end(&mut buf)).await;
    assert!(!buf.starts_with(b"HTTP/1.1 200"), "{buf:?}");

    // cert-manager replaces the certificate: a reload serves the new one.
    let (cert, key) = ca.server("second");
    std::fs::write(dir.path().join("tls.crt"), cert).unwrap();
    std::fs::write(dir.path().join("tls.key"), key).unwrap();
    running.reload().await.unwrap();
    let got = https_get(
        admin,
        client.clone(),
        "/metrics",
        Some(("prometheus", "s3cret")),
    )
    .await;
    assert_eq!(got.status, 200);
    assert_eq!(got.served, "second");

    // A bad web config is refused at its line; the running one stays.
    std::fs::write(
        dir.path().join("web.yml"),
        "basic_auth_users:\n  prometheus: not-a-hash\n",
    )
    .unwrap();
    let err = running.reload().await.unwrap_err().to_string();
    assert!(err.contains("web.yml:2:15"), "{err}");
    assert!(err.contains("not a bcrypt hash"), "{err}");
    let got = https_get(
        admin,
        client.clone(),
        "/metrics",
        Some(("prometheus", "s3cret")),
    )
    .await;
    assert_eq!(got.status, 200);
    assert_eq!(got.served, "second");
    let page = String::from_utf8_lossy(
        &https_get_body(admin, client, "/metrics", ("prometheus", "s3cret")).await,
    )
    .into_owned();
    let line = |start: &str| {
        page.lines()
            .find(|l| l.starts_with(start))
            .map(str::to_owned)
    };
    assert_eq!(
        line("tokenmeter_config_reload_total{result=\"failure\"}").as_deref(),
        Some("tokenmeter_config_reload_total{result=\"failure\"} 1")
    );
    // The plain-HTTP request above is a handshake failure, not a log line.
    assert_eq!(
        line("tokenmeter_tls_handshake_failures_total{listener=\"admin\",reason=\"protocol\"}")
            .as_deref(),
        Some("tokenmeter_tls_handshake_failures_total{listener=\"admin\",reason=\"protocol\"} 1")
    );
    running.shutdown();
    running.wait().await;
}

/// The body of an authenticated HTTPS GET.
async fn https_get_body(
    addr: SocketAddr,
    client: Arc<rustls::ClientConfig>,
    path: &str,
    (user, password): (&str, &str),
) -> Vec<u8> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = pki_types::ServerName::IpAddress(addr.ip().into());
    let mut tls = tokio_rustls::TlsConnector::from(client)
        .connect(name, tcp)
        .await
        .unwrap();
    let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    tls.write_all(
        format!(
            "GET {path} HTTP/1.1\r\nhost: admin\r\nconnection: close\r\nauthorization: Basic {token}\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut buf = Vec::new();
    tls.read_to_end(&mut buf).await.ok();
    let at = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    dechunk(&buf[at..])
}

/// The body of a chunked HTTP/1.1 answer, or the bytes as they are.
fn dechunk(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = body;
    loop {
        let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") else {
            return body.to_vec();
        };
        let Ok(size) = usize::from_str_radix(std::str::from_utf8(&rest[..eol]).unwrap_or("x"), 16)
        else {
            return body.to_vec();
        };
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&rest[eol + 2..eol + 2 + size]);
        rest = &rest[eol + 2 + size + 2..];
    }
}

/// `tokenmeter check` refuses each bad web config at its file, line and
/// column, and warns of an admin listener open beyond this host without
/// credentials.
#[test]
fn check_refuses_a_bad_web_config_at_its_line_and_warns_of_an_open_admin_port() {
    let dir = tempfile::tempdir().unwrap();
    let main = dir.path().join("main.yaml");
    let write_main = |admin: &str| {
        std::fs::write(
            &main,
            format!("admin:\n{admin}routes:\n  - name: chat\n    upstream: http://127.0.0.1:1\n"),
        )
        .unwrap();
    };
    let check = || {
        let out = std::process::Command::new(BIN)
            .args(["check", "--config"])
            .arg(&main)
            .output()
            .unwrap();
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    write_main("  web_config_file: web.yml\n");
    for (web, at, says) in [
        (
            "basic_auth_users:\n  u: $1$x\n",
            "web.yml:2:6",
            "not a bcrypt hash",
        ),
        (
            "tls_server_config:\n  cert_file: none.crt\n  key_file: none.key\n",
            "web.yml:2:14",
            "cannot read",
        ),
        (
            "tls_server_config:\n  cert_fil: a\n",
            "web.yml:2:3",
            "unknown field `cert_fil`",
        ),
        (
            "http_server_config:\n  headers:\n    Server: x\n",
            "web.yml:3:13",
            "cannot be set here",
        ),
    ] {
        std::fs::write(dir.path().join("web.yml"), web).unwrap();
        let (ok, out) = check();
        assert!(!ok, "{web}: {out}");
        assert!(out.contains(at), "{web}: expected {at} in {out}");
        assert!(out.contains(says), "{web}: expected {says} in {out}");
    }
    std::fs::remove_file(dir.path().join("web.yml")).unwrap();
    let (ok, out) = check();
    assert!(!ok);
    assert!(
        out.contains("main.yaml:2:20") && out.contains("admin.web_config_file"),
        "{out}"
    );

    write_main("  listen: 0.0.0.0:9464\n");
    let (ok, out) = check();
    assert!(ok, "{out}");
    assert!(
        out.contains("warning: the admin listener on 0.0.0.0:9464"),
        "{out}"
    );
    write_main("  listen: 127.0.0.1:9464\n");
    let (ok, out) = check();
    assert!(ok && !out.contains("warning"), "{out}");
}

/// A proxy with TLS on its listener (its certificate issued by the `Ca`
/// returned) and one route, `chat`, to the scripted upstream; the folder
/// holds its files.
async fn https_proxy() -> (Running, Ca, tempfile::TempDir) {
    let upstream = scripted_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let (cert, key) = ca.server("proxy");
    std::fs::write(dir.path().join("tls.crt"), cert).unwrap();
    std::fs::write(dir.path().join("tls.key"), key).unwrap();
    let main = dir.path().join("main.yaml");
    std::fs::write(
        &main,
        format!(
            "tls:\n  cert_file: tls.crt\n  key_file: tls.key\nroutes:\n  - name: chat\n    upstream: http://{upstream}\n"
        ),
    )
    .unwrap();
    let running = start_files(main).await;
    (running, ca, dir)
}

/// A streamed chat completion over `https` to the proxy: the same bytes
/// as the upstream's, metered; the client waits between the handshake
/// and its request, and that wait is in no latency.
#[tokio::test]
async fn a_stream_over_https_to_the_proxy_is_forwarded_whole_and_metered() {
    let (running, ca, _dir) = https_proxy().await;
    // Sent at once, the events fit the proxy's read buffer (a chunk that
    // straddles it is forwarded in two parts rather than held).
    let name = "deepseek-chat-text.sse";
    // The upstream sends each event as a chunk of its own.
    let (head, frames) = crate::tls::stream_request(name);
    let tcp = TcpStream::connect(running.proxy_addr).await.unwrap();
    let server = pki_types::ServerName::IpAddress(running.proxy_addr.ip().into());
    let mut tls = tokio_rustls::TlsConnector::from(ca.client_config())
        .connect(server, tcp)
        .await
        .unwrap();
    // Connected and idle: a wait counted in no request's time.
    tokio::time::sleep(Duration::from_millis(600)).await;
    tls.write_all(head.as_bytes()).await.unwrap();
    tls.write_all(b"{}").await.unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), tls.read_to_end(&mut buf))
        .await
        .unwrap()
        .ok();
    let resp = parse_response(&buf);
    assert_eq!(resp.status, 200);
    assert_eq!(resp.body(), fixture(name));
    assert!(resp.chunks == frames, "one chunk out for each chunk in");

    let s = scrape_until(running.admin_addr, |s| {
        sum(s, "llm_time_to_first_token_seconds_count", &[]) >= 1.0
    })
    .await;
    assert_eq!(
        sum(
            &s,
            "llm_requests_total",
            &[("route", "chat"), ("outcome", "ok")]
        ),
        1.0
    );
    assert!(sum(&s, "llm_output_tokens_total", &[]) > 0.0);
    // The scripted upstream answers at once: a TTFT under the 600 ms the
    // client idled is one that started with the request.
    let ttft = sum(&s, "llm_time_to_first_token_seconds_sum", &[]);
    assert!(ttft < 0.5, "TTFT {ttft} s includes the idle connection");
    running.shutdown();
    running.wait().await;
}

/// Over TLS, the protocol the client chose by ALPN is the one it is
/// served: `h2` by HTTP/2, `http/1.1` by HTTP/1.1, on one listener.
#[tokio::test]
async fn an_https_client_is_served_the_protocol_it_chose_by_alpn() {
    use http_body_util::{BodyExt as _, Full};
    use hyper_util::rt::{TokioExecutor, TokioIo};

    let (running, ca, _dir) = https_proxy().await;
    let name = "deepseek-chat-text.sse";
    let server = pki_types::ServerName::IpAddress(running.proxy_addr.ip().into());
    for (alpn, version) in [
        (&b"h2"[..], hyper::Version::HTTP_2),
        (&b"http/1.1"[..], hyper::Version::HTTP_11),
    ] {
        let mut config = (*ca.client_config()).clone();
        config.alpn_protocols = vec![alpn.to_vec()];
        let tcp = TcpStream::connect(running.proxy_addr).await.unwrap();
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(server.clone(), tcp)
            .await
            .unwrap();
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(alpn));
        let io = TokioIo::new(tls);
        // HTTP/2 names the host in the target's authority, HTTP/1.1 in
        // `Host`.
        let req = if version == hyper::Version::HTTP_2 {
            hyper::Request::post("https://proxy/v1/chat/completions")
        } else {
            hyper::Request::post("/v1/chat/completions").header("host", "proxy")
        };
        let req = req
            .header("x-fixture", name)
            .body(Full::new(bytes::Bytes::from_static(b"{}")))
            .unwrap();
        let resp = if version == hyper::Version::HTTP_2 {
            let (mut send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                .await
                .unwrap();
            tokio::spawn(conn);
            send.send_request(req).await.unwrap()
        } else {
            let (mut send, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
            tokio::spawn(conn);
            send.send_request(req).await.unwrap()
        };
        assert_eq!(resp.version(), version);
        assert_eq!(resp.status(), 200);
        let body = tokio::time::timeout(Duration::from_secs(30), resp.into_body().collect())
            .await
            .unwrap()
            .unwrap()
            .to_bytes();
        assert_eq!(&body[..], &fixture(name)[..], "{version:?}");
    }
    running.shutdown();
    running.wait().await;
}
