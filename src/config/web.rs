//! The admin listener's web configuration file (`admin.web_config_file`):
//! the Prometheus exporter-toolkit's format, which node_exporter and every
//! official exporter read with `--web.config.file`, so that the
//! ServiceMonitors and scrape configs written for them work unchanged.
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: tls.crt
//!   key_file: tls.key
//!   client_ca_file: ca.crt            # optional: mutual TLS
//!   client_auth_type: RequireAndVerifyClientCert
//!   min_version: TLS12
//! http_server_config:
//!   headers:
//!     Strict-Transport-Security: max-age=31536000
//! basic_auth_users:
//!   prometheus: $2y$10$...            # bcrypt
//! ```
//!
//! Relative paths are against the file's directory, as the exporters
//! read them. An unknown key, a hash that is not bcrypt, a header the
//! format does not allow, or a certificate that cannot be read is an error
//! with the file, line, column and key. The file and its certificates are
//! read again by each reload.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use http::{HeaderName, HeaderValue};
use serde::Deserialize;
use serde_saphyr::Spanned;

use super::error::ConfigError;
use super::server_tls::{RawServerTls, ServerTls};

/// The headers the exporter-toolkit lets a web config set.
const ALLOWED_HEADERS: [&str; 5] = [
    "Strict-Transport-Security",
    "X-Content-Type-Options",
    "X-Frame-Options",
    "X-XSS-Protection",
    "Content-Security-Policy",
];

/// The admin listener's TLS, users and headers, read. Not shown by
/// `/config` (which shows the file's path): the hashes stay on disk.
#[derive(Clone, PartialEq)]
pub struct WebConfig {
    /// The file, as resolved.
    pub file: PathBuf,
    /// TLS on the admin listener, when the file configures it.
    pub tls: Option<ServerTls>,
    /// Users allowed in, with their bcrypt hashes.
    pub users: BTreeMap<String, String>,
    /// Headers added to every admin response.
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

/// Names the users, never their hashes.
impl std::fmt::Debug for WebConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebConfig")
            .field("file", &self.file)
            .field("tls", &self.tls)
            .field("users", &self.users.keys().collect::<Vec<_>>())
            .field("headers", &self.headers)
            .finish()
    }
}

impl WebConfig {
    /// Whether a request must authenticate.
    pub fn requires_auth(&self) -> bool {
        !self.users.is_empty()
    }

    /// The files a reload watches: this one and its certificates.
    pub fn files(&self) -> Vec<PathBuf> {
        let mut files = vec![self.file.clone()];
        if let Some(tls) = &self.tls {
            files.extend(tls.files().map(Path::to_path_buf));
        }
        files
    }

    /// Reads the file `admin.web_config_file` names (`path`, written at
    /// `pos` of the config file `config_file`, relative to `base`): the web
    /// config, or every problem found, each with its file, line, column and
    /// key (an unreadable file is reported at the key that names it).
    pub(crate) fn read(
        path: &str,
        pos: Option<super::located::Pos>,
        config_file: &str,
        base: &Path,
    ) -> Result<Self, Vec<ConfigError>> {
        let file = base.join(path.trim());
        if let Err(e) = std::fs::metadata(&file) {
            return Err(vec![ConfigError {
                file: config_file.to_owned(),
                line: pos.map(|p| p.line),
                column: pos.map(|p| p.column),
                key: "admin.web_config_file".to_owned(),
                message: format!("cannot read `{}`: {e}", file.display()),
            }]);
        }
        Self::load(&file)
    }

    /// Reads `file`; every problem found is returned, each with its line,
    /// column and key.
    pub fn load(file: &Path) -> Result<Self, Vec<ConfigError>> {
        let shown = file.display().to_string();
        let error = |pos: Option<&serde_saphyr::Location>, key: &str, message: String| {
            let (line, column) = pos
                .filter(|l| l.line() > 0)
                .map_or((None, None), |l| (Some(l.line()), Some(l.column())));
            ConfigError {
                file: shown.clone(),
                line,
                column,
                key: key.to_owned(),
                message,
            }
        };
        let text = std::fs::read_to_string(file)
            .map_err(|e| vec![error(None, "", format!("cannot read the web config: {e}"))])?;
        let raw: RawWebConfig = if text.trim().is_empty() {
            RawWebConfig::default()
        } else {
            serde_saphyr::from_str(&text)
                .map_err(|e| vec![error(e.location().as_ref(), "", e.to_string())])?
        };
        let base = file.parent().unwrap_or(Path::new("."));
        let mut errors = Vec::new();

        let tls = raw.tls_server_config.and_then(|t| {
            RawServerTls::from(t.value)
                .read(Some(&t.referenced), base)
                .map_err(|problems| {
                    for (at, key, message) in problems {
                        errors.push(error(
                            at.as_ref(),
                            &format!("tls_server_config.{key}"),
                            message,
                        ));
                    }
                })
                .ok()
        });

        let mut headers = Vec::new();
        if let Some(http) = &raw.http_server_config {
            for (name, value) in &http.value.headers {
                let key = format!("http_server_config.headers.{name}");
                let Some(allowed) = ALLOWED_HEADERS
                    .iter()
                    .find(|a| a.eq_ignore_ascii_case(name))
                else {
                    errors.push(error(
                        Some(&value.referenced),
                        &key,
                        format!(
                            "header `{name}` cannot be set here; allowed: {}",
                            ALLOWED_HEADERS.join(", ")
                        ),
                    ));
                    continue;
                };
                match (
                    HeaderName::from_bytes(allowed.as_bytes()),
                    HeaderValue::from_str(&value.value),
                ) {
                    (Ok(name), Ok(v)) => headers.push((name, v)),
                    _ => errors.push(error(
                        Some(&value.referenced),
                        &key,
                        "not a valid header value".to_owned(),
                    )),
                }
            }
        }

        let mut users = BTreeMap::new();
        for (name, hash) in &raw.basic_auth_users {
            let key = format!("basic_auth_users.{name}");
            if name.is_empty() || name.contains(':') {
                errors.push(error(
                    Some(&hash.referenced),
                    &key,
                    "a user name is not empty and has no `:`".to_owned(),
                ));
            } else if let Err(m) = check_bcrypt(&hash.value) {
                errors.push(error(Some(&hash.referenced), &key, m));
            } else {
                users.insert(name.clone(), hash.value.clone());
            }
        }

        if errors.is_empty() {
            Ok(Self {
                file: file.to_path_buf(),
                tls,
                users,
                headers,
            })
        } else {
            Err(errors)
        }
    }
}

/// A bcrypt hash in the modular crypt format: `$2a$`, `$2b$` or `$2y$`, a
/// cost of 4 to 31, and 53 characters of salt and hash.
fn check_bcrypt(hash: &str) -> Result<(), String> {
    let fail = || {
        Err(
            "not a bcrypt hash (expected `$2y$`, `$2b$` or `$2a$`, a cost and 53 characters, as `htpasswd -nBC 10 USER` prints)"
                .to_owned(),
        )
    };
    let Some(rest) = ["$2a$", "$2b$", "$2y$"]
        .iter()
        .find_map(|p| hash.strip_prefix(p))
    else {
        return fail();
    };
    let Some((cost, tail)) = rest.split_once('$') else {
        return fail();
    };
    let cost_ok = cost.len() == 2 && cost.parse::<u32>().is_ok_and(|c| (4..=31).contains(&c));
    let tail_ok = tail.len() == 53
        && tail
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'/');
    if cost_ok && tail_ok { Ok(()) } else { fail() }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWebConfig {
    tls_server_config: Option<Spanned<StrictTls>>,
    http_server_config: Option<Spanned<RawHttp>>,
    #[serde(default)]
    basic_auth_users: BTreeMap<String, Spanned<String>>,
}

/// `tls_server_config`, whose unknown keys are refused here: the web
/// config is read on its own, without the config file's did-you-mean.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StrictTls {
    cert_file: Option<Spanned<String>>,
    key_file: Option<Spanned<String>>,
    client_ca_file: Option<Spanned<String>>,
    client_auth_type: Option<Spanned<String>>,
    min_version: Option<Spanned<String>>,
    max_version: Option<Spanned<String>>,
}

impl From<StrictTls> for RawServerTls {
    fn from(t: StrictTls) -> Self {
        Self {
            cert_file: t.cert_file,
            key_file: t.key_file,
            client_ca_file: t.client_ca_file,
            client_auth_type: t.client_auth_type,
            min_version: t.min_version,
            max_version: t.max_version,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHttp {
    /// Accepted for compatibility; the admin listener speaks HTTP/1.1 and
    /// HTTP/2 either way.
    #[allow(dead_code)]
    http2: Option<bool>,
    #[serde(default)]
    headers: BTreeMap<String, Spanned<String>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bcrypt_hashes_are_told_from_anything_else() {
        let good = "$2y$10$X0rOoyPsS9ITUvFvvBjOyuCs1Dv1Y0rMT2Y29z2S.lCnOsNUEj5dW";
        assert_eq!(check_bcrypt(good), Ok(()));
        assert_eq!(check_bcrypt(&good.replace("$2y$", "$2b$")), Ok(()));
        for bad in [
            "",
            "secret",
            "$2y$10$short",
            "$1$abcdefgh$abcdefghijklmnopqrstuv",
            "$2y$03$X0rOoyPsS9ITUvFvvBjOyuCs1Dv1Y0rMT2Y29z2S.lCnOsNUEj5dW",
            "$2y$10$X0rOoyPsS9ITUvFvvBjOyuCs1Dv1Y0rMT2Y29z2S.lCnOsNUEj5d!",
        ] {
            assert!(check_bcrypt(bad).is_err(), "{bad}");
        }
    }
}
