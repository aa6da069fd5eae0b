//! The keys of `tls`: TLS on the proxy listener.

use super::super::raw::fields_of;
use super::super::server_tls;
use super::key::{Table, key};

/// `tls`.
pub(super) static TLS: Table = Table {
    fields: fields_of::<server_tls::RawServerTls>,
    keys: &[
        key(
            "cert_file",
            "path",
            "**required**",
            "The certificate chain, PEM, relative to this file.",
        ),
        key(
            "key_file",
            "path",
            "**required**",
            "Its private key, PEM (PKCS#8, PKCS#1 or SEC1).",
        ),
        key(
            "client_ca_file",
            "path",
            "none",
            "Authorities a client certificate is verified against, PEM: mutual TLS. Needs a \
            `client_auth_type` that asks for a certificate.",
        ),
        key(
            "client_auth_type",
            "name",
            "`NoClientCert`",
            "`NoClientCert`, `VerifyClientCertIfGiven` or `RequireAndVerifyClientCert`.",
        ),
        key(
            "min_version",
            "name",
            "`TLS12`",
            "`TLS12` or `TLS13`; TLS 1.0 and 1.1 are not offered.",
        ),
        key("max_version", "name", "`TLS13`", "`TLS12` or `TLS13`."),
    ],
};
