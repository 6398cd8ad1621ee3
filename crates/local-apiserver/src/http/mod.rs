//! Layer 5, HTTP: the Kubernetes REST protocol over the layers below. Routing ([`router`]),
//! request parameters ([`params`]), watch streams ([`watch`]), discovery ([`discovery`]), OpenAPI v3
//! ([`openapi`]), protobuf request bodies ([`protobuf`]), the create-only reviews
//! ([`authentication`], [`reviews`]), the scale subresource ([`scale`]) and request recording
//! ([`requests`]). Uses every other layer.

pub mod authentication;
pub mod discovery;
pub mod openapi;
pub mod params;
pub mod protobuf;
pub mod requests;
pub mod reviews;
pub mod router;
pub mod scale;
pub mod watch;
