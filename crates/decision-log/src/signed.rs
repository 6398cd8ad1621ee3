//! Signed checkpoints: the chain head (sequence, hash, time) signed with an Ed25519 key, so
//! that history cannot be cut short or rewritten by whoever can write the database.
//!
//! The chain alone proves internal consistency: someone able to write the database can remove
//! its last links and move `chain_head`, or rewrite any link and recompute every hash after it,
//! and the chain still verifies. A [`SignedCheckpoint`] published outside the database (the
//! syncer puts them in a ConfigMap of the host cluster, an Event and its span) pins the whole
//! prefix up to its sequence, since each link hash covers every link before it (Certificate
//! Transparency's signed tree heads and Sigstore Rekor's checkpoints do the same for their
//! logs). [`Verifier::with_checkpoints`](crate::Verifier::with_checkpoints) checks a chain
//! against them.
//!
//! Signed text (`tenantplane.decision-log.checkpoint.v1`), one field a line, each ending in
//! `\n`: the domain, the origin (which log), the sequence, the link hash, the time (RFC 3339).
//! Keys are PKCS#8 (private) and SPKI (public) PEM files, or the raw 32 bytes; a key is named
//! by its key id, the first 8 bytes of the SHA-256 of its 32 public bytes, in hex.

use std::io::BufRead;

use ed25519_dalek::pkcs8::spki::der::pem::LineEnding;
use ed25519_dalek::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey};
use ed25519_dalek::{Signature, Signer};
pub use ed25519_dalek::{SigningKey, VerifyingKey};
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::Error;
use crate::chain::Head;

/// Domain separation of the signed text.
const DOMAIN: &str = "tenantplane.decision-log.checkpoint.v1";

/// A chain head signed by a checkpoint key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SignedCheckpoint {
    /// Which log: the name the syncer signs under (`--checkpoint-origin`).
    pub origin: String,
    /// The last link it covers.
    pub sequence: u64,
    /// That link's hash.
    pub hash: String,
    /// When it was signed.
    pub time: Timestamp,
    /// The signing key's id ([`key_id`]).
    pub key_id: String,
    /// The Ed25519 signature of the signed text, in hex.
    pub signature: String,
}

impl SignedCheckpoint {
    /// Signs `head` of the log `origin` as of `time`.
    pub fn sign(key: &SigningKey, origin: &str, head: &Head, time: Timestamp) -> SignedCheckpoint {
        let text = signed_text(origin, head.sequence, &head.hash, time);
        SignedCheckpoint {
            origin: origin.to_string(),
            sequence: head.sequence,
            hash: head.hash.clone(),
            time,
            key_id: key_id(&key.verifying_key()),
            signature: hex::encode(key.sign(text.as_bytes()).to_bytes()),
        }
    }

    /// The head it covers.
    pub fn head(&self) -> Head {
        Head {
            sequence: self.sequence,
            hash: self.hash.clone(),
        }
    }

    /// Checks the signature with the key of the same id among `keys`.
    pub fn check_signature(&self, keys: &[VerifyingKey]) -> Result<(), SignatureProblem> {
        let Some(key) = keys.iter().find(|k| key_id(k) == self.key_id) else {
            return Err(SignatureProblem::UnknownKey {
                key_id: self.key_id.clone(),
                known: keys.iter().map(key_id).collect(),
            });
        };
        let signature = hex::decode(&self.signature)
            .ok()
            .and_then(|b| Signature::from_slice(&b).ok())
            .ok_or(SignatureProblem::Invalid)?;
        let text = signed_text(&self.origin, self.sequence, &self.hash, self.time);
        key.verify_strict(text.as_bytes(), &signature)
            .map_err(|_| SignatureProblem::Invalid)
    }

    /// One line of text: what the syncer's Event and log line say.
    pub fn summary(&self) -> String {
        format!(
            "checkpoint of {} at link {} ({}), signed {} by key {}",
            self.origin, self.sequence, self.hash, self.time, self.key_id
        )
    }
}

/// Signed checkpoints to verify a chain against, with the public keys that check them.
#[derive(Clone, Debug, Default)]
pub struct Published {
    /// The checkpoints, in any order.
    pub checkpoints: Vec<SignedCheckpoint>,
    /// The public keys (several while a key is rotated).
    pub keys: Vec<VerifyingKey>,
}

/// Why a checkpoint's signature does not hold.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum SignatureProblem {
    /// Signed by a key that is not among those given.
    UnknownKey {
        /// The key id the checkpoint names.
        key_id: String,
        /// The ids of the keys given.
        known: Vec<String>,
    },
    /// The signature does not match the checkpoint: it was edited or forged.
    Invalid,
}

fn signed_text(origin: &str, sequence: u64, hash: &str, time: Timestamp) -> String {
    format!("{DOMAIN}\n{origin}\n{sequence}\n{hash}\n{time}\n")
}

/// A key's id: the first 8 bytes of the SHA-256 of its 32 public bytes, in hex.
pub fn key_id(key: &VerifyingKey) -> String {
    hex::encode(&Sha256::digest(key.as_bytes())[..8])
}

/// Reads a signing key: a PKCS#8 PEM file (`-----BEGIN PRIVATE KEY-----`) or the raw 32 bytes.
pub fn signing_key(bytes: &[u8], source: &str) -> Result<SigningKey, Error> {
    if let Ok(raw) = <[u8; 32]>::try_from(bytes) {
        return Ok(SigningKey::from_bytes(&raw));
    }
    let text = std::str::from_utf8(bytes)
        .map_err(|_| key_error(source, "neither PEM nor 32 raw bytes"))?;
    SigningKey::from_pkcs8_pem(text.trim()).map_err(|e| {
        key_error(
            source,
            &format!("not an Ed25519 private key in PKCS#8 PEM ({e})"),
        )
    })
}

/// Reads a public key: an SPKI PEM file (`-----BEGIN PUBLIC KEY-----`) or the raw 32 bytes.
pub fn verifying_key(bytes: &[u8], source: &str) -> Result<VerifyingKey, Error> {
    if let Ok(raw) = <[u8; 32]>::try_from(bytes) {
        return VerifyingKey::from_bytes(&raw)
            .map_err(|e| key_error(source, &format!("not an Ed25519 public key ({e})")));
    }
    let text = std::str::from_utf8(bytes)
        .map_err(|_| key_error(source, "neither PEM nor 32 raw bytes"))?;
    VerifyingKey::from_public_key_pem(text.trim()).map_err(|e| {
        key_error(
            source,
            &format!("not an Ed25519 public key in SPKI PEM ({e})"),
        )
    })
}

fn key_error(source: &str, problem: &str) -> Error {
    Error::Key(format!("{source}: {problem}"))
}

/// A new key pair from the OS's randomness: the private key as PKCS#8 PEM and the public key
/// as SPKI PEM.
pub fn generate_key() -> Result<(String, String), Error> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| Error::Key(format!("no OS randomness: {e}")))?;
    let key = SigningKey::from_bytes(&seed);
    let private = key
        .to_pkcs8_pem(LineEnding::LF)
        .map_err(|e| Error::Key(e.to_string()))?;
    let public = key
        .verifying_key()
        .to_public_key_pem(LineEnding::LF)
        .map_err(|e| Error::Key(e.to_string()))?;
    Ok((private.to_string(), public))
}

/// The public key of a signing key, as SPKI PEM.
pub fn public_pem(key: &SigningKey) -> Result<String, Error> {
    key.verifying_key()
        .to_public_key_pem(LineEnding::LF)
        .map_err(|e| Error::Key(e.to_string()))
}

/// Reads checkpoints from JSON Lines, one [`SignedCheckpoint`] a line (blank lines skipped).
pub fn read_jsonl(reader: impl BufRead) -> Result<Vec<SignedCheckpoint>, Error> {
    let mut out = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        out.push(serde_json::from_str(&line).map_err(|e| Error::Export {
            line: i + 1,
            detail: format!("not a signed checkpoint: {e}"),
        })?);
    }
    Ok(out)
}

/// Writes checkpoints as JSON Lines, one a line.
pub fn to_jsonl(checkpoints: &[SignedCheckpoint]) -> Result<String, Error> {
    let mut out = String::new();
    for c in checkpoints {
        out.push_str(&serde_json::to_string(c)?);
        out.push('\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_verifies_with_its_key_only_and_unedited() {
        let (private, public) = generate_key().unwrap();
        let key = signing_key(private.as_bytes(), "k").unwrap();
        let public = verifying_key(public.as_bytes(), "p").unwrap();
        let head = Head {
            sequence: 7,
            hash: "ab".repeat(32),
        };
        let c = SignedCheckpoint::sign(&key, "log", &head, Timestamp::UNIX_EPOCH);
        assert_eq!(c.check_signature(&[public]), Ok(()));
        let edited = SignedCheckpoint {
            sequence: 8,
            ..c.clone()
        };
        assert_eq!(
            edited.check_signature(&[public]),
            Err(SignatureProblem::Invalid)
        );
        let (_, other) = generate_key().unwrap();
        let other = verifying_key(other.as_bytes(), "o").unwrap();
        assert!(matches!(
            c.check_signature(&[other]),
            Err(SignatureProblem::UnknownKey { .. })
        ));
        // Raw 32-byte keys are read too.
        let raw = signing_key(&key.to_bytes(), "raw").unwrap();
        assert_eq!(raw.verifying_key(), public);
        assert!(
            signing_key(b"not a key", "bad")
                .unwrap_err()
                .to_string()
                .contains("bad:")
        );
    }
}
