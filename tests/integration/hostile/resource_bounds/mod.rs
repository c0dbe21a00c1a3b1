//! Resource bounds: what a peer with the key can make the other side hold is bounded by the
//! victim's own budget, whatever the peer claims or floods. `memory`: resident memory
//! (queued frames, engine buffers, bookkeeping); `tables`: chunk tables and offers per
//! session; `descriptors`: file descriptors and part files held; `logs`: the server log's
//! growth; `udp_memory`: the chunk buffers a UDP peer (and a pull's block size over TCP) can make either side hold.

mod descriptors;
mod logs;
mod memory;
mod tables;
mod udp_memory;
