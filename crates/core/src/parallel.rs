//! Order-preserving work on every core, for large inputs: `tenantplane explain-sync`, reading
//! documents, a planner batch.
//!
//! [`map_in_order`] cuts the items into one contiguous run per core and puts the results back in
//! input order; [`try_for_each_in_order`] hands the results over one by one, in input order, while
//! the cores work a bounded distance ahead, so that a large input never has all its results in
//! memory at once. Either way, parallel work changes nothing a user can see but the time it takes.

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock, mpsc};
use std::thread;

/// Below this many items per thread, starting threads costs more than it saves.
const MIN_ITEMS_PER_THREAD: usize = 256;

/// The cores this process may use, read once: `available_parallelism` reads the cgroup's CPU
/// quota from files on Linux (tens of microseconds), too slow to ask on every call of a planner
/// that answers single objects in a fraction of a millisecond.
fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| thread::available_parallelism().map_or(1, NonZeroUsize::get))
}

/// `items.iter().map(f).collect()`, computed on up to every available core.
pub fn map_in_order<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let Some(run) = run_length(items.len()) else {
        return items.iter().map(f).collect();
    };
    in_threads(items.chunks(run), |part| part.iter().map(&f).collect())
}

/// Items a worker of [`try_for_each_in_order`] takes at a time.
const BATCH: usize = 32;

/// How many batches [`try_for_each_in_order`]'s workers may be ahead of the caller.
const BATCHES_AHEAD: usize = 64;

/// `items.iter().map(work).try_for_each(take)`: `work` runs on every core, `take` on the calling
/// thread, in input order, as the results come. The workers stay at most [`BATCHES_AHEAD`]
/// batches of [`BATCH`] items ahead of `take`, so memory holds a bounded number of results
/// whatever the number of items. The first error of `take` stops the work and is returned.
pub fn try_for_each_in_order<T: Sync, R: Send, E>(
    items: &[T],
    work: impl Fn(&T) -> R + Sync,
    mut take: impl FnMut(R) -> Result<(), E>,
) -> Result<(), E> {
    if run_length(items.len()).is_none() {
        return items.iter().try_for_each(|item| take(work(item)));
    }
    let batches = items.len().div_ceil(BATCH);
    let next = AtomicUsize::new(0);
    // How many batches `take` has had, or `usize::MAX` when the work stops early.
    let taken = (Mutex::new(0), Condvar::new());
    let stop = || {
        *taken.0.lock().unwrap_or_else(|e| e.into_inner()) = usize::MAX;
        taken.1.notify_all();
    };
    thread::scope(|scope| {
        let (results, received) = mpsc::channel::<(usize, Vec<R>)>();
        for _ in 0..cores().min(batches) {
            let results = results.clone();
            let (next, taken, work) = (&next, &taken, &work);
            scope.spawn(move || {
                // A worker that panics lets the others stop waiting; the scope re-raises it.
                let _on_panic = OnPanic(stop);
                loop {
                    let batch = next.fetch_add(1, Ordering::Relaxed);
                    if batch >= batches {
                        return;
                    }
                    let done = taken
                        .1
                        .wait_while(taken.0.lock().unwrap_or_else(|e| e.into_inner()), |t| {
                            *t != usize::MAX && batch >= *t + BATCHES_AHEAD
                        })
                        .unwrap_or_else(|e| e.into_inner());
                    if *done == usize::MAX {
                        return;
                    }
                    drop(done);
                    let start = batch * BATCH;
                    let part = &items[start..(start + BATCH).min(items.len())];
                    if results
                        .send((batch, part.iter().map(work).collect()))
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
        drop(results);
        let mut waiting = BTreeMap::new();
        let mut expected = 0;
        let outcome = received.iter().try_for_each(|(batch, part)| {
            waiting.insert(batch, part);
            while let Some(part) = waiting.remove(&expected) {
                part.into_iter().try_for_each(&mut take)?;
                expected += 1;
                *taken.0.lock().unwrap_or_else(|e| e.into_inner()) = expected;
                taken.1.notify_all();
            }
            Ok(())
        });
        if outcome.is_err() {
            stop();
        }
        outcome
    })
}

/// Runs its function when dropped during a panic.
struct OnPanic<F: Fn()>(F);

impl<F: Fn()> Drop for OnPanic<F> {
    fn drop(&mut self) {
        if thread::panicking() {
            (self.0)();
        }
    }
}

/// How many items each thread takes, or `None` when `len` items are not worth splitting.
fn run_length(len: usize) -> Option<usize> {
    let wanted = len / MIN_ITEMS_PER_THREAD;
    let threads = if wanted < 2 { 1 } else { cores().min(wanted) };
    (threads > 1).then(|| len.div_ceil(threads))
}

/// `work` on each part in a thread of its own; the results in the order of the parts.
fn in_threads<P: Send, R: Send>(
    parts: impl Iterator<Item = P>,
    work: impl Fn(P) -> Vec<R> + Sync,
) -> Vec<R> {
    let work = &work;
    thread::scope(|scope| {
        let workers: Vec<_> = parts.map(|part| scope.spawn(move || work(part))).collect();
        let mut out = Vec::new();
        for worker in workers {
            match worker.join() {
                Ok(part) => out.extend(part),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_keep_the_input_order() {
        let items: Vec<usize> = (0..10_001).collect();
        let out = map_in_order(&items, |i| i * 2);
        assert_eq!(out, items.iter().map(|i| i * 2).collect::<Vec<_>>());
        assert_eq!(map_in_order(&items[..3], |i| *i), vec![0, 1, 2]);
        assert!(map_in_order(&[] as &[u8], |b| *b).is_empty());
    }

    #[test]
    fn results_are_taken_in_input_order_and_an_error_stops_the_work() {
        let items: Vec<usize> = (0..10_001).collect();
        let mut taken = Vec::new();
        let all: Result<(), ()> = try_for_each_in_order(
            &items,
            |i| i * 2,
            |r| {
                taken.push(r);
                Ok(())
            },
        );
        assert_eq!(all, Ok(()));
        assert_eq!(taken, items.iter().map(|i| i * 2).collect::<Vec<_>>());

        let mut taken = 0;
        let stopped = try_for_each_in_order(
            &items,
            |i| *i,
            |r| {
                taken += 1;
                if r == 5_000 { Err(r) } else { Ok(()) }
            },
        );
        assert_eq!(stopped, Err(5_000));
        assert_eq!(taken, 5_001);
    }
}
