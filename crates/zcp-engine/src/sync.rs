//! Locks that outlive a panic. A thread that panics while holding a lock poisons it; zcp's
//! shared state stays consistent at every unlock (each update is whole), so the next holder
//! takes the data as it is rather than spreading the panic to every thread of a session.

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
}
