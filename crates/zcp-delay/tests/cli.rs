//! The binary's argument checks (no root needed). Having an integration test also makes
//! `cargo test --workspace` build the `zcp-delay` binary the netns tests of zcp run.

use std::process::Command;

fn delay(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_zcp-delay"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn a_bad_delay_is_refused_with_its_range() {
    let o = delay(&["--a", "x", "--b", "y", "--delay", "20000"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("give 0 to 10000"), "{err}");
    let o = delay(&["--a", "x", "--b", "y", "--delay", "soon"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a number of milliseconds"));
}

#[test]
fn a_missing_interface_is_named() {
    let o = delay(&["--a", "zcp-nodev0", "--b", "zcp-nodev1", "--delay", "1"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("zcp-nodev0"), "{err}");
}
