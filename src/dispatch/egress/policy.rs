//! What an agent's egress proxy lets through, and how it reads a request's head. Pure: no socket, no resolver.
//!
//! A destination is allowed when its name is the profile's model API host (on that API's port) or matches the
//! repository's `allow_hosts` (on 443 or 80); everything else is refused: IP literals, names not listed, and, once
//! resolved, any name that points at loopback, a private or link-local range (DNS rebinding). The model host is
//! the one exception to the address rule, and only when the operator configured it so (a model API on loopback
//! in tests, an on-premises gateway).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub use crate::config::allow_hosts::{HostRule, MAX_HOST, PACKAGE_REGISTRIES, REGISTRIES};

/// Why the proxy refused a destination: the label of `pidevops_agent_egress_refused_total` (a fixed set).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Refusal {
    /// The name is neither the model host nor in the allow-list.
    NotAllowed,
    /// An IP address instead of a name.
    IpLiteral,
    /// The name resolves to loopback, a private, link-local or otherwise internal address.
    InternalAddress,
    /// The name does not resolve, or the connection failed.
    Unreachable,
    /// Not a request the proxy speaks (bad head, a method other than CONNECT through an HTTPS target).
    BadRequest,
}

impl Refusal {
    pub fn label(self) -> &'static str {
        match self {
            Self::NotAllowed => "not_allowed",
            Self::IpLiteral => "ip_literal",
            Self::InternalAddress => "internal_address",
            Self::Unreachable => "unreachable",
            Self::BadRequest => "bad_request",
        }
    }
}

/// The model API's host and port, as the profile's base URL names them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelHost {
    pub host: String,
    pub port: u16,
}

/// What one run's proxy allows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    pub model: Option<ModelHost>,
    pub allowed: Vec<HostRule>,
}

/// What the proxy does with a destination before resolving it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Allowed by name; its addresses must still be public.
    Allowed,
    /// The model host: allowed wherever the operator pointed it.
    Model,
    Refused(Refusal),
}

impl Policy {
    pub fn decide(&self, host: &str, port: u16) -> Verdict {
        let host = normalize(host);
        if let Some(model) = &self.model {
            if model.host == host && model.port == port {
                return Verdict::Model;
            }
        }
        if host.parse::<IpAddr>().is_ok() {
            return Verdict::Refused(Refusal::IpLiteral);
        }
        if (port == 443 || port == 80) && self.allowed.iter().any(|rule| rule.matches(&host)) {
            return Verdict::Allowed;
        }
        Verdict::Refused(Refusal::NotAllowed)
    }
}

/// A host as compared: lower case, without a trailing dot or IPv6 brackets.
pub fn normalize(host: &str) -> String {
    let host = host.trim_end_matches('.');
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    host.to_ascii_lowercase()
}

/// Whether an address is one an agent must never reach through the proxy: loopback, private ranges, link-local
/// (the cloud metadata service at 169.254.169.254), carrier-grade NAT, unspecified, multicast, broadcast,
/// documentation and benchmarking ranges, IPv6 unique-local and link-local, and IPv4 inside IPv6.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => internal_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return internal_v4(v4);
            }
            let first = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00 // unique local fc00::/7
                || (first & 0xffc0) == 0xfe80 // link-local fe80::/10
                || (first & 0xffc0) == 0xfec0 // site-local (deprecated)
                || v6 == Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0) // NAT64 prefix itself
                || (first == 0x2001 && v6.segments()[1] == 0xdb8) // documentation
        }
    }
}

fn internal_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b)) // carrier-grade NAT
        || (a == 192 && b == 0 && ip.octets()[2] == 0) // IETF protocol assignments
        || (a == 198 && (b == 18 || b == 19)) // benchmarking
        || a >= 240 // reserved
}

/// What a request's first line asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// `CONNECT host:port`: a tunnel (HTTPS).
    Tunnel { host: String, port: u16 },
    /// `GET http://host:port/path`: plain HTTP through the proxy.
    Absolute {
        host: String,
        port: u16,
        path: String,
    },
    /// `POST /v1/messages`: a request to the proxy itself, the model gateway.
    Origin { path: String },
}

/// A request's head, read by `httparse`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Head {
    pub method: String,
    pub target: Target,
    /// Names lower-cased, values as sent.
    pub headers: Vec<(String, Vec<u8>)>,
    /// Bytes of the head, the blank line included.
    pub len: usize,
}

impl Head {
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
    }
}

/// Most headers a request may carry.
const MAX_HEADERS: usize = 100;

/// Reads a request head from the start of `bytes`: `Ok(None)` while it is incomplete.
pub fn parse_head(bytes: &[u8]) -> Result<Option<Head>, String> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    let len = match request.parse(bytes) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("not an HTTP request: {e}")),
    };
    let method = request.method.unwrap_or_default().to_owned();
    let raw = request.path.unwrap_or_default();
    let target = if method == "CONNECT" {
        let (host, port) = authority(raw).ok_or_else(|| format!("bad CONNECT target {raw:?}"))?;
        Target::Tunnel { host, port }
    } else if let Some(rest) = raw.strip_prefix("http://") {
        let (authority_text, path) = match rest.find('/') {
            Some(at) => (&rest[..at], &rest[at..]),
            None => (rest, "/"),
        };
        let (host, port) = if authority_text.contains(':') && !authority_text.ends_with(']') {
            authority(authority_text).ok_or_else(|| format!("bad target {raw:?}"))?
        } else {
            (normalize(authority_text), 80)
        };
        if host.is_empty() || authority_text.contains('@') {
            return Err(format!("bad target {raw:?}"));
        }
        Target::Absolute {
            host,
            port,
            path: path.to_owned(),
        }
    } else if raw.starts_with('/') {
        Target::Origin {
            path: raw.to_owned(),
        }
    } else {
        return Err(format!("unsupported request target {raw:?}"));
    };
    let headers = request
        .headers
        .iter()
        .map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec()))
        .collect();
    Ok(Some(Head {
        method,
        target,
        headers,
        len,
    }))
}

/// `host:port` (IPv6 in brackets), the port required.
fn authority(text: &str) -> Option<(String, u16)> {
    let (host, port) = text.rsplit_once(':')?;
    let port: u16 = port.parse().ok().filter(|p| *p != 0)?;
    let host = normalize(host);
    (!host.is_empty() && host.len() <= MAX_HOST && !host.contains(['/', '@', ' ']))
        .then_some((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        Policy {
            model: Some(ModelHost {
                host: "api.anthropic.com".into(),
                port: 443,
            }),
            allowed: vec![
                HostRule::parse("registry.npmjs.org").unwrap(),
                HostRule::parse("*.example.com").unwrap(),
            ],
        }
    }

    #[test]
    fn only_the_model_host_and_listed_names_are_allowed() {
        let p = policy();
        assert_eq!(p.decide("api.anthropic.com", 443), Verdict::Model);
        assert_eq!(p.decide("API.Anthropic.com.", 443), Verdict::Model);
        // The model host on another port is just a name not listed.
        assert_eq!(
            p.decide("api.anthropic.com", 22),
            Verdict::Refused(Refusal::NotAllowed)
        );
        assert_eq!(p.decide("registry.npmjs.org", 443), Verdict::Allowed);
        assert_eq!(p.decide("registry.npmjs.org", 80), Verdict::Allowed);
        assert_eq!(
            p.decide("registry.npmjs.org", 4222),
            Verdict::Refused(Refusal::NotAllowed)
        );
        assert_eq!(p.decide("a.example.com", 443), Verdict::Allowed);
        assert_eq!(p.decide("a.b.example.com", 443), Verdict::Allowed);
        for refused in [
            "example.com",
            "badexample.com",
            "evil.test",
            "example.com.evil.test",
        ] {
            assert_eq!(
                p.decide(refused, 443),
                Verdict::Refused(Refusal::NotAllowed),
                "{refused}"
            );
        }
        for literal in [
            "169.254.169.254",
            "127.0.0.1",
            "8.8.8.8",
            "[::1]",
            "::ffff:10.0.0.1",
        ] {
            assert_eq!(
                p.decide(literal, 443),
                Verdict::Refused(Refusal::IpLiteral),
                "{literal}"
            );
        }
    }

    #[test]
    fn a_model_host_the_operator_put_on_loopback_is_the_model() {
        let p = Policy {
            model: Some(ModelHost {
                host: "127.0.0.1".into(),
                port: 38001,
            }),
            allowed: Vec::new(),
        };
        assert_eq!(p.decide("127.0.0.1", 38001), Verdict::Model);
        // The service's own port, NATS, Postgres: not the model.
        for port in [8080, 4222, 5432] {
            assert_eq!(
                p.decide("127.0.0.1", port),
                Verdict::Refused(Refusal::IpLiteral)
            );
        }
    }

    #[test]
    fn internal_addresses_are_recognised_in_both_families() {
        for internal in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
        ] {
            assert!(is_internal(internal.parse().unwrap()), "{internal}");
        }
        for public in ["1.1.1.1", "140.82.112.3", "2606:4700::1111"] {
            assert!(!is_internal(public.parse().unwrap()), "{public}");
        }
    }

    #[test]
    fn request_heads_are_read_in_their_three_forms() {
        let sent =
            b"CONNECT api.anthropic.com:443 HTTP/1.1\r\nHost: api.anthropic.com:443\r\n\r\nrest";
        let head = parse_head(sent).unwrap().unwrap();
        assert_eq!(
            head.target,
            Target::Tunnel {
                host: "api.anthropic.com".into(),
                port: 443
            }
        );
        // What follows the head is the tunnel's first bytes, left for it.
        assert_eq!(&sent[head.len..], b"rest");
        let head = parse_head(
            b"GET http://Example.COM/simple/x?y=1 HTTP/1.1\r\nHost: example.com\r\n\r\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            head.target,
            Target::Absolute {
                host: "example.com".into(),
                port: 80,
                path: "/simple/x?y=1".into()
            }
        );
        let head = parse_head(b"GET http://[::1]:8080 HTTP/1.1\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(
            head.target,
            Target::Absolute {
                host: "::1".into(),
                port: 8080,
                path: "/".into()
            }
        );
        let head = parse_head(
            b"POST /v1/messages HTTP/1.1\r\nX-Api-Key: placeholder\r\nContent-Length: 2\r\n\r\n{}",
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            head.target,
            Target::Origin {
                path: "/v1/messages".into()
            }
        );
        assert_eq!(head.header("x-api-key"), Some(&b"placeholder"[..]));
        assert_eq!(head.header("content-length"), Some(&b"2"[..]));
        // Incomplete: wait for more.
        assert_eq!(parse_head(b"CONNECT a.b:443 HTTP/1.1\r\n").unwrap(), None);
    }

    #[test]
    fn bad_heads_are_refused() {
        for bad in [
            &b"CONNECT api.anthropic.com HTTP/1.1\r\n\r\n"[..],
            b"CONNECT a.b:0 HTTP/1.1\r\n\r\n",
            b"CONNECT a.b:99999 HTTP/1.1\r\n\r\n",
            b"GET https://a.b/ HTTP/1.1\r\n\r\n",
            b"GET http://user@a.b/ HTTP/1.1\r\n\r\n",
            b"GET * HTTP/1.1\r\n\r\n",
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
        ] {
            assert!(parse_head(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }
}
