//! Any text as a bearer token for `zcp serve`'s HTTPS face: never panics; nothing but a token
//! signed with the key verifies (a fuzzer cannot forge HMAC-SHA256), and what decodes encodes
//! back to the same text; the text with one more caveat, signed on from the old signature
//! (what anyone may do), still verifies only if the original did.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zcp_http::token::{Caveat, Token};

const KEY: [u8; 32] = [0x5a; 32];

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(t) = Token::decode(text) else {
        return;
    };
    let verified = t.verify(&KEY, 0).is_ok();
    assert!(!verified, "a token the fuzzer made verified: {text}");
    let again = Token::decode(&t.encode()).expect("an encoded token decodes");
    assert_eq!(again, t);
    let mut narrower = t.clone();
    narrower.narrow(Caveat::Path("/x".into()));
    assert!(narrower.verify(&KEY, 0).is_err());
    // A real one, narrowed by its holder, verifies; widening it by dropping the caveat fails.
    let mut real = Token::mint(&KEY, &t.identity, [1; 16], t.caveats.clone());
    let ok = real.verify(&KEY, 0).is_ok();
    real.narrow(Caveat::Path("/x".into()));
    assert_eq!(real.verify(&KEY, 0).is_ok(), ok);
    real.caveats.pop();
    assert!(real.verify(&KEY, 0).is_err());
});
