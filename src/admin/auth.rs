//! Who may read the admin listener: HTTP basic authentication against the
//! bcrypt hashes of `admin.web_config_file`, and the headers it adds to
//! every answer. `/healthz` and `/readyz` stay open, for probes.
//!
//! bcrypt is slow on purpose (tens of milliseconds at cost 10), so a
//! verified user, password and hash are remembered, as exporter-toolkit
//! does: a scrape every 15 s costs one HMAC, not one bcrypt. The cache
//! holds an HMAC-SHA-256 of the three under a key drawn at start-up, never
//! a password, and only successes: a guess always pays a bcrypt. The
//! hashes run off the runtime's threads, at most [`CONCURRENT_HASHES`] at
//! a time, so a visitor guessing passwords takes those threads' time and
//! nothing from the proxy. An unknown user is checked against a hash as
//! costly as a real one, so the time of an answer does not tell which
//! users exist; bcrypt compares in constant time.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use tokio::sync::Semaphore;

use arc_swap::ArcSwap;

use crate::in_force::InForce;

/// bcrypt hashes computed at once, at most.
pub const CONCURRENT_HASHES: usize = 2;
/// Verified credentials remembered, at most; the cache starts again when
/// full (a handful of scrapers and operators fill a few entries).
const CACHE_MAX: usize = 1024;
/// Checked when the user is unknown: a bcrypt hash at cost 10, the cost
/// `htpasswd -B` uses, of no password anyone sends.
const DECOY: &str = "$2y$10$lr0pLXDH0nFmM6nDuV3LgewxMtUlL1fD9q4T0C0j2bAzQzIRQyzNy";

/// Paths open to anyone: the probes.
const OPEN: [&str; 2] = ["/healthz", "/readyz"];

/// The verifier of the admin listener's credentials.
pub struct Verifier {
    key: ring::hmac::Key,
    verified: Mutex<HashSet<[u8; 32]>>,
    hashing: Semaphore,
}

impl Default for Verifier {
    fn default() -> Self {
        let rng = ring::rand::SystemRandom::new();
        // The system's random source failing at start-up leaves a fixed
        // key: the cache still holds no password, only digests.
        let key = ring::hmac::Key::generate(ring::hmac::HMAC_SHA256, &rng)
            .unwrap_or_else(|_| ring::hmac::Key::new(ring::hmac::HMAC_SHA256, b"tokenmeter"));
        Self {
            key,
            verified: Mutex::new(HashSet::new()),
            hashing: Semaphore::new(CONCURRENT_HASHES),
        }
    }
}

impl Verifier {
    /// Whether the `Authorization` header names a user of `users` with
    /// the right password.
    pub async fn check(
        &self,
        users: &BTreeMap<String, String>,
        authorization: Option<&HeaderValue>,
    ) -> bool {
        let Some((user, password)) = authorization.and_then(basic) else {
            return false;
        };
        let hash = users.get(&user).cloned();
        let digest = hash.as_ref().map(|hash| {
            let mut ctx = ring::hmac::Context::with_key(&self.key);
            for part in [user.as_bytes(), hash.as_bytes(), password.as_bytes()] {
                ctx.update(&(part.len() as u64).to_be_bytes());
                ctx.update(part);
            }
            let mut out = [0; 32];
            out.copy_from_slice(ctx.sign().as_ref());
            out
        });
        if let Some(digest) = digest
            && self.remembered(&digest)
        {
            return true;
        }
        let Ok(_permit) = self.hashing.acquire().await else {
            return false;
        };
        let known = hash.is_some();
        let hash = hash.unwrap_or_else(|| DECOY.to_owned());
        let ok = tokio::task::spawn_blocking(move || bcrypt::verify(password, &hash))
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or(false)
            && known;
        if ok && let Some(digest) = digest {
            self.remember(digest);
        }
        ok
    }

    fn remembered(&self, digest: &[u8; 32]) -> bool {
        self.verified
            .lock()
            .map(|set| set.contains(digest))
            .unwrap_or(false)
    }

    fn remember(&self, digest: [u8; 32]) {
        if let Ok(mut set) = self.verified.lock() {
            if set.len() >= CACHE_MAX {
                set.clear();
            }
            set.insert(digest);
        }
    }
}

/// The user and password of a `Basic` authorization.
fn basic(value: &HeaderValue) -> Option<(String, String)> {
    let text = value.to_str().ok()?;
    let (scheme, encoded) = text.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (user, password) = decoded.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

/// What the guard of the admin routes reads: the web config in force and
/// the verifier of its credentials.
pub struct Guard {
    pub in_force: Arc<ArcSwap<InForce>>,
    pub verifier: Verifier,
}

/// The layer of every admin route: the web config's headers on every
/// answer, and its users' credentials asked for on all but the probes.
pub async fn guard(State(state): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    let in_force = state.in_force.load_full();
    let Some(web) = in_force.config().admin.web.as_ref() else {
        return next.run(request).await;
    };
    let open = OPEN.contains(&request.uri().path());
    let allowed = open
        || !web.requires_auth()
        || state
            .verifier
            .check(&web.users, request.headers().get(header::AUTHORIZATION))
            .await;
    let mut response = if allowed {
        next.run(request).await
    } else {
        (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Basic realm=\"tokenmeter\"")],
            "401 Unauthorized\n",
        )
            .into_response()
    };
    for (name, value) in &web.headers {
        response.headers_mut().insert(name.clone(), value.clone());
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn users() -> BTreeMap<String, String> {
        // bcrypt cost 4: the tests need not be slow.
        let hash = bcrypt::hash_with_result("s3cret", 4)
            .unwrap()
            .format_for_version(bcrypt::Version::TwoY);
        BTreeMap::from([("prometheus".to_owned(), hash)])
    }

    fn auth(user: &str, password: &str) -> HeaderValue {
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        HeaderValue::from_str(&format!("Basic {token}")).unwrap()
    }

    #[tokio::test]
    async fn the_right_password_passes_and_is_remembered() {
        let v = Verifier::default();
        let users = users();
        assert!(v.check(&users, Some(&auth("prometheus", "s3cret"))).await);
        assert_eq!(v.verified.lock().unwrap().len(), 1);
        assert!(v.check(&users, Some(&auth("prometheus", "s3cret"))).await);
        assert_eq!(v.verified.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn anything_else_fails_and_is_not_remembered() {
        let v = Verifier::default();
        let users = users();
        for header in [
            None,
            Some(auth("prometheus", "wrong")),
            Some(auth("nobody", "s3cret")),
            Some(auth("prometheus", "")),
            Some(HeaderValue::from_static("Bearer abc")),
            Some(HeaderValue::from_static("Basic !!!")),
            Some(HeaderValue::from_static("Basic")),
        ] {
            assert!(!v.check(&users, header.as_ref()).await, "{header:?}");
        }
        assert!(v.verified.lock().unwrap().is_empty());
    }

    #[test]
    fn the_decoy_is_a_bcrypt_hash_at_cost_10() {
        assert!(DECOY.starts_with("$2y$10$") && DECOY.len() == 60);
        assert_eq!(bcrypt::verify("", DECOY).ok(), Some(false));
    }
}
