//! Locks that outlive a panic. A thread that panics while holding a lock poisons it; zcp's
//! shared state stays consistent at every unlock (each update is whole), so the next holder
//! takes the data as it is rather than spreading the panic to every thread of a session.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// [`Mutex::lock`], taking the data of a poisoned lock as it is.
pub trait Locked<T> {
    /// Locks, ignoring poison.
    fn locked(&self) -> MutexGuard<'_, T>;
}

impl<T> Locked<T> for Mutex<T> {
    fn locked(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// [`Condvar`] waits that ignore poison, like [`Locked`].
pub trait Waits {
    /// [`Condvar::wait`].
    fn wait_on<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T>;
    /// [`Condvar::wait_timeout`]; the guard.
    fn wait_for<'a, T>(&self, guard: MutexGuard<'a, T>, timeout: Duration) -> MutexGuard<'a, T>;
    /// [`Condvar::wait_timeout_while`]; the guard.
    fn wait_while_for<'a, T>(
        &self,
        guard: MutexGuard<'a, T>,
        timeout: Duration,
        cond: impl FnMut(&mut T) -> bool,
    ) -> MutexGuard<'a, T>;
}

impl Waits for Condvar {
    fn wait_on<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.wait(guard).unwrap_or_else(PoisonError::into_inner)
    }

    fn wait_for<'a, T>(&self, guard: MutexGuard<'a, T>, timeout: Duration) -> MutexGuard<'a, T> {
        self.wait_timeout(guard, timeout)
            .unwrap_or_else(PoisonError::into_inner)
            .0
    }

    fn wait_while_for<'a, T>(
        &self,
        guard: MutexGuard<'a, T>,
        timeout: Duration,
        cond: impl FnMut(&mut T) -> bool,
    ) -> MutexGuard<'a, T> {
        self.wait_timeout_while(guard, timeout, cond)
            .unwrap_or_else(PoisonError::into_inner)
            .0
    }
}

/// A [`Condvar`] that counts its waiters, so that a notify with nobody waiting costs no system
/// call (std's makes one on every notify, and a receiver's lock is notified after every
/// input: tens of times per small file).
///
/// The contract is the usual one, kept strictly: a waiter checks its condition and waits
/// under the mutex, and whoever changes the condition does it under the same mutex before
/// notifying (holding it or not). The waiter counts itself while holding the mutex, so a
/// notifier that changed the condition after the waiter checked it sees the count.
#[derive(Debug, Default)]
pub struct Wakeup {
    cv: Condvar,
    waiting: AtomicUsize,
}

impl Wakeup {
    /// [`Condvar::wait`], ignoring poison.
    pub fn wait<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let g = self.cv.wait_on(guard);
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        g
    }

    /// [`Condvar::wait_timeout`], ignoring poison; the guard.
    pub fn wait_for<'a, T>(
        &self,
        guard: MutexGuard<'a, T>,
        timeout: Duration,
    ) -> MutexGuard<'a, T> {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let g = self.cv.wait_for(guard, timeout);
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        g
    }

    /// Wakes one waiter, if any waits.
    pub fn notify_one(&self) {
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.cv.notify_one();
        }
    }

    /// Wakes every waiter, if any waits.
    pub fn notify_all(&self) {
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.cv.notify_all();
        }
    }
}

/// Turns served in the order they were taken: work decided under one lock and carried out
/// after it is released (so the lock is never held across a slow send) still happens in the
/// order it was decided. Every ticket taken must be waited on, or later ones wait forever.
#[derive(Debug, Default)]
pub struct Turns {
    taken: AtomicU64,
    served: Mutex<u64>,
    next: Wakeup,
}

/// One's turn; it passes to the next ticket when dropped (a panic included).
#[derive(Debug)]
pub struct Turn<'a> {
    turns: &'a Turns,
}

impl Turns {
    /// A ticket, taken while holding the lock that orders the work.
    pub fn take(&self) -> u64 {
        self.taken.fetch_add(1, Ordering::SeqCst)
    }

    /// Waits until every earlier ticket's turn has passed.
    pub fn wait(&self, ticket: u64) -> Turn<'_> {
        let mut g = self.served.locked();
        while *g != ticket {
            g = self.next.wait(g);
        }
        Turn { turns: self }
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        *self.turns.served.locked() += 1;
        self.turns.next.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_poisoned_lock_still_gives_its_data() {
        let m = Arc::new(Mutex::new(5));
        let m2 = m.clone();
        let _ = std::thread::spawn(move || {
            let _g = m2.lock().unwrap();
            panic!("poison it");
        })
        .join();
        assert!(m.is_poisoned());
        *m.locked() += 1;
        assert_eq!(*m.locked(), 6);
        let cv = Condvar::new();
        let g = cv.wait_while_for(m.locked(), Duration::from_millis(1), |v| *v == 6);
        assert_eq!(*g, 6);
    }

    #[test]
    fn a_wakeup_reaches_a_waiter_and_costs_nothing_without_one() {
        // Nobody waits: notifying is a no-op, not an error.
        let w = Wakeup::default();
        w.notify_one();
        w.notify_all();
        // Ping-pong: each side waits for its turn under the mutex and notifies after changing
        // it. A notify lost because the waiter was not counted would leave a side waiting out
        // its whole timeout, and the rounds would take seconds instead of milliseconds.
        let shared = Arc::new((Mutex::new(0u32), Wakeup::default()));
        let rounds = 2000;
        let t = std::time::Instant::now();
        let peer = {
            let shared = shared.clone();
            std::thread::spawn(move || {
                let (m, w) = &*shared;
                for i in 0..rounds {
                    let mut g = m.locked();
                    while *g != 2 * i + 1 {
                        g = w.wait_for(g, Duration::from_secs(5));
                    }
                    *g += 1;
                    drop(g);
                    w.notify_all();
                }
            })
        };
        let (m, w) = &*shared;
        for i in 0..rounds {
            let mut g = m.locked();
            while *g != 2 * i {
                g = w.wait_for(g, Duration::from_secs(5));
            }
            *g += 1;
            drop(g);
            w.notify_one();
        }
        peer.join().unwrap();
        assert_eq!(*m.locked(), 2 * rounds);
        assert!(
            t.elapsed() < Duration::from_secs(4),
            "{rounds} rounds took {:?}: a wakeup was lost",
            t.elapsed()
        );
    }

    #[test]
    fn turns_are_served_in_the_order_taken_whoever_comes_first() {
        let turns = Arc::new(Turns::default());
        let order = Arc::new(Mutex::new(Vec::new()));
        let tickets: Vec<u64> = (0..8).map(|_| turns.take()).collect();
        // Started last ticket first, each waits for those before it.
        let threads: Vec<_> = tickets
            .into_iter()
            .rev()
            .map(|t| {
                let (turns, order) = (turns.clone(), order.clone());
                std::thread::spawn(move || {
                    let _turn = turns.wait(t);
                    order.locked().push(t);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*order.locked(), (0..8).collect::<Vec<u64>>());
        // A turn that panics still passes on.
        let t = turns.take();
        let t2 = turns.clone();
        let _ = std::thread::spawn(move || {
            let _turn = t2.wait(t);
            panic!("while holding the turn");
        })
        .join();
        let next = turns.take();
        drop(turns.wait(next));
    }
}
