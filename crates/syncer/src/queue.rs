//! A deduplicating work queue: a key is queued at most once, and never processed by two workers
//! at the same time (a key pushed while in flight is queued again when its worker is done).

use std::collections::{HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::Notify;

#[derive(Debug)]
struct State<K> {
    queue: VecDeque<K>,
    queued: HashSet<K>,
    active: HashSet<K>,
    again: HashSet<K>,
}

/// The queue of one tenant's keys.
#[derive(Debug)]
pub struct WorkQueue<K> {
    state: Mutex<State<K>>,
    ready: Notify,
    /// Keys waiting, exported as a metric.
    depth: Gauge,
}

impl<K: Clone + Eq + Hash + Send + Sync + 'static> WorkQueue<K> {
    /// An empty queue.
    pub fn new() -> Arc<Self> {
        Self::with_depth_gauge(Gauge::default())
    }

    /// An empty queue that keeps `depth` set to the number of keys waiting.
    pub fn with_depth_gauge(depth: Gauge) -> Arc<Self> {
        depth.set(0);
        Arc::new(WorkQueue {
            depth,
            state: Mutex::new(State {
                queue: VecDeque::new(),
                queued: HashSet::new(),
                active: HashSet::new(),
                again: HashSet::new(),
            }),
            ready: Notify::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<K>> {
        self.state.lock().expect("queue lock")
    }

    /// Queues `key` unless it is already queued.
    pub fn push(&self, key: K) {
        let mut s = self.lock();
        if s.active.contains(&key) {
            s.again.insert(key);
        } else if s.queued.insert(key.clone()) {
            s.queue.push_back(key);
            self.depth.set(s.queue.len() as i64);
            drop(s);
            self.ready.notify_one();
        }
    }

    /// Queues `key` after `delay` (backoff).
    pub fn push_after(self: &Arc<Self>, key: K, delay: Duration) {
        let queue = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            if let Some(queue) = queue.upgrade() {
                queue.push(key);
            }
        });
    }

    /// Waits for keys and takes up to `max` of them; each must be handed back with [`done`].
    ///
    /// [`done`]: Self::done
    pub async fn pop_batch(&self, max: usize) -> Vec<K> {
        loop {
            {
                let mut s = self.lock();
                if !s.queue.is_empty() {
                    let n = max.min(s.queue.len());
                    let batch: Vec<K> = s.queue.drain(..n).collect();
                    for k in &batch {
                        s.queued.remove(k);
                        s.active.insert(k.clone());
                    }
                    self.depth.set(s.queue.len() as i64);
                    let more = !s.queue.is_empty();
                    drop(s);
                    if more {
                        self.ready.notify_one();
                    }
                    return batch;
                }
            }
            self.ready.notified().await;
        }
    }

    /// Marks `key` processed; queues it again if it was pushed meanwhile.
    pub fn done(&self, key: &K) {
        let again = {
            let mut s = self.lock();
            s.active.remove(key);
            s.again.remove(key)
        };
        if again {
            self.push(key.clone());
        }
    }

    /// Keys waiting (not counting those in flight).
    pub fn len(&self) -> usize {
        self.lock().queue.len()
    }

    /// Whether nothing is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn dedupes_and_requeues_keys_pushed_while_in_flight() {
        let q = WorkQueue::new();
        q.push("a");
        q.push("b");
        q.push("a");
        assert_eq!(q.len(), 2);
        let batch = q.pop_batch(10).await;
        assert_eq!(batch, vec!["a", "b"]);
        q.push("a");
        assert_eq!(q.len(), 0, "a is in flight");
        q.done(&"a");
        q.done(&"b");
        assert_eq!(q.pop_batch(10).await, vec!["a"]);
    }

    #[tokio::test]
    async fn the_depth_gauge_follows_the_keys_waiting() {
        let depth = Gauge::default();
        let q = WorkQueue::with_depth_gauge(depth.clone());
        q.push("a");
        q.push("b");
        q.push("a");
        assert_eq!(depth.get(), 2);
        q.pop_batch(1).await;
        assert_eq!(depth.get(), 1);
        q.pop_batch(10).await;
        assert_eq!(depth.get(), 0);
    }
}
