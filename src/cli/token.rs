//! `zcp token`: a bearer token for the HTTPS/WebDAV face (`[http]` in the serve config), made
//! from the config and the identity's key file alone.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use zcp_http::token::{Activity, Caveat, Token, normalize_prefix};
use zcp_report::serve_config;

/// `zcp token --help`'s examples, each a command line the tests parse.
pub(crate) const EXAMPLES: &str = "\
  zcp token --config /etc/zcp/zcp.toml --identity fts      # all that fts may do, for 1 hour
  zcp token --config /etc/zcp/zcp.toml --identity fts --path /data/run7 --activity DOWNLOAD,LIST --ttl 12h
  zcp token --config /etc/zcp/zcp.toml --identity rucio --path /data --ttl 7d   # a week, one export
  curl -H \"Authorization: Bearer $(zcp token --config /etc/zcp/zcp.toml --identity fts)\" https://dtn.example.org:8443/data/run7/f.h5";

#[derive(Debug, Args)]
#[command(after_help = super::after_help(EXAMPLES, false))]
pub(crate) struct TokenArgs {
    /// The serve config file naming the identity and its key file.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// The identity the token speaks for (an [identity.NAME] of the config).
    #[arg(long, value_name = "NAME")]
    identity: String,
    /// Only this path and what lies beneath it: /EXPORT or /EXPORT/DIR (/: every export the
    /// identity may use).
    #[arg(long, value_name = "PREFIX", default_value = "/")]
    path: String,
    /// Only these activities: DOWNLOAD, UPLOAD, LIST, DELETE, MANAGE, READ_METADATA,
    /// UPDATE_METADATA (comma-separated, or the flag repeated) [default: all the identity's
    /// permissions allow].
    #[arg(long, value_name = "A,B", value_delimiter = ',')]
    activity: Vec<String>,
    /// How long the token is good for (e.g. 30m, 12h, 7d).
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = humantime::parse_duration)]
    ttl: Duration,
}

pub(crate) fn run(a: TokenArgs) -> anyhow::Result<i32> {
    let cfg = serve_config::load(&a.config).map_err(|m| anyhow::Error::new(super::Usage(m)))?;
    let Some(id) = cfg.access.identities.iter().find(|i| i.name == a.identity) else {
        let names: Vec<&str> = cfg
            .access
            .identities
            .iter()
            .map(|i| i.name.as_str())
            .collect();
        super::usage!(
            "--identity: {} names no identity of {} (it has: {})",
            zcp_wire::escape_text(&a.identity),
            a.config.display(),
            names.join(", ")
        );
    };
    let Some(path) = normalize_prefix(&a.path) else {
        super::usage!(
            "--path: '{}' is not an absolute path without '.' or '..' (e.g. /data/run7)",
            a.path.escape_debug()
        );
    };
    if let Some(export) = path.split('/').nth(1).filter(|e| !e.is_empty())
        && !id.access.contains_key(export)
    {
        super::usage!(
            "--path: identity {} has no access to an export '{}' (its exports: {})",
            a.identity,
            export.escape_debug(),
            id.access.keys().cloned().collect::<Vec<_>>().join(", ")
        );
    }
    let mut activities = Vec::new();
    for name in &a.activity {
        match Activity::parse(name) {
            Some(act) => activities.push(act),
            None => super::usage!(
                "--activity: '{}' is not one of {}",
                name.escape_debug(),
                Activity::ALL.map(|a| a.name()).join(", ")
            ),
        }
    }
    if a.ttl.is_zero() {
        super::usage!("--ttl must be more than 0 (e.g. 1h)");
    }
    let now = zcp_http::now_unix();
    let expiry = now.saturating_add(a.ttl.as_secs().max(1));
    let mut caveats = vec![Caveat::Path(path.clone())];
    if !activities.is_empty() {
        caveats.push(Caveat::Activities(activities.clone()));
    }
    caveats.push(Caveat::Before(expiry));
    let key = zcp_wire::http_token_key(&id.psk, &id.name);
    let token = Token::mint(&key, &id.name, zcp_engine::sys::random::<16>()?, caveats);
    println!("{}", token.encode());
    let acts = if activities.is_empty() {
        "all its permissions allow".to_string()
    } else {
        activities
            .iter()
            .map(|a| a.name())
            .collect::<Vec<_>>()
            .join(",")
    };
    eprintln!(
        "zcp: token for identity {} on {path}, activities: {acts}, good until {}",
        id.name,
        humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_secs(expiry))
    );
    Ok(0)
}
