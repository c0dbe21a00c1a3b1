//! The idle clock: a session ends when nothing moves for its idle timeout, whatever a peer
//! with the key sends meanwhile. Chatter (notices, refused or repeated entries, `Progress`
//! that is not backed by work, MACs without data, plans) is not progress, and a role's own
//! waiting or re-doing is not a way to stop its clock for free. `serve`: a malicious client
//! holding a `zcp serve` session; `get`: a malicious server holding a `zcp get`.

mod get;
mod serve;
