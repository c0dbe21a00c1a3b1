//! The connections of an HTTP listener that are waiting for a request head, bounded the way
//! the server's handshakes are: kept in a [`PendingTable`], so a newcomer is never refused for
//! want of room but evicts one that got less far (no whole head yet, then the oldest) from the
//! source holding the most. An evicted connection is shut down, which ends its thread's read
//! at once. Used by the HTTP face and by `zcp serve --metrics`'s monitor.

use std::collections::HashMap;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Instant;

use zcp_session::{PendingId, PendingLimits, PendingSource, PendingTable};

/// The pending connections: the table decides who goes, the map holds a handle to shut each
/// down.
#[derive(Debug)]
pub struct Slots {
    table: PendingTable,
    conns: HashMap<PendingId, TcpStream>,
}

impl Slots {
    /// An empty set under `limits`.
    pub fn new(limits: PendingLimits) -> Slots {
        Slots {
            table: PendingTable::new(limits),
            conns: HashMap::new(),
        }
    }

    /// Takes in a connection, shutting down the ones it evicts and those past their time;
    /// `None` when its handle cannot be kept (it is then not admitted).
    pub fn admit(&mut self, stream: &TcpStream, peer: SocketAddr) -> Option<PendingId> {
        let now = Instant::now();
        let mut gone = self.table.expire(now);
        let (id, evicted) = self.table.admit(now, PendingSource::of(peer.ip()));
        gone.extend(evicted);
        for g in gone {
            if let Some(s) = self.conns.remove(&g) {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
        match stream.try_clone() {
            Ok(s) => {
                self.conns.insert(id, s);
                Some(id)
            }
            Err(_) => {
                self.table.remove(id);
                None
            }
        }
    }

    /// Records that `id` got its whole head (it is then the last to be evicted).
    pub fn headed(&mut self, id: PendingId) {
        self.table.progress(id, 1);
    }

    /// The deadline in force now for a connection's head.
    pub fn limit(&self) -> std::time::Duration {
        self.table.limit(Instant::now())
    }

    /// Takes `id` out.
    pub fn done(&mut self, id: PendingId) {
        self.table.remove(id);
        self.conns.remove(&id);
    }
}

/// Things at once per key (threads with `()` as the key, requests per source, PUTs per
/// identity), one taken by
/// [`Counts::take`] and given back when the [`Counted`] is dropped.
#[derive(Debug)]
pub struct Counts<K>(Arc<std::sync::Mutex<HashMap<K, usize>>>);

impl<K> Default for Counts<K> {
    fn default() -> Self {
        Counts(Arc::default())
    }
}

impl<K> Clone for Counts<K> {
    fn clone(&self) -> Self {
        Counts(self.0.clone())
    }
}

/// One taken from a [`Counts`].
#[derive(Debug)]
pub struct Counted<K: std::hash::Hash + Eq>(Arc<std::sync::Mutex<HashMap<K, usize>>>, K);

impl<K: std::hash::Hash + Eq + Clone> Counts<K> {
    /// Takes one for `key` if it holds fewer than `max`.
    pub fn take(&self, key: K, max: usize) -> Option<Counted<K>> {
        use zcp_engine::sync::Locked;
        let mut map = self.0.locked();
        let n = map.entry(key.clone()).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(Counted(self.0.clone(), key))
    }
}

impl<K: std::hash::Hash + Eq> Drop for Counted<K> {
    fn drop(&mut self) {
        use zcp_engine::sync::Locked;
        let mut map = self.0.locked();
        if let Some(n) = map.get_mut(&self.1) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.1);
            }
        }
    }
}
