//! The `metrics` section: namespace, label bounds, buckets.

use std::collections::HashMap;

use super::super::raw::{self, RawConfig, Spanned};
use super::super::{LabelBounds, MetricsSettings, TenantLabels};

use super::checker::Checker;
use super::values::*;

impl Checker<'_> {
    pub(crate) fn metrics(&mut self, raw: &RawConfig) -> MetricsSettings {
        let defaults = MetricsSettings::default();
        let Some(metrics) = &raw.metrics else {
            return defaults;
        };
        let namespace = self
            .value(metrics.namespace.as_ref(), "metrics.namespace", |text| {
                if is_metric_namespace(text) {
                    Ok(text.to_owned())
                } else {
                    Err(format!(
                        "invalid namespace `{text}`: must match [a-zA-Z_][a-zA-Z0-9_]*"
                    ))
                }
            })
            .unwrap_or(defaults.namespace);

        let models = match &metrics.models {
            Some(raw) => self.label_bounds(
                "metrics.models",
                "model",
                raw.allow.as_ref(),
                raw.max_distinct.as_ref(),
                &defaults.models,
            ),
            None => defaults.models,
        };
        let tenants = match &metrics.tenants {
            Some(raw) => TenantLabels {
                bounds: self.label_bounds(
                    "metrics.tenants",
                    "tenant",
                    raw.allow.as_ref(),
                    raw.max_distinct.as_ref(),
                    &defaults.tenants.bounds,
                ),
                histograms: self
                    .value(
                        raw.histograms.as_ref(),
                        "metrics.tenants.histograms",
                        parse_bool,
                    )
                    .unwrap_or(defaults.tenants.histograms),
            },
            None => defaults.tenants,
        };

        let max_usage_tokens = self
            .value(
                metrics.max_usage_tokens.as_ref(),
                "metrics.max_usage_tokens",
                |text| match text.trim().parse::<u64>() {
                    Ok(n) if n >= 1 => Ok(n),
                    _ => Err(format!(
                        "invalid count `{text}`: expected a whole number, at least 1"
                    )),
                },
            )
            .unwrap_or(defaults.max_usage_tokens);
        let stall_threshold = self
            .value(
                metrics.stall_threshold.as_ref(),
                "metrics.stall_threshold",
                parse_duration,
            )
            .unwrap_or(defaults.stall_threshold);
        let slow_reader_share = self
            .value(
                metrics.slow_reader_share.as_ref(),
                "metrics.slow_reader_share",
                parse_percentage,
            )
            .unwrap_or(defaults.slow_reader_share);

        let mut buckets = defaults.buckets;
        if let Some(raw_buckets) = &metrics.buckets {
            let lists: [(&str, &Option<raw::List>, &mut Vec<f64>); 8] = [
                (
                    "time_to_first_token",
                    &raw_buckets.time_to_first_token,
                    &mut buckets.time_to_first_token,
                ),
                (
                    "time_to_response_headers",
                    &raw_buckets.time_to_response_headers,
                    &mut buckets.time_to_response_headers,
                ),
                (
                    "time_per_output_token",
                    &raw_buckets.time_per_output_token,
                    &mut buckets.time_per_output_token,
                ),
                (
                    "inter_token_latency",
                    &raw_buckets.inter_token_latency,
                    &mut buckets.inter_token_latency,
                ),
                (
                    "e2e_request_latency",
                    &raw_buckets.e2e_request_latency,
                    &mut buckets.e2e_request_latency,
                ),
                (
                    "output_tokens",
                    &raw_buckets.output_tokens,
                    &mut buckets.output_tokens,
                ),
                (
                    "input_tokens",
                    &raw_buckets.input_tokens,
                    &mut buckets.input_tokens,
                ),
                (
                    "proxy_time",
                    &raw_buckets.proxy_time,
                    &mut buckets.proxy_time,
                ),
            ];
            for (name, raw_list, target) in lists {
                if let Some(list) = raw_list
                    && let Some(bounds) = self.bucket_list(&format!("metrics.buckets.{name}"), list)
                {
                    *target = bounds;
                }
            }
        }

        MetricsSettings {
            namespace,
            models,
            tenants,
            max_usage_tokens,
            stall_threshold,
            slow_reader_share,
            buckets,
        }
    }

    /// The bounds of a label clients choose (`model`, `tenant`), under
    /// `key`.
    pub(crate) fn label_bounds(
        &mut self,
        key: &str,
        what: &str,
        allow: Option<&raw::List>,
        max_distinct: Option<&Spanned<String>>,
        defaults: &LabelBounds,
    ) -> LabelBounds {
        LabelBounds {
            allow: allow.and_then(|list| self.allow_list(&format!("{key}.allow"), what, list)),
            max_distinct: self
                .value(
                    max_distinct,
                    &format!("{key}.max_distinct"),
                    parse_positive_count,
                )
                .unwrap_or(defaults.max_distinct),
        }
    }

    pub(crate) fn allow_list(
        &mut self,
        key: &str,
        what: &str,
        list: &raw::List,
    ) -> Option<Vec<String>> {
        if list.value.is_empty() {
            self.at(
                raw::pos(list),
                key,
                format!(
                    "must not be empty (leave `allow` out to bound {what}s by max_distinct instead)"
                ),
            );
            return None;
        }
        let mut seen: HashMap<&str, usize> = HashMap::new();
        let mut names = Vec::with_capacity(list.value.len());
        let mut ok = true;
        for (i, name) in list.value.iter().enumerate() {
            let item = format!("{key}[{i}]");
            if name.value.is_empty() {
                self.at(
                    raw::pos(name),
                    item,
                    format!("{what} name must not be empty"),
                );
                ok = false;
            } else if let Some(first) = seen.insert(&name.value, i) {
                self.at(
                    raw::pos(name),
                    item,
                    format!(
                        "duplicate {what} name `{}` (also {key}[{first}])",
                        name.value
                    ),
                );
                ok = false;
            } else {
                names.push(name.value.clone());
            }
        }
        ok.then_some(names)
    }

    pub(crate) fn bucket_list(&mut self, key: &str, list: &raw::List) -> Option<Vec<f64>> {
        if list.value.is_empty() {
            self.at(raw::pos(list), key, "must list at least one bucket bound");
            return None;
        }
        let mut bounds = Vec::with_capacity(list.value.len());
        let mut ok = true;
        let mut previous: Option<f64> = None;
        for (i, item) in list.value.iter().enumerate() {
            let item_key = format!("{key}[{i}]");
            match parse_bound(&item.value) {
                Err(message) => {
                    self.at(raw::pos(item), item_key, message);
                    ok = false;
                }
                Ok(bound) => {
                    if let Some(before) = previous.filter(|before| bound <= *before) {
                        self.at(
                            raw::pos(item),
                            item_key,
                            format!(
                                "bucket bounds must be strictly increasing: {} is not greater than the previous bound {}",
                                item.value.trim(),
                                before
                            ),
                        );
                        ok = false;
                    }
                    previous = Some(bound);
                    bounds.push(bound);
                }
            }
        }
        ok.then_some(bounds)
    }
}

/// Prometheus-safe metric name prefix.
pub(crate) fn is_metric_namespace(text: &str) -> bool {
    let mut chars = text.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A bucket bound: a finite number greater than zero.
pub(crate) fn parse_bound(text: &str) -> Result<f64, String> {
    let trimmed = text.trim();
    let lower = trimmed.to_ascii_lowercase();
    if matches!(
        lower.trim_start_matches(['+', '-']),
        ".inf" | "inf" | "infinity" | ".nan" | "nan"
    ) {
        return Err(format!("invalid bucket bound `{text}`: must be finite"));
    }
    match trimmed.parse::<f64>() {
        Ok(bound) if !bound.is_finite() => {
            Err(format!("invalid bucket bound `{text}`: must be finite"))
        }
        Ok(bound) if bound <= 0.0 => Err(format!(
            "invalid bucket bound `{text}`: must be greater than zero"
        )),
        Ok(bound) => Ok(bound),
        Err(_) => Err(format!("invalid bucket bound `{text}`: expected a number")),
    }
}
