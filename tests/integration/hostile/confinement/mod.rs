//! Confinement: a peer with the key writes only where it may (beneath the server's root or
//! export, beneath the client's destination and under the names it asked for), never
//! through a link, never over the user's files, FIFOs or directories, and never changes a
//! mode, time or file outside. `get`: a malicious server against `zcp get`; `serve`: a
//! malicious client against `zcp serve`; `exports`: a key holder reaching beyond its export.

mod delete;
mod exports;
mod get;
mod serve;
