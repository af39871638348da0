//! An agent's network: a proxy pidevops runs and owns, one per run, in this process. With `namespaces` the
//! agent's sandbox has its own network namespace with only loopback, and `pidevops-bridge` (a binary of its own,
//! src/bin/pidevops-bridge.rs, shipped beside `pidevops`) forwards a loopback port inside it to the proxy's Unix
//! socket in the run's directory; under `landlock` the proxy listens on a loopback TCP port of the host, the one
//! port Landlock lets the agent connect to.
//!
//! The proxy speaks what `HTTPS_PROXY` / `HTTP_PROXY` clients send: `CONNECT host:port` (a tunnel for HTTPS) and
//! absolute-form plain HTTP, each allowed only to the hosts of `policy.rs` and only once the name resolves to
//! public addresses (it connects to the address it checked). Requests to the proxy itself are the model gateway
//! (`gateway.rs`): forwarded to the real API with the real key, which the agent never holds (`routes.rs`: how each
//! CLI is pointed at it). Everything refused gets a 403, is counted per (host, port) for the run's outcome, and
//! counted in `pidevops_agent_egress_refused_total{reason}`.

pub mod gateway;
pub mod models;
pub mod policy;
pub mod routes;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

pub use crate::domain::runs::RefusedEgress;
use secrecy::ExposeSecret;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use gateway::{Gateway, KeyHeader};
use policy::{Head, Policy, Refusal, Target, Verdict};

/// The port the bridge listens on inside a sandbox's own network namespace (nothing else is there).
pub const BRIDGE_PORT: u16 = 3128;
/// Where the proxy's socket is bound inside the sandbox.
pub const SOCKET_IN_SANDBOX: &str = "/run/pidevops/egress.sock";

/// Longest request head read; a longer one is refused.
const MAX_HEAD: usize = 64 * 1024;
/// Largest request body the gateway buffers (a model request with its whole conversation).
const MAX_BODY: usize = 64 * 1024 * 1024;
/// How long a client may take to send a head, and a destination to accept a connection.
const HEAD_TIMEOUT: Duration = Duration::from_secs(120);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// Distinct (host, port) pairs kept per run; further refusals are counted under [`OTHER_HOSTS`].
const MAX_DISTINCT: usize = 50;
pub const OTHER_HOSTS: &str = "(other hosts)";

static BRIDGE_PROGRAM: OnceLock<PathBuf> = OnceLock::new();

/// The bridge's file name: it is installed beside `pidevops` (deploy/Dockerfile; `cargo build` builds it there).
pub const BRIDGE_NAME: &str = "pidevops-bridge";

/// Fixes which program is the sandbox's bridge (else [`BRIDGE_NAME`] beside this executable): the integration
/// tests run the dispatcher inside the test harness, whose own executable lives elsewhere, and the benchmarks
/// measure one of their choosing. Configuration cannot reach this.
pub fn pin_bridge_program(program: impl Into<PathBuf>) {
    let _ = BRIDGE_PROGRAM.set(program.into());
}

/// The `pidevops-bridge` binary that bridges a sandbox's loopback to its proxy: the pinned one, else the one beside
/// the running executable. It may not exist: [`bridge_missing`] says so.
pub fn bridge_program() -> std::io::Result<PathBuf> {
    match BRIDGE_PROGRAM.get() {
        Some(program) => Ok(program.clone()),
        None => {
            let exe = std::env::current_exe()?;
            Ok(exe.with_file_name(BRIDGE_NAME))
        }
    }
}

/// Why the bridge cannot run (every sandbox with `network = "proxy"` under bubblewrap needs it), naming the file;
/// `None` when it is an executable file.
pub fn bridge_missing() -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let program = match bridge_program() {
        Ok(program) => program,
        Err(e) => {
            return Some(format!(
                "cannot find the running executable, beside which {BRIDGE_NAME} lies: {e}"
            ))
        }
    };
    match std::fs::metadata(&program) {
        Ok(meta) if meta.is_file() && meta.permissions().mode() & 0o111 != 0 => None,
        Ok(_) => Some(format!("{} is not an executable file", program.display())),
        Err(e) => Some(format!("{} is missing ({e})", program.display())),
    }
}

/// A run's refusals, counted while it runs (every proxy of the run adds to the same).
#[derive(Debug, Default)]
pub struct Refusals(Mutex<BTreeMap<(String, u16), u64>>);

impl Refusals {
    fn record(&self, host: &str, port: u16, reason: Refusal) {
        metrics::counter!("pidevops_agent_egress_refused_total", "reason" => reason.label())
            .increment(1);
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let host = if host.len() > policy::MAX_HOST || host.is_empty() {
            "(not a host name)".to_owned()
        } else {
            host.to_owned()
        };
        let key = if map.contains_key(&(host.clone(), port)) || map.len() < MAX_DISTINCT {
            (host, port)
        } else {
            (OTHER_HOSTS.to_owned(), 0)
        };
        *map.entry(key).or_default() += 1;
    }

    /// What was refused so far, by host and port.
    pub fn list(&self) -> Vec<RefusedEgress> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|((host, port), count)| RefusedEgress {
                host: host.clone(),
                port: *port,
                count: *count,
            })
            .collect()
    }
}

/// Where a proxy listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// A Unix socket (bound into a sandbox; the bridge listens on [`BRIDGE_PORT`] inside).
    Unix(PathBuf),
    /// A loopback TCP port of the host (Landlock lets the agent connect to it and nothing else).
    Tcp(SocketAddr),
}

impl Endpoint {
    /// The port the agent reaches the proxy at, on its own loopback.
    pub fn agent_port(&self) -> u16 {
        match self {
            Self::Unix(_) => BRIDGE_PORT,
            Self::Tcp(addr) => addr.port(),
        }
    }

    /// `http://127.0.0.1:<port>`: the agent's proxy and gateway.
    pub fn agent_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.agent_port())
    }
}

/// A run's proxy: stops (with every connection it holds) when dropped.
#[derive(Debug)]
pub struct Proxy {
    pub endpoint: Endpoint,
    pub refusals: Arc<Refusals>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        if let Endpoint::Unix(path) = &self.endpoint {
            let _ = std::fs::remove_file(path);
        }
    }
}

struct Shared {
    policy: Policy,
    gateway: Option<Gateway>,
    client: reqwest::Client,
    refusals: Arc<Refusals>,
    /// Its own address as the agent names it, for absolute-form requests to the gateway.
    own_port: u16,
}

impl Proxy {
    /// Starts a proxy in the current runtime: on a Unix socket at `socket` (its directory must exist), or on a
    /// loopback TCP port when `socket` is `None`.
    pub fn start(
        policy: Policy,
        gateway: Option<Gateway>,
        socket: Option<&Path>,
        refusals: Arc<Refusals>,
    ) -> std::io::Result<Self> {
        let client = reqwest::Client::builder()
            // The service's own proxy variables are not the agent's business, and the gateway goes straight out.
            .no_proxy()
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(std::io::Error::other)?;
        let (endpoint, listener) = match socket {
            Some(path) => {
                let listener = bind_unix(path)?;
                (Endpoint::Unix(path.to_owned()), Listener::Unix(listener))
            }
            None => {
                let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
                listener.set_nonblocking(true)?;
                let listener = tokio::net::TcpListener::from_std(listener)?;
                (
                    Endpoint::Tcp(listener.local_addr()?),
                    Listener::Tcp(listener),
                )
            }
        };
        let shared = Arc::new(Shared {
            policy,
            gateway,
            client,
            refusals: refusals.clone(),
            own_port: endpoint.agent_port(),
        });
        let task = tokio::spawn(accept(listener, shared));
        Ok(Self {
            endpoint,
            refusals,
            task,
        })
    }
}

enum Listener {
    Unix(tokio::net::UnixListener),
    Tcp(tokio::net::TcpListener),
}

/// Binds a Unix socket, only its owner may connect. A path longer than `sun_path` holds is bound through the
/// directory's descriptor (`/proc/self/fd/<n>/<name>`), so a deep workspace root still works.
fn bind_unix(path: &Path) -> std::io::Result<tokio::net::UnixListener> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::remove_file(path);
    let listener = if path.as_os_str().len() < 100 {
        std::os::unix::net::UnixListener::bind(path)?
    } else {
        let parent = path.parent().unwrap_or(Path::new("/"));
        let name = path.file_name().unwrap_or_default();
        let dir = std::fs::File::open(parent)?;
        let short = Path::new("/proc/self/fd")
            .join(dir.as_raw_fd().to_string())
            .join(name);
        std::os::unix::net::UnixListener::bind(short)?
    };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    listener.set_nonblocking(true)?;
    tokio::net::UnixListener::from_std(listener)
}

async fn accept(listener: Listener, shared: Arc<Shared>) {
    // Dropped with this task: every connection of the run ends with it.
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = async {
                match &listener {
                    Listener::Unix(l) => l.accept().await.map(|(s, _)| Conn::Unix(s)),
                    Listener::Tcp(l) => l.accept().await.map(|(s, _)| {
                        // Small writes (a model's stream in pieces) must not wait for Nagle and delayed acks.
                        let _ = s.set_nodelay(true);
                        Conn::Tcp(s)
                    }),
                }
            } => match accepted {
                Ok(conn) => {
                    connections.spawn(serve(conn, shared.clone()));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "egress proxy: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

enum Conn {
    Unix(tokio::net::UnixStream),
    Tcp(TcpStream),
}

impl AsyncRead for Conn {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Unix(s) => std::pin::Pin::new(s).poll_read(cx, buf),
            Conn::Tcp(s) => std::pin::Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Conn::Unix(s) => std::pin::Pin::new(s).poll_write(cx, buf),
            Conn::Tcp(s) => std::pin::Pin::new(s).poll_write(cx, buf),
        }
    }
    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Unix(s) => std::pin::Pin::new(s).poll_flush(cx),
            Conn::Tcp(s) => std::pin::Pin::new(s).poll_flush(cx),
        }
    }
    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Unix(s) => std::pin::Pin::new(s).poll_shutdown(cx),
            Conn::Tcp(s) => std::pin::Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// One client connection: requests to the gateway may follow each other on it; a tunnel or a plain request
/// through the proxy is its last.
async fn serve(mut conn: Conn, shared: Arc<Shared>) {
    let mut buffer = Vec::new();
    loop {
        let head = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut conn, &mut buffer)).await
        {
            Ok(Ok(Some(head))) => head,
            Ok(Ok(None)) | Err(_) => return,
            Ok(Err(why)) => {
                shared
                    .refusals
                    .record("(not a request)", 0, Refusal::BadRequest);
                let _ = respond(&mut conn, 400, "Bad Request", &why).await;
                return;
            }
        };
        buffer.drain(..head.len);
        let gateway_path = match &head.target {
            Target::Origin { path } => Some(path.clone()),
            Target::Absolute { host, port, path }
                if *port == shared.own_port && (host == "127.0.0.1" || host == "localhost") =>
            {
                Some(path.clone())
            }
            _ => None,
        };
        if let Some(path) = gateway_path {
            match forward_to_model(&mut conn, &mut buffer, &head, &path, &shared).await {
                Ok(true) => continue,
                Ok(false) | Err(_) => return,
            }
        }
        let (host, port) = match &head.target {
            Target::Tunnel { host, port } | Target::Absolute { host, port, .. } => {
                (host.clone(), *port)
            }
            Target::Origin { .. } => return,
        };
        let upstream = match connect(&shared.policy, &host, port).await {
            Ok(upstream) => upstream,
            Err(refusal) => {
                shared.refusals.record(&host, port, refusal);
                tracing::info!(%host, port, reason = refusal.label(), "egress refused");
                let _ = respond(
                    &mut conn,
                    403,
                    "Forbidden",
                    &format!(
                        "pidevops refused egress to {host}:{port} ({}): not the model API, not in this \
                         repository's allow_hosts",
                        refusal.label()
                    ),
                )
                .await;
                return;
            }
        };
        let mut upstream = upstream;
        let opened = match &head.target {
            Target::Tunnel { .. } => conn
                .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                .await
                .and(upstream.write_all(&buffer).await),
            Target::Absolute { path, .. } => {
                let mut out = format!("{} {path} HTTP/1.1\r\n", head.method).into_bytes();
                for (name, value) in &head.headers {
                    if name.starts_with("proxy-") || name == "connection" || name == "keep-alive" {
                        continue;
                    }
                    out.extend_from_slice(name.as_bytes());
                    out.extend_from_slice(b": ");
                    out.extend_from_slice(value);
                    out.extend_from_slice(b"\r\n");
                }
                out.extend_from_slice(b"Connection: close\r\n\r\n");
                out.extend_from_slice(&buffer);
                upstream.write_all(&out).await
            }
            Target::Origin { .. } => return,
        };
        if opened.is_ok() {
            let _ = tokio::io::copy_bidirectional(&mut conn, &mut upstream).await;
        }
        return;
    }
}

/// Reads until a whole head is in `buffer`: `Ok(None)` when the client closed first.
async fn read_head(conn: &mut Conn, buffer: &mut Vec<u8>) -> Result<Option<Head>, String> {
    loop {
        if !buffer.is_empty() {
            if let Some(head) = policy::parse_head(buffer)? {
                return Ok(Some(head));
            }
            if buffer.len() > MAX_HEAD {
                return Err("the request head is too long".into());
            }
        }
        let mut chunk = [0u8; 8192];
        let n = conn.read(&mut chunk).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Ok(None);
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
}

/// Connects to an allowed destination at an address checked to be public (the model host excepted).
async fn connect(policy: &Policy, host: &str, port: u16) -> Result<TcpStream, Refusal> {
    let verdict = policy.decide(host, port);
    if let Verdict::Refused(refusal) = verdict {
        return Err(refusal);
    }
    let addresses: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|_| Refusal::Unreachable)?
        .collect();
    if addresses.is_empty() {
        return Err(Refusal::Unreachable);
    }
    // Any internal answer refuses the name: a name that resolves both ways is rebinding.
    if verdict != Verdict::Model && addresses.iter().any(|a| policy::is_internal(a.ip())) {
        return Err(Refusal::InternalAddress);
    }
    for address in addresses {
        if let Ok(Ok(stream)) =
            tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(address)).await
        {
            return Ok(stream);
        }
    }
    Err(Refusal::Unreachable)
}

async fn respond(conn: &mut Conn, status: u16, reason: &str, text: &str) -> std::io::Result<()> {
    let body = format!("{text}\n");
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).await?;
    conn.write_all(body.as_bytes()).await?;
    conn.flush().await
}

/// Headers that belong to one hop, or that the gateway sets itself.
fn hop_by_hop(name: &str) -> bool {
    matches!(
        name,
        "connection"
            | "keep-alive"
            | "proxy-authorization"
            | "proxy-connection"
            | "proxy-authenticate"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "content-length"
            | "host"
    )
}

/// A request to the gateway: sent to the real model API with the real key, the answer streamed back. `Ok(true)`:
/// the connection may carry another request.
async fn forward_to_model(
    conn: &mut Conn,
    buffer: &mut Vec<u8>,
    head: &Head,
    path: &str,
    shared: &Shared,
) -> std::io::Result<bool> {
    let Some(gateway) = &shared.gateway else {
        shared
            .refusals
            .record("127.0.0.1", shared.own_port, Refusal::BadRequest);
        respond(conn, 404, "Not Found", "this run has no model gateway").await?;
        return Ok(false);
    };
    let body = match read_body(conn, buffer, head).await {
        Ok(body) => body,
        Err(why) => {
            respond(conn, 400, "Bad Request", &why).await?;
            return Ok(false);
        }
    };
    let method = reqwest::Method::from_bytes(head.method.as_bytes())
        .map_err(|_| std::io::Error::other("bad method"))?;
    let mut request = shared.client.request(method, gateway.upstream(path));
    for (name, value) in &head.headers {
        if hop_by_hop(name) || name == "x-api-key" || name == "authorization" {
            continue;
        }
        request = request.header(name.as_str(), value.as_slice());
    }
    request = match gateway.provider.header {
        KeyHeader::XApiKey => request.header("x-api-key", gateway.key.expose_secret()),
        KeyHeader::Bearer => request.header(
            "authorization",
            format!("Bearer {}", gateway.key.expose_secret()),
        ),
    };
    let mut response = match request.body(body).send().await {
        Ok(response) => response,
        Err(e) => {
            // reqwest's error names the URL, never a header.
            respond(conn, 502, "Bad Gateway", &format!("the model API: {e}")).await?;
            return Ok(false);
        }
    };
    let status = response.status();
    let mut out = format!(
        "HTTP/1.1 {} {}\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    )
    .into_bytes();
    for (name, value) in response.headers() {
        if hop_by_hop(name.as_str()) {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    let bodiless = head.method == "HEAD" || status.as_u16() == 204 || status.as_u16() == 304;
    if bodiless {
        out.extend_from_slice(b"Content-Length: 0\r\n\r\n");
        conn.write_all(&out).await?;
        return Ok(true);
    }
    out.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
    conn.write_all(&out).await?;
    conn.flush().await?;
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                // One write per chunk: its size line, its bytes and its end together.
                let mut framed = format!("{:x}\r\n", chunk.len()).into_bytes();
                framed.extend_from_slice(&chunk);
                framed.extend_from_slice(b"\r\n");
                conn.write_all(&framed).await?;
                conn.flush().await?;
            }
            Ok(None) => break,
            // Cut short: the client sees a truncated stream, not a clean end.
            Err(_) => return Ok(false),
        }
    }
    conn.write_all(b"0\r\n\r\n").await?;
    conn.flush().await?;
    let close = head
        .header("connection")
        .is_some_and(|v| v.eq_ignore_ascii_case(b"close"));
    Ok(!close)
}

/// A request's body by its `Content-Length`, or de-chunked; at most [`MAX_BODY`].
async fn read_body(conn: &mut Conn, buffer: &mut Vec<u8>, head: &Head) -> Result<Vec<u8>, String> {
    let chunked = head.header("transfer-encoding").is_some_and(|v| {
        String::from_utf8_lossy(v)
            .to_ascii_lowercase()
            .contains("chunked")
    });
    if chunked {
        return read_chunked(conn, buffer).await;
    }
    let length = match head.header("content-length") {
        None => 0,
        Some(v) => std::str::from_utf8(v)
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .ok_or("bad Content-Length")?,
    };
    if length > MAX_BODY {
        return Err(format!("the request body is over {MAX_BODY} bytes"));
    }
    fill(conn, buffer, length).await?;
    Ok(buffer.drain(..length).collect())
}

/// Reads until `buffer` holds at least `n` bytes.
async fn fill(conn: &mut Conn, buffer: &mut Vec<u8>, n: usize) -> Result<(), String> {
    while buffer.len() < n {
        let mut chunk = vec![0u8; (n - buffer.len()).min(64 * 1024)];
        let read = conn.read(&mut chunk).await.map_err(|e| e.to_string())?;
        if read == 0 {
            return Err("the client closed mid-body".into());
        }
        buffer.extend_from_slice(&chunk[..read]);
    }
    Ok(())
}

async fn read_chunked(conn: &mut Conn, buffer: &mut Vec<u8>) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        let line_end = loop {
            if let Some(at) = buffer.windows(2).position(|w| w == b"\r\n") {
                break at;
            }
            if buffer.len() > 1024 {
                return Err("bad chunk size line".into());
            }
            let have = buffer.len();
            fill(conn, buffer, have + 1).await?;
        };
        let line = String::from_utf8_lossy(&buffer[..line_end]).into_owned();
        let size = usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| "bad chunk size")?;
        buffer.drain(..line_end + 2);
        if body.len() + size > MAX_BODY {
            return Err(format!("the request body is over {MAX_BODY} bytes"));
        }
        if size == 0 {
            // Trailers, if any, up to the blank line.
            loop {
                fill(conn, buffer, 2).await?;
                if buffer.starts_with(b"\r\n") {
                    buffer.drain(..2);
                    return Ok(body);
                }
                let have = buffer.len();
                match buffer.windows(2).position(|w| w == b"\r\n") {
                    Some(at) => {
                        buffer.drain(..at + 2);
                    }
                    None => fill(conn, buffer, have + 1).await?,
                }
            }
        }
        fill(conn, buffer, size + 2).await?;
        body.extend(buffer.drain(..size));
        buffer.drain(..2);
    }
}
