//! Signing in and out: the admin token exchanged for a signed cookie, wrong tokens throttled per client address
//! (every attempt takes its address's slot first, so a throttled address learns nothing, not even from the right
//! token), and signing out recorded as an event every replica checks.

use secrecy::SecretString;

use super::*;

#[derive(Debug, Default, Deserialize)]
pub(super) struct NextQuery {
    next: Option<String>,
}

pub(super) async fn sign_in_page(
    State(state): State<AppState>,
    Query(query): Query<NextQuery>,
) -> Response {
    let next = session::safe_next(query.next.as_deref());
    match key(&state) {
        None => page(
            StatusCode::SERVICE_UNAVAILABLE,
            pages::sign_in(
                &next,
                None,
                Some("PIDEVOPS_ADMIN_TOKEN is not set, so the dashboard is closed."),
            ),
        ),
        Some(_) => page(StatusCode::OK, pages::sign_in(&next, None, None)),
    }
}

/// The client's address as the socket saw it. `X-Forwarded-For` and `Forwarded` are not read: anyone can send
/// them. Behind a reverse proxy every client has the proxy's address: per-client limits belong in the proxy.
pub(super) struct Peer(Option<IpAddr>);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Peer {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        Ok(Self(
            parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|ConnectInfo(addr)| addr.ip()),
        ))
    }
}

pub(super) async fn sign_in(
    State(state): State<AppState>,
    Peer(peer): Peer,
    headers: HeaderMap,
    body: bytes::Bytes,
) -> Response {
    let Some(form) = parse_form(&body, FORM_LIMIT) else {
        return too_large();
    };
    let field = |name: &str| {
        form.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let next = session::safe_next(field("next"));
    let Some(key) = key(&state) else {
        return sign_in_page(State(state), Query(NextQuery { next: Some(next) })).await;
    };
    // Every attempt takes a slot of its own client address first, and an address with its share of wrong tokens
    // being answered is turned away *unchecked*: a 429 says nothing about the token, so guessing from one address
    // runs at most MAX_FAILING_PER_ADDRESS a second, however fast it sends. Another address is never held up by
    // it: the right token from there is checked at once. (At least 24 characters, config, makes guessing
    // hopeless anyway.)
    let Some(slot) = state.sign_ins.admit(peer) else {
        return page(
            StatusCode::TOO_MANY_REQUESTS,
            pages::sign_in(
                &next,
                Some("Too many wrong tokens from here just now: try again in a few seconds."),
                None,
            ),
        );
    };
    if !state
        .settings
        .admin_token_matches(field("token").unwrap_or_default())
    {
        // Wrong: answered after a second, holding the address's slot until then.
        let _failing = slot;
        tracing::warn!("dashboard sign-in refused: wrong token");
        tokio::time::sleep(FAILED_SIGN_IN_DELAY).await;
        return page(
            StatusCode::UNAUTHORIZED,
            pages::sign_in(&next, Some("That is not the admin token."), None),
        );
    }
    drop(slot);
    signed_in(&key, &headers, &next)
}

/// The session cookie for a new sign-in, and the way on to `next`.
fn signed_in(key: &Key, headers: &HeaderMap, next: &str) -> Response {
    let session = Session::new(Utc::now(), rand::random());
    let secure = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|p| p.eq_ignore_ascii_case("https"));
    let cookie = format!(
        "{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}",
        session.cookie_value(key),
        session::LIFETIME.num_seconds(),
        if secure { "; Secure" } else { "" }
    );
    let mut response = Redirect::to(next).into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

/// The first run's link (`startup::first_run`): one code, made when `serve` prints it, that signs in once.
#[derive(Debug, Default)]
pub struct OneTimeSignIn {
    code: Mutex<Option<SecretString>>,
}

impl OneTimeSignIn {
    /// A new code, replacing any code not yet used.
    pub fn issue(&self) -> SecretString {
        let code = SecretString::from(hex::encode(rand::random::<[u8; 32]>()));
        *self.code.lock().unwrap_or_else(|e| e.into_inner()) = Some(code.clone());
        code
    }

    /// Whether `presented` is the code, which is then used up.
    fn redeem(&self, presented: &str) -> bool {
        let mut code = self.code.lock().unwrap_or_else(|e| e.into_inner());
        let matches = code
            .as_ref()
            .is_some_and(|c| crate::config::secret::constant_time_eq(c.expose_secret(), presented));
        if matches {
            *code = None;
        }
        matches
    }
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct OnceQuery {
    code: Option<String>,
}

/// `GET /sign-in/once?code=…`: the first run's link. Throttled like the sign-in form; a used or wrong code is
/// refused the same way as a wrong token.
pub(super) async fn sign_in_once(
    State(state): State<AppState>,
    Peer(peer): Peer,
    headers: HeaderMap,
    Query(query): Query<OnceQuery>,
) -> Response {
    let Some(key) = key(&state) else {
        return sign_in_page(State(state), Query(NextQuery::default())).await;
    };
    let Some(slot) = state.sign_ins.admit(peer) else {
        return page(
            StatusCode::TOO_MANY_REQUESTS,
            pages::sign_in(
                "/",
                Some("Too many wrong tokens from here just now: try again in a few seconds."),
                None,
            ),
        );
    };
    if !state
        .sign_in_link
        .redeem(query.code.as_deref().unwrap_or_default())
    {
        let _failing = slot;
        tracing::warn!("dashboard sign-in link refused: used already or wrong");
        tokio::time::sleep(FAILED_SIGN_IN_DELAY).await;
        return page(
            StatusCode::UNAUTHORIZED,
            pages::sign_in(
                "/",
                Some("That sign-in link has been used already, or is not this server's: sign in with the token."),
                None,
            ),
        );
    }
    drop(slot);
    signed_in(&key, &headers, "/")
}

/// Wrong sign-ins being answered, counted per client address (IPv6 by its /64, which one client usually holds
/// whole). Only addresses with an answer pending have an entry, and at most [`MAX_FAILING_ADDRESSES`] of them.
#[derive(Debug, Default)]
pub struct SignInThrottle {
    failing: Mutex<HashMap<IpAddr, usize>>,
}

impl SignInThrottle {
    /// A slot for one more sign-in from `peer` (held a second when the token is wrong), or `None` if it already
    /// has its share of wrong ones being answered (or the table is full).
    fn admit(self: &Arc<Self>, peer: Option<IpAddr>) -> Option<Failing> {
        let client = client_key(peer);
        let mut failing = self.failing.lock().unwrap_or_else(|p| p.into_inner());
        let full = failing.len() >= MAX_FAILING_ADDRESSES;
        match failing.get_mut(&client) {
            Some(n) if *n >= MAX_FAILING_PER_ADDRESS => return None,
            Some(n) => *n += 1,
            None if full => return None,
            None => {
                failing.insert(client, 1);
            }
        }
        Some(Failing {
            throttle: self.clone(),
            client,
        })
    }

    /// Client addresses with wrong sign-ins being answered now.
    pub fn addresses(&self) -> usize {
        self.failing.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// The throttle's key for a peer: an IPv4 address, or the /64 of an IPv6 one (an IPv4-mapped one is IPv4).
pub(super) fn client_key(peer: Option<IpAddr>) -> IpAddr {
    match peer.map(|ip| ip.to_canonical()) {
        None => IpAddr::from([0, 0, 0, 0]),
        Some(IpAddr::V4(v4)) => IpAddr::V4(v4),
        Some(IpAddr::V6(v6)) => {
            let prefix = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(prefix.into())
        }
    }
}

/// One wrong sign-in being answered; counted until dropped, even when the client goes away mid-wait.
pub(super) struct Failing {
    throttle: Arc<SignInThrottle>,
    client: IpAddr,
}

impl Drop for Failing {
    fn drop(&mut self) {
        let mut failing = self
            .throttle
            .failing
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(n) = failing.get_mut(&self.client) {
            *n -= 1;
            if *n == 0 {
                failing.remove(&self.client);
            }
        }
    }
}

/// Ends the session everywhere: its sign-out is appended to the log (committed before the answer), and every
/// replica looks for it on every request.
pub(super) async fn sign_out(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: bytes::Bytes,
) -> Response {
    let Some(form) = parse_form(&body, FORM_LIMIT) else {
        return too_large();
    };
    let session = match require_post(&state, &headers, &form).await {
        Access::Granted(_, session) => session,
        Access::Denied(response) => return response,
    };
    let record = serde_json::json!({
        "session": session.id(),
        "expires": session.expires.to_rfc3339(),
    });
    let event = NewEvent::new(
        Source::Pidevops,
        EventType::new(Source::Pidevops, &["dashboard", "signed_out"]),
        signed_out_key(&session),
        "application/json",
        bytes::Bytes::from(record.to_string()),
    );
    if let Err(e) = state.log.append(event).await {
        return unavailable(e);
    }
    let mut response = Redirect::to("/sign-in").into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static("pidevops_session=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"),
    );
    response
}
