//! The table of connections still in their handshake: who is admitted, whom a newcomer
//! evicts, and when each one's time is up. A state machine with the clock passed in; no I/O.
//!
//! A newcomer is never refused. When its source already holds its share
//! ([`Limits::per_source`]) it evicts that source's least advanced connection; when the table
//! is full it evicts the least advanced connection of the source holding the most. "Least
//! advanced" is fewest handshake frames received, then oldest: a legitimate client sends its
//! `Hello` as soon as it connects and its second frame one round trip later, so it is ahead of
//! a silent or byte-a-second connection from its first moment, and it is the youngest of its
//! stage. Whoever holds connections open (from one address or many, or the client's own
//! address) only ever pushes out its own. Under pressure (the table three quarters full) the
//! deadline shortens ([`Limits::pressed`]), so held connections turn over faster; it stays
//! short until the table has been below that mark for a whole handshake timeout, so every
//! connection that was pending under pressure meets the same deadline.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// A pending connection's number in the table (never reused).
pub type Id = u64;

/// Where a connection comes from, as the per-source cap counts it: an IPv4 address, or an
/// IPv6 /64 (one host usually holds a whole /64). An IPv4-mapped IPv6 address (a dual-stack
/// listener's IPv4 client) counts as its IPv4 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    /// An IPv4 address.
    V4([u8; 4]),
    /// The first 64 bits of an IPv6 address.
    V6([u8; 8]),
}

impl Source {
    /// The source of a peer at `ip`.
    pub fn of(ip: IpAddr) -> Source {
        match ip {
            IpAddr::V4(a) => Source::V4(a.octets()),
            IpAddr::V6(a) => match a.to_ipv4_mapped() {
                Some(v4) => Source::V4(v4.octets()),
                None => {
                    let o = a.octets();
                    Source::V6(o[..8].try_into().expect("8 of 16"))
                }
            },
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::V4(o) => write!(f, "{}", std::net::Ipv4Addr::from(*o)),
            Source::V6(p) => {
                let mut o = [0u8; 16];
                o[..8].copy_from_slice(p);
                write!(f, "{}/64", std::net::Ipv6Addr::from(o))
            }
        }
    }
}

/// The table's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most connections in their handshake at once.
    pub max: usize,
    /// Most of them from one [`Source`].
    pub per_source: usize,
    /// The time a connection has to finish its handshake.
    pub timeout: Duration,
}

impl Limits {
    /// The deadline while the table is three quarters full or more: a quarter of the
    /// timeout, but at least a second (a handshake takes two round trips), and never more
    /// than the timeout.
    pub fn pressed(&self) -> Duration {
        (self.timeout / 4)
            .max(Duration::from_secs(1))
            .min(self.timeout)
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    source: Source,
    started: Instant,
    /// Handshake frames received so far.
    stage: u8,
}

/// Why a connection left the table without finishing its handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shed {
    /// Made room for a newcomer.
    Evicted,
    /// Its deadline passed.
    Expired,
}

/// The pending connections.
#[derive(Debug)]
pub struct PendingTable {
    limits: Limits,
    entries: HashMap<Id, Entry>,
    /// Per source, its connections in eviction order: least advanced, then oldest.
    by_source: HashMap<Source, BTreeSet<(u8, Instant, Id)>>,
    /// Sources by how many connections they hold (the last holds the most).
    counts: BTreeSet<(usize, Source)>,
    /// Every connection by its start (the deadline counts from there).
    by_age: BTreeSet<(Instant, Id)>,
    next: Id,
    /// The shorter deadline is in force until then.
    pressed_until: Option<Instant>,
}

impl PendingTable {
    /// An empty table (a `max` or `per_source` of 0 counts as 1).
    pub fn new(limits: Limits) -> PendingTable {
        PendingTable {
            limits: Limits {
                max: limits.max.max(1),
                per_source: limits.per_source.clamp(1, limits.max.max(1)),
                ..limits
            },
            entries: HashMap::new(),
            by_source: HashMap::new(),
            counts: BTreeSet::new(),
            by_age: BTreeSet::new(),
            next: 0,
            pressed_until: None,
        }
    }

    /// How many connections are pending.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many connections `source` holds.
    pub fn held_by(&self, source: Source) -> usize {
        self.by_source.get(&source).map_or(0, BTreeSet::len)
    }

    /// The source holding the most connections, and how many.
    pub fn busiest(&self) -> Option<(Source, usize)> {
        self.counts.last().map(|&(n, s)| (s, n))
    }

    /// Takes in a newcomer from `source` at `now`: its id, and the connection it evicted to
    /// make room, if one had to go (already out of the table; the caller closes it).
    pub fn admit(&mut self, now: Instant, source: Source) -> (Id, Option<Id>) {
        let victim = if self.held_by(source) >= self.limits.per_source {
            self.least_advanced(source)
        } else if self.entries.len() >= self.limits.max {
            self.busiest().and_then(|(s, _)| self.least_advanced(s))
        } else {
            None
        };
        if let Some(v) = victim {
            self.remove(v);
        }
        let id = self.next;
        self.next += 1;
        let entry = Entry {
            source,
            started: now,
            stage: 0,
        };
        self.entries.insert(id, entry);
        self.by_age.insert((now, id));
        self.reindex(source, |set| {
            set.insert((0, now, id));
        });
        if self.entries.len() * 4 >= self.limits.max * 3 {
            self.pressed_until = Some(now + self.limits.timeout);
        }
        (id, victim)
    }

    /// Takes out the least advanced connection of all, the oldest of those (to free its
    /// descriptor); which, if any was pending. Not the busiest source's, as a newcomer evicts:
    /// out of descriptors, the sessions' own threads may take each freed descriptor before
    /// the next `accept`, so eviction can repeat until the table is bare, and a client that
    /// has begun its handshake must outlast every connection that has not.
    pub fn evict_one(&mut self) -> Option<Id> {
        let victim = self
            .by_source
            .values()
            .filter_map(BTreeSet::first)
            .min()
            .map(|&(_, _, id)| id)?;
        self.remove(victim);
        Some(victim)
    }

    /// Records that connection `id` has received `stage` handshake frames.
    pub fn progress(&mut self, id: Id, stage: u8) {
        let Some(e) = self.entries.get_mut(&id) else {
            return;
        };
        let (old, started, source) = (e.stage, e.started, e.source);
        e.stage = stage;
        if let Some(set) = self.by_source.get_mut(&source) {
            set.remove(&(old, started, id));
            set.insert((stage, started, id));
        }
    }

    /// Takes connection `id` out (its handshake ended, either way); whether it was in.
    pub fn remove(&mut self, id: Id) -> bool {
        let Some(e) = self.entries.remove(&id) else {
            return false;
        };
        self.by_age.remove(&(e.started, id));
        self.reindex(e.source, |set| {
            set.remove(&(e.stage, e.started, id));
        });
        true
    }

    /// The deadline in force at `now`: the handshake timeout, or the shorter one under
    /// pressure (and for a handshake timeout after it).
    pub fn limit(&self, now: Instant) -> Duration {
        if self.pressed_until.is_some_and(|t| now < t) {
            self.limits.pressed()
        } else {
            self.limits.timeout
        }
    }

    /// Takes out every connection whose deadline has passed at `now`, oldest first.
    pub fn expire(&mut self, now: Instant) -> Vec<Id> {
        let limit = self.limit(now);
        let mut gone = Vec::new();
        while let Some(&(started, id)) = self.by_age.first() {
            if now.saturating_duration_since(started) < limit {
                break;
            }
            self.remove(id);
            gone.push(id);
        }
        gone
    }

    /// When the next deadline falls, if anything is pending (under the limit in force at
    /// `now`).
    pub fn next_deadline(&self, now: Instant) -> Option<Instant> {
        let limit = self.limit(now);
        self.by_age.first().map(|&(started, _)| started + limit)
    }

    /// The least advanced (then oldest) connection of `source`.
    fn least_advanced(&self, source: Source) -> Option<Id> {
        self.by_source.get(&source)?.first().map(|&(_, _, id)| id)
    }

    /// Changes `source`'s set, keeping `counts` in step and dropping an emptied set.
    fn reindex(&mut self, source: Source, change: impl FnOnce(&mut BTreeSet<(u8, Instant, Id)>)) {
        let set = self.by_source.entry(source).or_default();
        let before = set.len();
        change(set);
        let after = set.len();
        if after == 0 {
            self.by_source.remove(&source);
        }
        if before != after {
            self.counts.remove(&(before, source));
            if after > 0 {
                self.counts.insert((after, source));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn v4(last: u8) -> Source {
        Source::of(IpAddr::V4(Ipv4Addr::new(127, 0, 0, last)))
    }

    fn table(max: usize, per_source: usize) -> (PendingTable, Instant) {
        let t = PendingTable::new(Limits {
            max,
            per_source,
            timeout: Duration::from_secs(10),
        });
        (t, Instant::now())
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn sources_are_ipv4_addresses_and_ipv6_64s() {
        let a: Ipv6Addr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: Ipv6Addr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        let c: Ipv6Addr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(Source::of(a.into()), Source::of(b.into()));
        assert_ne!(Source::of(a.into()), Source::of(c.into()));
        assert_eq!(Source::of(a.into()).to_string(), "2001:db8:1:2::/64");
        let mapped: Ipv6Addr = "::ffff:127.0.0.5".parse().unwrap();
        assert_eq!(Source::of(mapped.into()), v4(5));
        assert_eq!(v4(5).to_string(), "127.0.0.5");
        assert_ne!(v4(5), v4(6));
    }

    #[test]
    fn a_full_table_evicts_for_the_newcomer_and_never_refuses() {
        let (mut t, t0) = table(4, 4);
        let held: Vec<Id> = (0..4).map(|i| t.admit(t0 + i * MS, v4(9)).0).collect();
        // Two of them got further (sent a byte each: one frame complete counts, bytes not).
        t.progress(held[0], 1);
        t.progress(held[1], 1);
        let (id, gone) = t.admit(t0 + 10 * MS, v4(1));
        assert_eq!(gone, Some(held[2]), "the oldest of the least advanced goes");
        assert_eq!(t.len(), 4);
        let (_, gone) = t.admit(t0 + 11 * MS, v4(1));
        assert_eq!(gone, Some(held[3]));
        // 127.0.0.9 and 127.0.0.1 hold two each: the busiest is either; the newcomer's own
        // connections count like anyone's.
        t.progress(id, 1);
        let (_, gone) = t.admit(t0 + 12 * MS, v4(2));
        assert!(gone.is_some());
        assert_eq!(t.len(), 4);
    }

    #[test]
    fn the_busiest_source_pays_for_a_full_table() {
        let (mut t, t0) = table(8, 8);
        let attacker: Vec<Id> = (0..6).map(|i| t.admit(t0 + i * MS, v4(9)).0).collect();
        let early = t.admit(t0 + 6 * MS, v4(1)).0;
        t.admit(t0 + 7 * MS, v4(2));
        // The client from .1 has been waiting longest of all but one: still, .9 pays.
        for i in 0..5 {
            let (_, gone) = t.admit(t0 + (8 + i) * MS, v4(3 + i as u8));
            assert_eq!(gone, Some(attacker[i as usize]));
        }
        assert_eq!(t.held_by(v4(1)), 1);
        assert!(t.remove(early));
        assert!(!t.remove(early));
    }

    #[test]
    fn a_source_at_its_cap_evicts_its_own_least_advanced() {
        let (mut t, t0) = table(100, 3);
        let a: Vec<Id> = (0..3).map(|i| t.admit(t0 + i * MS, v4(9)).0).collect();
        t.progress(a[0], 1);
        let other = t.admit(t0, v4(1)).0;
        let (b, gone) = t.admit(t0 + 5 * MS, v4(9));
        assert_eq!(gone, Some(a[1]), "not a[0], which got further");
        assert_eq!(t.held_by(v4(9)), 3);
        assert_eq!(t.held_by(v4(1)), 1);
        // The attacker reconnecting does not push out the client sharing no address with it,
        // nor (at the same address) one that got further.
        let (_, gone) = t.admit(t0 + 6 * MS, v4(9));
        assert_eq!(gone, Some(a[2]));
        let (_, gone) = t.admit(t0 + 7 * MS, v4(9));
        assert_eq!(gone, Some(b));
        assert!(t.remove(other));
        assert!(t.remove(a[0]));
    }

    #[test]
    fn a_legitimate_client_sharing_the_attackers_address_gets_through() {
        // Every attacker connection is silent or a byte a second (stage 0); the client's
        // Hello arrives at once (stage 1). The attacker reconnects as fast as it can.
        let (mut t, t0) = table(16, 16);
        for i in 0..16 {
            t.admit(t0 + i * MS, v4(1));
        }
        let (client, _) = t.admit(t0 + 20 * MS, v4(1));
        t.progress(client, 1);
        for i in 0..1000 {
            let (_, gone) = t.admit(t0 + (21 + i) * MS, v4(1));
            assert_ne!(gone, Some(client), "evicted after {i} reconnections");
        }
        assert!(t.remove(client));
    }

    #[test]
    fn out_of_descriptors_the_least_advanced_gives_one_up() {
        let (mut t, t0) = table(8, 8);
        assert_eq!(t.evict_one(), None);
        let mine = t.admit(t0, v4(1)).0;
        let theirs = t.admit(t0 + MS, v4(9)).0;
        let newest = t.admit(t0 + 2 * MS, v4(9)).0;
        t.progress(mine, 1);
        // The oldest of those that sent nothing goes first, then the next; the client that
        // began its handshake goes last, though it was the first to come.
        assert_eq!(t.evict_one(), Some(theirs));
        assert_eq!(t.evict_one(), Some(newest));
        assert_eq!(t.len(), 1);
        assert_eq!(t.evict_one(), Some(mine));
        assert!(t.is_empty());
    }

    #[test]
    fn deadlines_shorten_under_pressure() {
        let (mut t, t0) = table(8, 8);
        let first = t.admit(t0, v4(9)).0;
        assert_eq!(t.limit(t0), Duration::from_secs(10));
        assert_eq!(t.next_deadline(t0), Some(t0 + Duration::from_secs(10)));
        assert!(t.expire(t0 + Duration::from_secs(5)).is_empty());
        let t1 = t0 + Duration::from_secs(5);
        for i in 1..6 {
            t.admit(t1 + i * MS, v4(9));
        }
        // 6 of 8: three quarters full. The first one is past the shorter deadline.
        assert_eq!(t.limit(t1), Duration::from_millis(2500));
        assert_eq!(t.expire(t1 + 6 * MS), vec![first]);
        // Five left, below the mark, but the short deadline holds for all who were there.
        let gone = t.expire(t1 + Duration::from_millis(2503));
        assert_eq!(gone.len(), 3, "{gone:?}");
        assert_eq!(t.len(), 2);
        assert_eq!(
            t.next_deadline(t1 + Duration::from_millis(2503)),
            Some(t1 + 4 * MS + Duration::from_millis(2500))
        );
        assert_eq!(t.expire(t1 + Duration::from_millis(2506)).len(), 2);
        assert_eq!(t.next_deadline(t1), None);
        assert_eq!(t.busiest(), None);
        // A whole timeout after the last pressure, the full deadline again.
        let t2 = t1 + 5 * MS + Duration::from_secs(10);
        assert_eq!(t.limit(t2), Duration::from_secs(10));
        t.admit(t2, v4(1));
        assert!(t.expire(t2 + Duration::from_secs(3)).is_empty());
    }

    #[test]
    fn the_pressed_deadline_is_a_quarter_but_at_least_a_second() {
        let l = |s| Limits {
            max: 1,
            per_source: 1,
            timeout: Duration::from_secs(s),
        };
        assert_eq!(l(10).pressed(), Duration::from_millis(2500));
        assert_eq!(l(2).pressed(), Duration::from_secs(1));
        assert_eq!(l(1).pressed(), Duration::from_secs(1));
        assert_eq!(l(120).pressed(), Duration::from_secs(30));
    }

    #[test]
    fn counts_stay_in_step() {
        let (mut t, t0) = table(50, 5);
        let mut ids = Vec::new();
        for i in 0..200u32 {
            let (id, gone) = t.admit(t0 + i * MS, v4((i % 7) as u8));
            ids.push(id);
            if let Some(g) = gone {
                ids.retain(|&x| x != g);
            }
            if i % 3 == 0 {
                t.progress(id, 1);
            }
            assert!(t.len() <= 50);
            for s in 0..7 {
                assert!(t.held_by(v4(s)) <= 5);
            }
        }
        assert_eq!(t.len(), ids.len());
        let sum: usize = t.counts.iter().map(|&(n, _)| n).sum();
        assert_eq!(sum, t.len());
        for id in ids {
            assert!(t.remove(id));
        }
        assert!(t.counts.is_empty() && t.by_source.is_empty() && t.by_age.is_empty());
    }
}
