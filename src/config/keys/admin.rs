//! The keys of `admin`: the admin listener.

use super::super::AdminSettings;
use super::super::raw::fields_of;
use super::key::{Table, key};

/// `admin`.
pub(super) static ADMIN: Table = Table {
    fields: fields_of::<AdminSettings>,
    keys: &[
        key(
            "listen",
            "address",
            "`127.0.0.1:9464`",
            "Address of the admin listener (`/metrics`, `/healthz`, `/readyz`). Loopback by \
            default, so metrics are not exposed by accident. Must differ from `listen`. \
            Overridden by `--admin-listen`.",
        )
        .restart(""),
        key(
            "max_connections",
            "integer ≥ 1",
            "`64`",
            "Most connections open at once on the admin listener; more wait in the kernel's \
            accept queue. The admin listener's own share of file descriptors: whatever \
            visits the admin port cannot take those forwarding needs. Its connections must \
            send a request head within 10 s (also between requests) and are closed after 60 \
            s.",
        )
        .restart(""),
        key(
            "web_config_file",
            "path",
            "none",
            "A Prometheus exporter-toolkit web config file (the format node_exporter and \
            every official exporter read with `--web.config.file`): TLS, basic-auth users \
            and headers of the admin listener. Relative to this file. See [the admin \
            listener's web config](#the-admin-listeners-web-config).",
        ),
    ],
};
