//! Layer 1, storage: what kube-apiserver's registry and etcd do with objects, whatever their
//! kind means. The resource table (built-ins, CRDs, APIServices), the object store (one
//! resourceVersion counter, watch history, optimistic concurrency, generation, finalizers,
//! namespace termination, garbage collection), names, selectors, patches, server-side apply
//! and `managedFields`, the stored forms of Events and Secrets, and the API errors every layer
//! answers with. What a write means beyond that (defaults, validation, admission) is decided
//! above and handed to the store as a [`store::WritePolicy`]. Uses no other layer.

pub mod aggregation;
pub mod apply;
pub mod error;
pub mod events;
pub mod names;
pub mod patch;
pub mod resources;
pub mod selectors;
pub mod store;
