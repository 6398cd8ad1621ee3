//! Layer 2, CEL: type checking ([`check`]) and static cost estimation ([`cost`]) of CEL
//! expressions over OpenAPI schemas, as kube-apiserver compiles the rules of CRDs. Uses no other
//! layer.

pub mod check;
pub mod cost;
