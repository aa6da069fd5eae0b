//! TLS for the listeners: a certificate chain and its key, and optionally
//! the authorities a client certificate is verified against, read from
//! PEM files into a rustls server configuration.
//!
//! The files are read when the configuration is loaded, so a missing or
//! unreadable file, a key that does not match, or a file that is not PEM
//! is a configuration error with its key, at start-up, in `check`, and on
//! a reload (which then keeps the running configuration). A reload reads
//! them again: a certificate replaced on disk (cert-manager rotates them)
//! is served to the connections that come after, with no restart.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::{Deserialize, Serialize};
use serde_saphyr::{Location, Spanned};

/// What both listeners offer in ALPN: they serve HTTP/2 and HTTP/1.1,
/// HTTP/2 preferred.
const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// Whether, and how, a client presents a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ClientAuth {
    /// No certificate is asked for.
    NoClientCert,
    /// A certificate is asked for; one given must verify.
    VerifyClientCertIfGiven,
    /// A certificate that verifies is required.
    RequireAndVerifyClientCert,
}

impl ClientAuth {
    /// The exporter-toolkit's name of each policy tokenmeter can apply.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "NoClientCert" => Ok(Self::NoClientCert),
            "VerifyClientCertIfGiven" => Ok(Self::VerifyClientCertIfGiven),
            "RequireAndVerifyClientCert" => Ok(Self::RequireAndVerifyClientCert),
            "RequestClientCert" | "RequireAnyClientCert" | "RequireClientCert" => Err(format!(
                "`{text}` accepts a client certificate without verifying it, which tokenmeter does not do: use `VerifyClientCertIfGiven` or `RequireAndVerifyClientCert` with a `client_ca_file`"
            )),
            other => Err(format!(
                "unknown client_auth_type `{other}`; expected NoClientCert, VerifyClientCertIfGiven or RequireAndVerifyClientCert"
            )),
        }
    }
}

/// The TLS versions a listener speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum TlsVersion {
    #[serde(rename = "TLS12")]
    Tls12,
    #[serde(rename = "TLS13")]
    Tls13,
}

impl TlsVersion {
    /// `TLS12` or `TLS13`; rustls speaks no older version.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "TLS12" => Ok(Self::Tls12),
            "TLS13" => Ok(Self::Tls13),
            "TLS10" | "TLS11" => Err(format!(
                "`{text}` is not offered: tokenmeter speaks TLS 1.2 and 1.3 only (use TLS12)"
            )),
            other => Err(format!(
                "unknown TLS version `{other}`; expected TLS12 or TLS13"
            )),
        }
    }
}

/// What a listener's TLS is made of, as the configuration names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTlsFiles {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub client_ca_file: Option<PathBuf>,
    pub client_auth: ClientAuth,
    pub min_version: TlsVersion,
    pub max_version: TlsVersion,
}

/// A listener's TLS, read: the files it came from and the rustls server
/// configuration they make.
#[derive(Clone, Serialize)]
pub struct ServerTls {
    #[serde(serialize_with = "super::show::path")]
    pub cert_file: PathBuf,
    #[serde(serialize_with = "super::show::path")]
    pub key_file: PathBuf,
    pub client_ca_file: Option<PathBuf>,
    #[serde(rename = "client_auth_type")]
    pub client_auth: ClientAuth,
    pub min_version: TlsVersion,
    pub max_version: TlsVersion,
    /// What the listener hands each handshake.
    #[serde(skip)]
    pub config: Arc<rustls::ServerConfig>,
    /// SHA-256 of the files' bytes: two reads of the same files are equal,
    /// a replaced certificate is a change.
    #[serde(skip)]
    fingerprint: [u8; 32],
}

impl PartialEq for ServerTls {
    fn eq(&self, other: &Self) -> bool {
        self.fingerprint == other.fingerprint
            && self.client_auth == other.client_auth
            && self.min_version == other.min_version
            && self.max_version == other.max_version
    }
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("cert_file", &self.cert_file)
            .field("key_file", &self.key_file)
            .field("client_ca_file", &self.client_ca_file)
            .field("client_auth", &self.client_auth)
            .field("min_version", &self.min_version)
            .field("max_version", &self.max_version)
            .finish_non_exhaustive()
    }
}

/// A problem with one of the files, named by the key that names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFileError {
    /// `cert_file`, `key_file`, `client_ca_file` or `client_auth_type`.
    pub key: &'static str,
    pub message: String,
}

impl ServerTls {
    /// Reads the files (relative paths against `base`) and builds the
    /// server configuration, offering [`ALPN`].
    pub fn load(files: &ServerTlsFiles, base: &Path) -> Result<Self, TlsFileError> {
        let at = |key: &'static str| move |message: String| TlsFileError { key, message };
        let cert_file = base.join(&files.cert_file);
        let key_file = base.join(&files.key_file);
        let client_ca_file = files.client_ca_file.as_ref().map(|f| base.join(f));
        let cert_pem = read(&cert_file).map_err(at("cert_file"))?;
        let key_pem = read(&key_file).map_err(at("key_file"))?;
        let chain = certificates(&cert_file, &cert_pem).map_err(at("cert_file"))?;
        let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| TlsFileError {
            key: "key_file",
            message: format!("`{}` holds no PEM private key: {e}", key_file.display()),
        })?;
        let mut digest = ring::digest::Context::new(&ring::digest::SHA256);
        digest.update(&cert_pem);
        digest.update(&key_pem);

        let versions: &[&rustls::SupportedProtocolVersion] =
            match (files.min_version, files.max_version) {
                (TlsVersion::Tls12, TlsVersion::Tls13) => rustls::ALL_VERSIONS,
                (TlsVersion::Tls12, TlsVersion::Tls12) => &[&rustls::version::TLS12],
                (TlsVersion::Tls13, TlsVersion::Tls13) => &[&rustls::version::TLS13],
                (TlsVersion::Tls13, TlsVersion::Tls12) => {
                    return Err(TlsFileError {
                        key: "min_version",
                        message: "min_version TLS13 is above max_version TLS12".to_owned(),
                    });
                }
            };
        let builder = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_protocol_versions(versions)
        .map_err(|e| TlsFileError {
            key: "min_version",
            message: e.to_string(),
        })?;
        let builder = match (&client_ca_file, files.client_auth) {
            (None, ClientAuth::NoClientCert) => builder.with_no_client_auth(),
            (None, _) => {
                return Err(TlsFileError {
                    key: "client_auth_type",
                    message: "verifying client certificates needs a `client_ca_file`".to_owned(),
                });
            }
            (Some(_), ClientAuth::NoClientCert) => {
                return Err(TlsFileError {
                    key: "client_ca_file",
                    message: "a client CA is set but no client certificate is asked for: set `client_auth_type` (RequireAndVerifyClientCert or VerifyClientCertIfGiven)".to_owned(),
                });
            }
            (Some(ca_file), auth) => {
                let ca_pem = read(ca_file).map_err(at("client_ca_file"))?;
                digest.update(&ca_pem);
                let mut roots = rustls::RootCertStore::empty();
                for cert in certificates(ca_file, &ca_pem).map_err(at("client_ca_file"))? {
                    roots.add(cert).map_err(|e| TlsFileError {
                        key: "client_ca_file",
                        message: format!(
                            "`{}` holds a certificate that cannot be a trust anchor: {e}",
                            ca_file.display()
                        ),
                    })?;
                }
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    Arc::new(rustls::crypto::ring::default_provider()),
                );
                let verifier = match auth {
                    ClientAuth::VerifyClientCertIfGiven => verifier.allow_unauthenticated(),
                    _ => verifier,
                };
                let verifier = verifier.build().map_err(|e| TlsFileError {
                    key: "client_ca_file",
                    message: e.to_string(),
                })?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder
            .with_single_cert(chain, key)
            .map_err(|e| TlsFileError {
                key: "key_file",
                message: format!(
                    "`{}` and `{}` do not make a certificate and its key: {e}",
                    cert_file.display(),
                    key_file.display()
                ),
            })?;
        config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
        let mut fingerprint = [0; 32];
        fingerprint.copy_from_slice(digest.finish().as_ref());
        Ok(Self {
            cert_file,
            key_file,
            client_ca_file,
            client_auth: files.client_auth,
            min_version: files.min_version,
            max_version: files.max_version,
            config: Arc::new(config),
            fingerprint,
        })
    }

    /// The files a reload watches.
    pub fn files(&self) -> impl Iterator<Item = &Path> {
        [self.cert_file.as_path(), self.key_file.as_path()]
            .into_iter()
            .chain(self.client_ca_file.as_deref())
    }
}

/// A listener's TLS keys as a file writes them: `tls` in the config file,
/// `tls_server_config` in the admin listener's web config (which refuses
/// unknown keys itself; the config file's reader names them with its
/// did-you-mean).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawServerTls {
    /// The certificate chain, PEM. Required.
    pub cert_file: Option<Spanned<String>>,
    /// Its private key, PEM. Required.
    pub key_file: Option<Spanned<String>>,
    /// Authorities client certificates are verified against, PEM.
    pub client_ca_file: Option<Spanned<String>>,
    /// `NoClientCert` (default), `VerifyClientCertIfGiven` or
    /// `RequireAndVerifyClientCert`.
    pub client_auth_type: Option<Spanned<String>>,
    /// `TLS12` (default) or `TLS13`.
    pub min_version: Option<Spanned<String>>,
    /// `TLS12` or `TLS13` (default).
    pub max_version: Option<Spanned<String>>,
}

/// One problem with a listener's TLS: where in the file, the key under the
/// section, and what is wrong.
pub(crate) type TlsProblem = (Option<Location>, &'static str, String);

impl RawServerTls {
    /// The TLS these keys (written at `at`) describe, its files read
    /// against `base`; or every problem found.
    pub(crate) fn read(
        &self,
        at: Option<&Location>,
        base: &Path,
    ) -> Result<ServerTls, Vec<TlsProblem>> {
        let mut problems = Vec::new();
        let client_auth = choice(
            &self.client_auth_type,
            "client_auth_type",
            ClientAuth::NoClientCert,
            ClientAuth::parse,
            &mut problems,
        );
        let min_version = choice(
            &self.min_version,
            "min_version",
            TlsVersion::Tls12,
            TlsVersion::parse,
            &mut problems,
        );
        let max_version = choice(
            &self.max_version,
            "max_version",
            TlsVersion::Tls13,
            TlsVersion::parse,
            &mut problems,
        );
        for (field, key) in [(&self.cert_file, "cert_file"), (&self.key_file, "key_file")] {
            if field.is_none() {
                problems.push((at.copied(), key, "required key is missing".to_owned()));
            }
        }
        let (Some(cert), Some(key), Some(client_auth), Some(min_version), Some(max_version)) = (
            &self.cert_file,
            &self.key_file,
            client_auth,
            min_version,
            max_version,
        ) else {
            return Err(problems);
        };
        if !problems.is_empty() {
            return Err(problems);
        }
        let files = ServerTlsFiles {
            cert_file: PathBuf::from(cert.value.trim()),
            key_file: PathBuf::from(key.value.trim()),
            client_ca_file: self
                .client_ca_file
                .as_ref()
                .map(|c| PathBuf::from(c.value.trim())),
            client_auth,
            min_version,
            max_version,
        };
        ServerTls::load(&files, base).map_err(|e| {
            let field = match e.key {
                "cert_file" => Some(cert),
                "key_file" => Some(key),
                "client_ca_file" => self.client_ca_file.as_ref(),
                "client_auth_type" => self.client_auth_type.as_ref(),
                "min_version" => self.min_version.as_ref(),
                _ => None,
            };
            vec![(
                field.map(|f| f.referenced).or(at.copied()),
                e.key,
                e.message,
            )]
        })
    }
}

/// One of a fixed set of names, `default` when not written; a bad one is
/// a problem at its place.
fn choice<T>(
    field: &Option<Spanned<String>>,
    key: &'static str,
    default: T,
    parse: fn(&str) -> Result<T, String>,
    problems: &mut Vec<TlsProblem>,
) -> Option<T> {
    match field {
        None => Some(default),
        Some(text) => parse(text.value.trim())
            .map_err(|m| problems.push((Some(text.referenced), key, m)))
            .ok(),
    }
}

fn read(file: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(file).map_err(|e| format!("cannot read `{}`: {e}", file.display()))
}

/// The certificates of the PEM file `file`, in file order; at least one.
pub(crate) fn read_certificates(file: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    certificates(file, &read(file)?)
}

/// The certificates of a PEM file, in file order; at least one.
fn certificates(file: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certificates = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            format!(
                "`{}` is not a PEM file of certificates: {e}",
                file.display()
            )
        })?;
    if certificates.is_empty() {
        return Err(format!(
            "`{}` holds no certificate (expected PEM `BEGIN CERTIFICATE` blocks)",
            file.display()
        ));
    }
    Ok(certificates)
}
