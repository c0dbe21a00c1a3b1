//! A malicious server that holds the key, against `zcp get`.

use std::io::Write;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use zcp_wire::{ErrorCode, Message};

use super::harness::*;
use crate::util::*;
