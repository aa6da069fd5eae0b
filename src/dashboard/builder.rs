//! The builder the panels are laid out with: a grid of rows and panels,
//! their queries, and the template variables that filter them.

use serde_json::{Value, json};

use names::{self, Family};
use slo::rules::Histograms;

pub(super) struct Builder {
    ns: String,
    /// Which histograms the latency and size panels query.
    histograms: Histograms,
    pub(super) panels: Vec<Value>,
    /// Next free grid row.
    pub(super) y: u32,
    next_id: u32,
}

/// A PromQL query with its legend.
pub(super) struct Q {
    expr: String,
    legend: &'static str,
    /// Whether Grafana asks for the exemplars of its series (the latency
    /// histograms': each names a request's trace or request id).
    pub(super) exemplar: bool,
}

pub(super) fn q(expr: String, legend: &'static str) -> Q {
    Q {
        expr,
        legend,
        exemplar: false,
    }
}

pub(super) const SEL: &str =
    r#"route=~"$route", model=~"$model", slo=~"$slo", tenant=~"$tenant", operation=~"$operation""#;
pub(super) const RATE: &str = "$__rate_interval";

impl Builder {
    pub(super) fn new(namespace: &str, histograms: Histograms) -> Self {
        Builder {
            ns: namespace.to_owned(),
            histograms,
            panels: Vec::new(),
            y: 0,
            next_id: 1,
        }
    }

    pub(super) fn id(&mut self) -> u32 {
        self.next_id += 1;
        self.next_id
    }

    /// The dashboard's namespace.
    pub(super) fn ns(&self) -> &str {
        &self.ns
    }

    /// A family's name under the dashboard's namespace.
    pub(super) fn m(&self, family: Family) -> String {
        family.name(&self.ns)
    }

    pub(super) fn row(&mut self, title: &str, collapsed: bool) {
        let id = self.id();
        self.panels.push(json!({
            "type": "row", "id": id, "title": title, "collapsed": collapsed,
            "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y}, "panels": [],
        }));
        self.y += 1;
    }

    pub(super) fn targets(queries: Vec<Q>) -> Vec<Value> {
        queries
            .into_iter()
            .enumerate()
            .map(|(i, q)| {
                let mut target = json!({
                    "datasource": {"type": "prometheus", "uid": "${datasource}"},
                    "expr": q.expr,
                    "legendFormat": q.legend,
                    "refId": char::from(b'A' + (i % 26) as u8).to_string(),
                });
                if q.exemplar {
                    target["exemplar"] = json!(true);
                }
                target
            })
            .collect()
    }

    /// Places a panel at column `x` of the current grid row.
    pub(super) fn place(&mut self, mut panel: Value, x: u32, w: u32, h: u32) {
        panel["id"] = json!(self.id());
        panel["gridPos"] = json!({"h": h, "w": w, "x": x, "y": self.y});
        panel["datasource"] = json!({"type": "prometheus", "uid": "${datasource}"});
        self.panels.push(panel);
    }

    pub(super) fn timeseries(title: &str, description: &str, unit: &str, queries: Vec<Q>) -> Value {
        json!({
            "type": "timeseries", "title": title, "description": description,
            "fieldConfig": {"defaults": {"unit": unit, "custom": {"fillOpacity": 5, "showPoints": "never"}}, "overrides": []},
            "options": {"legend": {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull", "max"]}, "tooltip": {"mode": "multi"}},
            "targets": Self::targets(queries),
        })
    }

    pub(super) fn stat(title: &str, description: &str, unit: &str, query: Q) -> Value {
        json!({
            "type": "stat", "title": title, "description": description,
            "fieldConfig": {"defaults": {"unit": unit, "decimals": 2}, "overrides": []},
            "options": {"reduceOptions": {"calcs": ["lastNotNull"]}, "colorMode": "value", "graphMode": "area"},
            "targets": Self::targets(vec![query]),
        })
    }

    /// A heatmap of `metric`'s distribution over time.
    pub(super) fn heatmap(&self, title: &str, description: &str, metric: Family) -> Value {
        let expr = self.histograms.heatmap(&self.m(metric), SEL, RATE);
        json!({
            "type": "heatmap", "title": title, "description": description,
            "options": {"calculate": false, "yAxis": {"unit": "s"}, "cellGap": 1, "color": {"scheme": "Oranges", "mode": "scheme"}},
            "targets": [{
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "expr": expr, "format": "heatmap", "legendFormat": "{{le}}", "refId": "A",
            }],
        })
    }

    pub(super) fn quantiles(&self, metric: Family, by: &str) -> Vec<Q> {
        let m = self.m(metric);
        let exemplar = [names::TTFT, names::TPOT, names::ITL, names::E2EL]
            .iter()
            .any(|f| f.suffix == metric.suffix);
        [("0.5", "p50"), ("0.95", "p95"), ("0.99", "p99")]
            .into_iter()
            .map(|(p, name)| Q {
                expr: self.histograms.quantile(p, &m, SEL, by, RATE),
                legend: match name {
                    "p50" => "p50 {{route}} {{model}}",
                    "p95" => "p95 {{route}} {{model}}",
                    _ => "p99 {{route}} {{model}}",
                },
                // Once per panel: the exemplars are the same for each
                // quantile.
                exemplar: exemplar && name == "p99",
            })
            .collect()
    }

    /// Lays panels of the given widths (of 24) left to right, wrapping to a
    /// new line of height `h` when one is full.
    pub(super) fn place_all(&mut self, panels: Vec<(Value, u32)>, h: u32) {
        let mut x = 0;
        for (p, w) in panels {
            if x + w > 24 {
                self.y += h;
                x = 0;
            }
            self.place(p, x, w, h);
            x += w;
            if x >= 24 {
                self.y += h;
                x = 0;
            }
        }
        if x != 0 {
            self.y += h;
        }
    }

    pub(super) fn mean(&self, metric: Family, by: &str) -> String {
        let m = self.m(metric);
        format!(
            "({} / {})",
            self.histograms.sum_rate(&m, SEL, by, RATE),
            self.histograms.count_rate(&m, SEL, by, RATE)
        )
    }

    pub(super) fn variables(&self) -> Vec<Value> {
        let req = self.m(names::REQUESTS);
        let var = |name: &str, query: String| {
            json!({
                "name": name, "label": name, "type": "query",
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
                "definition": query,
                "refresh": 2, "includeAll": true, "multi": true, "allValue": ".*",
                "current": {"selected": true, "text": ["All"], "value": ["$__all"]},
                "sort": 1,
            })
        };
        vec![
            json!({
                "name": "datasource", "label": "Data source", "type": "datasource",
                "query": "prometheus", "current": {}, "hide": 0,
            }),
            var("route", format!("label_values({req}, route)")),
            var(
                "model",
                format!("label_values({req}{{route=~\"$route\"}}, model)"),
            ),
            var(
                "slo",
                format!("label_values({req}{{route=~\"$route\"}}, slo)"),
            ),
            // Empty on routes without tenants, and on the histograms unless
            // `metrics.tenants.histograms`: "All" (`.*`) matches those too.
            var(
                "tenant",
                format!("label_values({req}{{route=~\"$route\"}}, tenant)"),
            ),
            // `llm_requests_in_flight` has no operation: "All" (`.*`)
            // matches it too.
            var(
                "operation",
                format!("label_values({req}{{route=~\"$route\"}}, operation)"),
            ),
            // The GPU sets of the routes chosen whose requests were
            // charged: "All" (`.*`) is every set.
            var(
                "gpu_set",
                format!(
                    "label_values({}{{route=~\"$route\"}}, gpu_set)",
                    self.m(names::REQUEST_GPU_SECONDS)
                ),
            ),
        ]
    }
}
