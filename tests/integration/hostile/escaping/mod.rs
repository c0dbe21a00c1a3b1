//! Escaping: every text from the network is escaped before it reaches a terminal, a log or
//! a page. `terminal`: a malicious server's texts on `zcp get`'s output; `logs`: a malicious
//! client's texts and names in the server log and the transfer log; `monitor`: file names of
//! markup and escapes on the monitor's metrics, JSON and page.

mod logs;
pub(crate) mod monitor;
mod terminal;
