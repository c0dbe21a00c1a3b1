//! Any bytes as a pull's filter rules (`Open.filters`, as a hostile client sends them) and
//! paths to match: compiling never panics and stays within its bounds, and matching any path
//! never panics. Lines before the first empty line are rules; the lines after it, paths.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zcp_wire::{Filter, MAX_FILTER_RULES};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (rules, paths) = text.split_once("\n\n").unwrap_or((&text, "a/b"));
    let rules: Vec<String> = rules.lines().map(str::to_string).collect();
    let Ok(filter) = Filter::from_wire(&rules) else {
        return;
    };
    assert!(rules.len() <= MAX_FILTER_RULES);
    for p in paths.lines().take(64) {
        let _ = filter.excludes(p.as_bytes(), false);
        let _ = filter.excludes(p.as_bytes(), true);
    }
});
