//! Conversions between the core's types and the wire messages, one module per direction.

pub mod from_proto;
pub mod to_proto;
