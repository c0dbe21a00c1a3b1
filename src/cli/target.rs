//! Remote targets as the user writes them, rsync's way: `[USER@]HOST:PATH` (and
//! `[USER@][IPV6]:PATH`) goes over ssh; `HOST::PATH` (`HOST::EXPORT/PATH` on a server with
//! exports) and `zcp://HOST[:PORT]/PATH` go to a `zcp serve` daemon. Forms other tools read
//! differently (an IPv6 address without brackets, other URL schemes, a user for a daemon) are
//! refused with the spelling zcp wants, never guessed at.

use std::ffi::OsStr;
use std::net::Ipv6Addr;
use std::os::unix::ffi::OsStrExt;

/// A remote target: the host and a path there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    /// Host name or address (an IPv6 address without its brackets).
    pub(crate) host: String,
    /// The port a `zcp://` URL names; `None` for the other forms and URLs without one.
    pub(crate) port: Option<u16>,
    /// The path's exact bytes (Linux names need not be UTF-8); `.` for the root (a daemon)
    /// or the login directory (ssh).
    pub(crate) path: Vec<u8>,
    /// Over ssh: the login ssh is given, `[USER@]HOST`. `None`: a daemon.
    pub(crate) ssh: Option<String>,
}

/// Parses a target (see the module documentation). `HOST:`, `HOST::` and `zcp://HOST` alone
/// mean the login directory or the server root. A URL's path is percent-decoded (`%20` is a
/// space, `%25` a literal `%`) and may not hold a raw `?` or `#`; the other forms take every
/// byte of the path literally. The error says what to write instead.
pub(crate) fn parse_target(arg: &OsStr) -> Result<Target, String> {
    let raw = arg.as_bytes();
    let parsed = match strip_scheme(raw, b"zcp://") {
        Some(rest) => {
            let authority = &rest[..rest.iter().position(|b| *b == b'/').unwrap_or(rest.len())];
            match authority.iter().rposition(|b| *b == b'@') {
                Some(at) => Err(no_users(&rest[at + 1..])),
                None => parse_url(rest),
            }
        }
        None => parse_colon(raw),
    };
    parsed.map_err(|why| format!("{}: {why}", zcp_wire::escape(raw)))
}

/// The rest of `raw` after `scheme` when it starts with it (schemes are case-insensitive).
fn strip_scheme<'a>(raw: &'a [u8], scheme: &[u8]) -> Option<&'a [u8]> {
    (raw.len() >= scheme.len() && raw[..scheme.len()].eq_ignore_ascii_case(scheme))
        .then(|| &raw[scheme.len()..])
}

/// `[USER@]HOST:PATH` (ssh) or `HOST::PATH` (a daemon), the host perhaps `[IPV6]`.
fn parse_colon(raw: &[u8]) -> Result<Target, String> {
    if let Some(scheme) = other_scheme(raw) {
        return Err(format!(
            "zcp reads no {scheme}:// URLs; write [USER@]HOST:PATH (over ssh), HOST::PATH or \
             zcp://HOST[:PORT]/PATH (a zcp serve daemon)"
        ));
    }
    // A user comes before the host: the last `@` before the first `:` (or `[`).
    let host_end = raw
        .iter()
        .position(|b| matches!(b, b':' | b'['))
        .unwrap_or(raw.len());
    let (user, rest) = match raw[..host_end].iter().rposition(|b| *b == b'@') {
        Some(at) => (Some(&raw[..at]), &raw[at + 1..]),
        None => (None, raw),
    };
    let (host, path) = split_host(rest)?;
    let host = host_text(host)?;
    let (daemon, path) = match path.strip_prefix(b":") {
        Some(p) => (true, p),
        None => (false, path),
    };
    let ssh = match (daemon, user) {
        (true, Some(_)) => {
            return Err(format!(
                "a zcp daemon has no user names (its key file is what authenticates): write \
                 {} for the daemon, or one ':' to go over ssh as that user",
                zcp_wire::escape(&[rest, b""].concat())
            ));
        }
        (true, None) => None,
        (false, user) => Some(login(user, &host)?),
    };
    Ok(Target {
        host,
        port: None,
        path: root_if_empty(path),
        ssh,
    })
}

/// `HOST:REST` or `[IPV6]:REST`: the host and what follows its `:`.
fn split_host(raw: &[u8]) -> Result<(&[u8], &[u8]), String> {
    if let Some(rest) = raw.strip_prefix(b"[") {
        let close = rest
            .iter()
            .position(|b| *b == b']')
            .ok_or("an IPv6 address needs a closing ']' (write [ADDR]:PATH)")?;
        let path = rest[close + 1..]
            .strip_prefix(b":")
            .ok_or("expected ':' after ']' (write [ADDR]:PATH)")?;
        return Ok((&rest[..close], path));
    }
    if let Some(addr) = bare_ipv6(raw) {
        let path = raw.get(addr.len() + 1..).unwrap_or_default();
        let path = if path.is_empty() { &b"PATH"[..] } else { path };
        return Err(format!(
            "an IPv6 address goes in brackets: write {}",
            zcp_wire::escape(&[b"[", addr, b"]:", path].concat())
        ));
    }
    let colon = raw.iter().position(|b| *b == b':').ok_or(
        "not HOST:PATH (write host:dir/ to go over ssh, host::dir/ or zcp://host/dir/ for a \
         zcp serve daemon)",
    )?;
    Ok((&raw[..colon], &raw[colon + 1..]))
}

/// What ssh is given to log in: `USER@HOST` or `HOST`. Neither may start with `-` (ssh would
/// take it for an option).
fn login(user: Option<&[u8]>, host: &str) -> Result<String, String> {
    if host.starts_with('-') {
        return Err("a host may not start with '-'".into());
    }
    // What a host name or address is made of (an IPv6 address with its zone too): nothing
    // a shell, or an ssh ProxyCommand's %h, would read as more than a name.
    if let Some(c) = host
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':' | '%')))
    {
        return Err(format!(
            "'{}' in a host name: write a host name or address",
            zcp_wire::escape_text(&c.to_string())
        ));
    }
    let Some(user) = user else {
        return Ok(host.to_string());
    };
    let user = std::str::from_utf8(user).map_err(|_| "the user name is not text".to_string())?;
    // Likewise for a user name (and %u): letters, digits and `. _ - @ +`.
    let odd = |c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@' | '+'));
    if user.is_empty() || user.starts_with('-') || user.chars().any(odd) {
        return Err(format!(
            "'{}' is not a user name (write USER@HOST:PATH)",
            zcp_wire::escape_text(user)
        ));
    }
    Ok(format!("{user}@{host}"))
}

/// `HOST[:PORT]/PATH` or `[IPV6][:PORT]/PATH` (what follows `zcp://`).
fn parse_url(rest: &[u8]) -> Result<Target, String> {
    let end = rest.iter().position(|b| *b == b'/').unwrap_or(rest.len());
    let (authority, path) = (&rest[..end], rest.get(end + 1..).unwrap_or_default());
    let (host, port) = if let Some(inner) = authority.strip_prefix(b"[") {
        let close = inner
            .iter()
            .position(|b| *b == b']')
            .ok_or("an IPv6 address needs a closing ']' (write zcp://[ADDR]:PORT/PATH)")?;
        let port = match &inner[close + 1..] {
            [] => None,
            [b':', digits @ ..] => Some(port(digits)?),
            _ => return Err("expected ':PORT' or '/' after ']'".into()),
        };
        (&inner[..close], port)
    } else {
        match authority.iter().position(|b| *b == b':') {
            None => (authority, None),
            Some(c) if authority[c + 1..].contains(&b':') => {
                return Err(
                    "an IPv6 address goes in brackets: write zcp://[ADDR]:PORT/PATH".into(),
                );
            }
            Some(c) => (&authority[..c], Some(port(&authority[c + 1..])?)),
        }
    };
    if let Some(b) = path.iter().find(|b| matches!(b, b'?' | b'#')) {
        let code = if *b == b'?' { "%3F" } else { "%23" };
        return Err(format!(
            "a zcp:// URL has no query or fragment; write {code} for a '{}' in a name",
            char::from(*b)
        ));
    }
    Ok(Target {
        host: host_text(host)?,
        port,
        path: root_if_empty(&percent_decode(path)?),
        ssh: None,
    })
}

/// A URL's port: 1 to 65535, in decimal.
fn port(digits: &[u8]) -> Result<u16, String> {
    if digits.is_empty() {
        return Err("no port after ':' (write zcp://HOST:PORT/PATH, or leave out ':')".into());
    }
    std::str::from_utf8(digits)
        .ok()
        .filter(|d| d.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|d| d.parse::<u16>().ok())
        .filter(|p| *p != 0)
        .ok_or_else(|| format!("'{}' is not a port (1 to 65535)", zcp_wire::escape(digits)))
}

/// `%XX` to the byte it names; a `%` without two hex digits after it is refused, so that a
/// mistyped name is not quietly a different one.
fn percent_decode(path: &[u8]) -> Result<Vec<u8>, String> {
    let hex = |i: usize| path.get(i).and_then(|b| char::from(*b).to_digit(16));
    let mut out = Vec::with_capacity(path.len());
    let mut i = 0;
    while i < path.len() {
        if path[i] != b'%' {
            out.push(path[i]);
            i += 1;
            continue;
        }
        match (hex(i + 1), hex(i + 2)) {
            (Some(hi), Some(lo)) => out.push((hi * 16 + lo) as u8),
            _ => {
                return Err(
                    "'%' in a zcp:// URL starts an escape like %20; write %25 for a '%'".into(),
                );
            }
        }
        i += 3;
    }
    Ok(out)
}

/// The scheme of `raw` when it is a URL other than `zcp://` (`rsync://`, `scp://`, ...):
/// read as `HOST:PATH` it would be a host named after the scheme and an absolute path.
fn other_scheme(raw: &[u8]) -> Option<String> {
    let sep = raw.windows(3).position(|w| w == b"://")?;
    let scheme = &raw[..sep];
    let valid = scheme.first().is_some_and(u8::is_ascii_alphabetic)
        && scheme
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
    valid.then(|| zcp_wire::escape(scheme))
}

/// The longest prefix of `raw` that is an IPv6 address and ends `raw` or is followed by a
/// `:`: `fe80::1:dir` and `::1:x` are addresses someone forgot to bracket, not a host
/// `fe80` (or none) and a path.
fn bare_ipv6(raw: &[u8]) -> Option<&[u8]> {
    let colons = raw.iter().enumerate().filter(|(_, b)| **b == b':');
    colons
        .map(|(i, _)| i)
        .chain(std::iter::once(raw.len()))
        .rfind(|&end| {
            // A zone (`fe80::1%eth0`) is not part of what the address parser takes.
            let (addr, zone) = match std::str::from_utf8(&raw[..end]) {
                Ok(s) => s.split_once('%').unwrap_or((s, "")),
                Err(_) => return false,
            };
            !zone.contains(':') && addr.parse::<Ipv6Addr>().is_ok()
        })
        .map(|end| &raw[..end])
}

/// The refusal for a user in a `zcp://` URL (a daemon): `rest` is what follows the `@`.
fn no_users(rest: &[u8]) -> String {
    let host = if rest.is_empty() || rest.starts_with(b":") || rest.starts_with(b"/") {
        &b"HOST"[..]
    } else {
        &b""[..]
    };
    format!(
        "a zcp daemon has no user names (its key file is what authenticates): write {} (or \
         USER@HOST:PATH to go over ssh)",
        zcp_wire::escape(&[b"zcp://", host, rest].concat())
    )
}

/// The host as text, not empty.
fn host_text(host: &[u8]) -> Result<String, String> {
    let host = std::str::from_utf8(host).map_err(|_| "the host is not text".to_string())?;
    if host.is_empty() {
        return Err("no host (write HOST:PATH, HOST::PATH or zcp://HOST/PATH)".into());
    }
    Ok(host.to_string())
}

/// `.` (the server root) for an empty path.
fn root_if_empty(path: &[u8]) -> Vec<u8> {
    if path.is_empty() {
        b".".to_vec()
    } else {
        path.to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &[u8]) -> Result<Target, String> {
        parse_target(OsStr::from_bytes(s))
    }

    fn ok(host: &str, port: Option<u16>, path: &[u8]) -> Result<Target, String> {
        Ok(Target {
            host: host.into(),
            port,
            path: path.to_vec(),
            ssh: None,
        })
    }

    /// Over ssh as `login`.
    fn ssh(login: &str, host: &str, path: &[u8]) -> Result<Target, String> {
        Ok(Target {
            ssh: Some(login.into()),
            ..ok(host, None, path)?
        })
    }

    /// The error for `s`, which must say `needle`.
    fn refused(s: &[u8], needle: &str) {
        let e = t(s).expect_err(&String::from_utf8_lossy(s));
        assert!(e.contains(needle), "{}: {e}", String::from_utf8_lossy(s));
    }

    #[test]
    fn one_colon_goes_over_ssh() {
        assert_eq!(t(b"host:dir/f"), ssh("host", "host", b"dir/f"));
        assert_eq!(t(b"alice@dtn:run42/"), ssh("alice@dtn", "dtn", b"run42/"));
        assert_eq!(t(b"[::1]:x"), ssh("::1", "::1", b"x"));
        assert_eq!(t(b"bob@[::1]:x"), ssh("bob@::1", "::1", b"x"));
        assert_eq!(
            t(b"[fe80::1%eth0]:x"),
            ssh("fe80::1%eth0", "fe80::1%eth0", b"x")
        );
        assert_eq!(t(b"h:"), ssh("h", "h", b"."));
        assert_eq!(t(b"h:/abs/x"), ssh("h", "h", b"/abs/x"));
        assert_eq!(t(b"h:a:b"), ssh("h", "h", b"a:b"));
        assert_eq!(
            t(b"10.0.0.2:run42/"),
            ssh("10.0.0.2", "10.0.0.2", b"run42/")
        );
        assert_eq!(t(b"h:odd\xffname"), ssh("h", "h", b"odd\xffname"));
        // `%`, `?` and `#` are literal outside zcp://, and so is an `@` in the path.
        assert_eq!(t(b"h:100%25"), ssh("h", "h", b"100%25"));
        assert_eq!(t(b"h:a?b#c"), ssh("h", "h", b"a?b#c"));
        assert_eq!(t(b"dtn:mail@x"), ssh("dtn", "dtn", b"mail@x"));
        assert_eq!(t(b"a@b@dtn:x"), ssh("a@b@dtn", "dtn", b"x"));
        // Hex-looking host names with ordinary paths stay host names.
        assert_eq!(t(b"cafe:beef"), ssh("cafe", "cafe", b"beef"));
        refused(b"nocolon", "not HOST:PATH");
        refused(b":x", "no host");
        refused(b"alice@:x", "no host");
        refused(b"[::1]x", "expected ':' after ']'");
        refused(b"[::1:x", "closing ']'");
        refused(b"h\xff:x", "not text");
        // Nothing ssh would take for an option.
        refused(b"-oProxyCommand=x:p", "may not start with '-'");
        refused(b"-l@h:p", "not a user name");
        refused(b"a b@h:p", "not a user name");
        refused(b"$(id)@h:p", "not a user name");
        refused(b"h;id:p", "in a host name");
        refused(b"h$x:p", "in a host name");
        assert_eq!(
            t(b"first.last+x@h-1.example_a:p"),
            ssh("first.last+x@h-1.example_a", "h-1.example_a", b"p")
        );
        refused(b"@h:p", "not a user name");
    }

    #[test]
    fn two_colons_or_a_url_go_to_a_daemon() {
        assert_eq!(t(b"dtn::archive/x"), ok("dtn", None, b"archive/x"));
        assert_eq!(t(b"dtn::"), ok("dtn", None, b"."));
        assert_eq!(t(b"[::1]::x"), ok("::1", None, b"x"));
        assert_eq!(t(b"127.0.0.1::up/t"), ok("127.0.0.1", None, b"up/t"));
        refused(b"alice@dtn::x", "no user names");
        refused(b"alice@dtn::x", "write dtn::x");
        refused(b"zcp://alice@dtn/run42/", "write zcp://dtn/run42/");
        refused(b"zcp://alice@dtn:6000/x", "write zcp://dtn:6000/x");
        refused(b"zcp://alice@/x", "write zcp://HOST/x");
    }

    #[test]
    fn ipv6_gets_brackets() {
        refused(b"fe80::1:path", "write [fe80::1]:path");
        refused(b"::1:x", "write [::1]:x");
        refused(b"::1", "write [::1]:PATH");
        refused(b"2001:db8::7:run42/", "write [2001:db8::7]:run42/");
        refused(b"2001:db8:0:0:0:0:0:7:x", "write [2001:db8:0:0:0:0:0:7]:x");
        refused(b"fe80::1%eth0:x", "write [fe80::1%eth0]:x");
        // `cafe::m` is not an address (`cafe::` would be, but nothing follows it with ':').
        assert_eq!(t(b"cafe::m"), ok("cafe", None, b"m"));
    }

    #[test]
    fn other_url_schemes_are_refused() {
        refused(b"rsync://dtn/m/x", "no rsync:// URLs");
        refused(b"scp://dtn/x", "no scp:// URLs");
        refused(b"ssh://u@dtn/x", "write [USER@]HOST:PATH");
    }

    #[test]
    fn zcp_urls() {
        assert_eq!(t(b"zcp://dtn/run42/"), ok("dtn", None, b"run42/"));
        assert_eq!(
            t(b"zcp://dtn:6000/run42/x"),
            ok("dtn", Some(6000), b"run42/x")
        );
        assert_eq!(t(b"ZCP://dtn/x"), ok("dtn", None, b"x"));
        assert_eq!(t(b"zcp://[::1]:5310/path"), ok("::1", Some(5310), b"path"));
        assert_eq!(t(b"zcp://[::1]/p"), ok("::1", None, b"p"));
        assert_eq!(t(b"zcp://10.0.0.2:1/p"), ok("10.0.0.2", Some(1), b"p"));
        // No path, or only the slash: the root, as `host:` is.
        assert_eq!(t(b"zcp://dtn"), ok("dtn", None, b"."));
        assert_eq!(t(b"zcp://dtn/"), ok("dtn", None, b"."));
        assert_eq!(t(b"zcp://dtn:6000"), ok("dtn", Some(6000), b"."));
        assert_eq!(t(b"zcp://[::1]:7"), ok("::1", Some(7), b"."));
        // Percent-decoding, into any byte; raw odd bytes pass through.
        assert_eq!(t(b"zcp://h/a%20b%2Fc"), ok("h", None, b"a b/c"));
        assert_eq!(t(b"zcp://h/100%25"), ok("h", None, b"100%"));
        assert_eq!(t(b"zcp://h/odd%FFname"), ok("h", None, b"odd\xffname"));
        assert_eq!(t(b"zcp://h/odd\xffname"), ok("h", None, b"odd\xffname"));
        assert_eq!(t(b"zcp://h/a:b"), ok("h", None, b"a:b"));
        // A second slash after the host is an absolute path: left to the path checks,
        // which refuse it as they refuse `host:/x`.
        assert_eq!(t(b"zcp://h//etc"), ok("h", None, b"/etc"));
    }

    #[test]
    fn bad_zcp_urls_name_the_fix() {
        refused(b"zcp://", "no host");
        refused(b"zcp:///x", "no host");
        refused(b"zcp://:6000/x", "no host");
        refused(b"zcp://h:/x", "no port after ':'");
        refused(b"zcp://h:0/x", "'0' is not a port");
        refused(b"zcp://h:65536/x", "'65536' is not a port");
        refused(b"zcp://h:+80/x", "is not a port");
        refused(b"zcp://h:http/x", "'http' is not a port");
        refused(b"zcp://::1/x", "brackets");
        refused(b"zcp://fe80::1:5310/x", "brackets");
        refused(b"zcp://[::1/x", "closing ']'");
        refused(b"zcp://[::1]x/y", "after ']'");
        refused(b"zcp://h/a%2", "write %25");
        refused(b"zcp://h/a%zz", "write %25");
        refused(b"zcp://h/a%+1", "write %25");
        refused(b"zcp://h/a?b", "%3F");
        refused(b"zcp://h/a#b", "%23");
        refused(b"zcp://h\xff/x", "not text");
    }
}
