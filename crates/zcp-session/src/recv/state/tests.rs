//! The receiving state machine's own tests.

use super::*;

#[test]
fn preparing_a_target_earns_credit_once_per_name_and_file_then_starts_over() {
    let (mut rx, _) = crate::fuzzing::in_memory(Scope::push(), Instant::now());
    assert!(rx.credit("a", Some((1, 10))));
    assert!(!rx.credit("a", Some((1, 10))), "the same target again");
    assert!(!rx.credit("a", None), "the same name, not hashed this time");
    assert!(
        !rx.credit("A", Some((1, 10))),
        "another name for the same file"
    );
    assert!(rx.credit("b", None));
    assert!(rx.credit("c", Some((2, 10))), "another device");
    // Bounded: after MAX_CREDITED entries the memory starts over, so "a" earns again
    // only after that many other targets were prepared.
    for i in 0..MAX_CREDITED {
        rx.credit(&format!("t{i}"), None);
    }
    assert!(rx.credited.len() <= MAX_CREDITED);
    assert!(rx.credit("a", Some((1, 10))));
}
