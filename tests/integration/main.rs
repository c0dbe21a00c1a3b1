//! zcp's integration tests: one binary, one file per topic (as in ripgrep). They drive the
//! real `zcp` binary over loopback; root-only tests skip with a printed reason when not root,
//! and fail when root cannot set up their fixture.

#![allow(unreachable_pub)]

mod bench;
mod clean;
mod cli;
mod delete;
mod doctor;
mod encrypt;
mod engines;
mod existing;
mod faults;
mod filter;
mod hostile;
mod http;
mod killed;
mod ls;
mod monitor;
mod netns;
mod operator;
mod packaging;
mod paths;
mod protocol;
mod rate;
mod raw;
mod resume;
mod serve_config;
mod serve_log;
mod sessions;
mod sparse;
mod ssh;
mod tree;
mod udp;
mod util;
mod verify;
