//! Stage one of loading: serde types that mirror the YAML file.
