//! One module per subcommand; each exposes `Args` (clap) and `run`.

pub mod audit;
pub mod compile_admission;
pub mod compile_isolation;
pub mod crds;
pub mod decisions;
pub mod explain_sync;
pub mod service;
pub mod up;
pub mod why;
