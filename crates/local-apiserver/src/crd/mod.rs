//! Layer 3, CRD validation: a CustomResourceDefinition checked as apiextensions-apiserver checks
//! it on create and update ([`validation`]), structural schemas included ([`structural`]), its
//! rules compiled and costed with the CEL layer. Uses storage (errors) and CEL.

pub mod field;
pub mod structural;
pub mod validation;
