//! Order-preserving work on every core, for large inputs: `tenantplane explain-sync`, reading
//! documents, a planner batch.
//!
//! The items are cut into one contiguous run per core and the results put back in input order,
//! so that parallel work changes nothing a user can see but the time it takes.

use std::num::NonZeroUsize;
use std::sync::OnceLock;
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
}
