//! The credentials in `NATS_URL`, and whether it lets strangers in.
//!
//! The relay publishes the whole log to NATS and workers take run requests from it, so a server that any process
//! on the network can reach without credentials reads every ticket and stores forged events. Deployments run NATS
//! with users (`deploy/nats/nats.conf`) and name them in the URL: `nats://user:password@host:4222`, or a token as
//! `nats://token@host:4222`. async-nats reads the servers from such a URL but not the credentials in it, so
//! [`client_options`] takes them out and hands them to the client; [`open_to_strangers`] is what `doctor`,
//! `/health` and start-up say about a URL without them.

use std::borrow::Cow;

/// What to connect with: the client's options carrying the URL's credentials, and the servers without them (so
/// nothing that logs a server address can print a password).
pub fn client_options(nats_url: &str) -> (async_nats::ConnectOptions, Vec<String>) {
    let mut credentials: Option<(String, Option<String>)> = None;
    let servers = nats_url
        .split(',')
        .map(str::trim)
        .filter(|server| !server.is_empty())
        .map(|server| {
            let with_scheme = if server.contains("://") {
                Cow::Borrowed(server)
            } else {
                Cow::Owned(format!("nats://{server}"))
            };
            let Ok(mut url) = url::Url::parse(&with_scheme) else {
                // Unreadable: the client refuses it at connect, in its own words.
                return server.to_owned();
            };
            if !url.username().is_empty() && credentials.is_none() {
                let decode = |s: &str| {
                    percent_encoding::percent_decode_str(s)
                        .decode_utf8_lossy()
                        .into_owned()
                };
                credentials = Some((decode(url.username()), url.password().map(decode)));
            }
            // Neither can fail on a URL with a host, which every nats:// URL the client accepts has.
            let _ = url.set_username("");
            let _ = url.set_password(None);
            url.to_string()
        })
        .collect();
    let options = match credentials {
        Some((user, Some(password))) => {
            async_nats::ConnectOptions::with_user_and_password(user, password)
        }
        Some((token, None)) => async_nats::ConnectOptions::with_token(token),
        None => async_nats::ConnectOptions::new(),
    };
    (options, servers)
}

/// Why this `NATS_URL` is open to strangers, or `None`: every server it names either carries credentials
/// (`nats://user:password@host`, `nats://token@host`) or is on loopback. A comma-separated list is read server by
/// server, as the NATS client does.
pub fn open_to_strangers(nats_url: &str) -> Option<String> {
    let open: Vec<String> = nats_url
        .split(',')
        .map(str::trim)
        .filter(|server| !server.is_empty())
        .filter_map(|server| {
            let with_scheme = if server.contains("://") {
                server.to_owned()
            } else {
                format!("nats://{server}")
            };
            let Ok(url) = url::Url::parse(&with_scheme) else {
                // Unreadable: the client will refuse it at connect, with its own words.
                return None;
            };
            let host = url.host()?;
            let loopback = match host {
                // A `nats://` URL's host is opaque to the url crate: an address comes back as a name.
                url::Host::Domain(name) => {
                    name.eq_ignore_ascii_case("localhost")
                        || name
                            .parse::<std::net::IpAddr>()
                            .is_ok_and(|ip| ip.is_loopback())
                }
                url::Host::Ipv4(ip) => ip.is_loopback(),
                url::Host::Ipv6(ip) => ip.is_loopback(),
            };
            (url.username().is_empty() && !loopback).then(|| host.to_string())
        })
        .collect();
    (!open.is_empty()).then(|| {
        format!(
            "NATS_URL names no credentials for {} (not loopback): whoever reaches it reads every event and can \
             publish forged ones; run NATS with users (deploy/nats/nats.conf) and put them in NATS_URL",
            open.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::{client_options, open_to_strangers};

    #[test]
    fn credentials_are_taken_out_of_the_servers_the_client_is_given() {
        let (_, servers) = client_options(
            "nats://pidevops:p%40ss@nats:4222, nats://tok@other:4223,127.0.0.1:4224",
        );
        assert_eq!(
            servers,
            [
                "nats://nats:4222",
                "nats://other:4223",
                "nats://127.0.0.1:4224"
            ]
        );
        let (_, servers) = client_options("nats://127.0.0.1:4222");
        assert_eq!(servers, ["nats://127.0.0.1:4222"]);
    }

    #[test]
    fn a_server_off_loopback_without_credentials_is_open_to_strangers() {
        for url in [
            "nats://nats:4222",
            "nats://10.0.0.7:4222",
            "nats.railway.internal:4222",
            "tls://nats.example.com",
            "nats://[fd12::1]:4222",
            "nats://user:pw@a:4222, nats://b:4222",
        ] {
            let why = open_to_strangers(url).unwrap_or_else(|| panic!("{url} passed"));
            assert!(why.contains("no credentials"), "{why}");
        }
        assert!(open_to_strangers("nats://user:pw@a:4222,nats://b:4222")
            .is_some_and(|why| why.contains("for b") && !why.contains("pw")));
    }

    #[test]
    fn credentials_or_loopback_are_not_open_to_strangers() {
        for url in [
            "nats://127.0.0.1:4222",
            "nats://localhost:4222",
            "nats://[::1]:4222",
            "127.0.0.1:4222",
            "nats://pidevops:0123abcd@nats:4222",
            "nats://s3cr3t-token@nats.example.com:4222",
            "nats://a:b@x:4222,nats://c:d@y:4222",
        ] {
            assert_eq!(open_to_strangers(url), None, "{url}");
        }
    }
}
