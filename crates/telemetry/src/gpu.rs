//! An NVIDIA DCGM exporter's page read into its GPUs, a selection of them
//! (the GPUs that serve one route), and their aggregate: how many, and each
//! figure's mean and maximum (the busiest GPU).
//!
//! The figures, as dcgm-exporter's counters files name them:
//!
//! | figure | name | unit |
//! |---|---|---|
//! | utilization | `DCGM_FI_DEV_GPU_UTIL` | percent, 0..100 |
//! | framebuffer used | `DCGM_FI_DEV_FB_USED` | MiB |
//! | graphics engine active | `DCGM_FI_PROF_GR_ENGINE_ACTIVE` | ratio, 0..1 |
//! | SM active | `DCGM_FI_PROF_SM_ACTIVE` | ratio, 0..1 |
//! | DRAM active | `DCGM_FI_PROF_DRAM_ACTIVE` | ratio, 0..1 |
//! | energy since the driver loaded | `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION` | mJ, a counter |
//! | power drawn | `DCGM_FI_DEV_POWER_USAGE` | W |
//!
//! The `DCGM_FI_PROF_*` fields need a GPU and a DCGM that can profile, and
//! the exporter's default counters file leaves `SM_ACTIVE` out: a figure a
//! GPU does not report is unknown for that GPU, never zero, and a mean is
//! over the GPUs that report it. DCGM writes a field it has no value for as
//! a "blank" sentinel (just under `i64::MAX` for integer fields, 2^47 for
//! float ones); such a value, or one outside the figure's range, is refused
//! like an absent one.
//!
//! A GPU is told apart by its `Hostname`, `UUID`, `gpu` (the index) and,
//! under MIG, `GPU_I_ID`; every label of its first sample is kept, so a
//! caller can show the model name or the pod.

use std::collections::BTreeMap;

use crate::parse::{Page, Sample};

/// The labels a [`GpuSelector`] can select by, as the exporter names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GpuLabel {
    /// `gpu`: the index on its host, `"0"`, `"1"`...
    Gpu,
    /// `UUID`: `GPU-…`, unique across hosts.
    Uuid,
    /// `Hostname`: the node the exporter runs on.
    Hostname,
}

impl GpuLabel {
    /// The label's name on the page.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Gpu => "gpu",
            Self::Uuid => "UUID",
            Self::Hostname => "Hostname",
        }
    }
}

/// One GPU's figures; `None` is "not reported".
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GpuFigures {
    /// `DCGM_FI_DEV_GPU_UTIL`, percent.
    pub utilization_percent: Option<f64>,
    /// `DCGM_FI_DEV_FB_USED`, MiB.
    pub framebuffer_used_mib: Option<f64>,
    /// `DCGM_FI_PROF_GR_ENGINE_ACTIVE`, 0..1.
    pub graphics_engine_active: Option<f64>,
    /// `DCGM_FI_PROF_SM_ACTIVE`, 0..1.
    pub sm_active: Option<f64>,
    /// `DCGM_FI_PROF_DRAM_ACTIVE`, 0..1.
    pub dram_active: Option<f64>,
    /// `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`, millijoules.
    pub energy_millijoules: Option<f64>,
    /// `DCGM_FI_DEV_POWER_USAGE`, watts.
    pub power_watts: Option<f64>,
}

/// One GPU of the page.
#[derive(Debug, Clone, PartialEq)]
pub struct Gpu {
    /// The labels of the first sample seen for this GPU, in page order.
    pub labels: Vec<(String, String)>,
    pub figures: GpuFigures,
}

impl Gpu {
    /// What identifies the GPU (or MIG instance) on its page: its `UUID`,
    /// else its `Hostname` and `gpu` index, with its `GPU_I_ID` under MIG.
    pub fn identity(&self) -> String {
        let get = |name| self.label(name).unwrap_or("");
        let mut id = match self.label("UUID").filter(|u| !u.is_empty()) {
            Some(uuid) => uuid.to_owned(),
            None => format!("{}:{}", get("Hostname"), get("gpu")),
        };
        if let Some(instance) = self.label("GPU_I_ID").filter(|i| !i.is_empty()) {
            id.push('/');
            id.push_str(instance);
        }
        id
    }

    /// The value of label `name`, if the GPU's samples have it.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

/// What one DCGM page said.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuReading {
    /// The GPUs with at least one `DCGM_FI_*` sample (labelled `gpu` or
    /// `UUID`), in the order of their `Hostname`, `gpu` index, `UUID` and
    /// MIG instance.
    pub gpus: Vec<Gpu>,
    /// Samples not read for a figure: the exporter's other fields, and any
    /// sample of no GPU.
    pub ignored: usize,
    /// Samples of a figure whose value is a blank or out of range.
    pub refused: usize,
}

/// Which GPUs serve a route: for each label given, the values it may take.
/// A GPU is selected when, for every label given, its value is one of
/// the label's; with no label given, every GPU is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuSelector {
    rules: BTreeMap<GpuLabel, Vec<String>>,
}

impl GpuSelector {
    /// Selects every GPU.
    pub fn all() -> Self {
        Self::default()
    }

    /// Also requires `label` to be one of `values` (added to the values
    /// already given for that label).
    #[must_use]
    pub fn with(mut self, label: GpuLabel, values: impl IntoIterator<Item = String>) -> Self {
        self.rules.entry(label).or_default().extend(values);
        self
    }

    /// Whether `gpu` is selected.
    pub fn matches(&self, gpu: &Gpu) -> bool {
        self.rules.iter().all(|(label, values)| {
            gpu.label(label.as_str())
                .is_some_and(|value| values.iter().any(|v| v == value))
        })
    }
}

/// A figure over a set of GPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spread {
    /// The mean over the GPUs that report the figure; `None` when none do.
    pub mean: Option<f64>,
    /// The busiest GPU's value.
    pub max: Option<f64>,
    /// How many GPUs reported it.
    pub reporting: usize,
}

impl Spread {
    fn of(values: impl Iterator<Item = f64>) -> Self {
        let mut spread = Self::default();
        let mut sum = 0.0;
        for value in values {
            sum += value;
            spread.reporting += 1;
            spread.max = Some(spread.max.map_or(value, |max: f64| max.max(value)));
        }
        if spread.reporting > 0 {
            spread.mean = Some(sum / spread.reporting as f64);
        }
        spread
    }
}

/// One selected GPU's energy figures, as a ledger reads them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuEnergy {
    /// [`Gpu::identity`].
    pub id: String,
    /// `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`, millijoules.
    pub energy_millijoules: Option<f64>,
    /// `DCGM_FI_DEV_POWER_USAGE`, watts.
    pub power_watts: Option<f64>,
}

/// The selected GPUs of one route, aggregated.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuAggregate {
    /// GPUs selected.
    pub count: usize,
    pub utilization_percent: Spread,
    pub framebuffer_used_mib: Spread,
    pub graphics_engine_active: Spread,
    pub sm_active: Spread,
    pub dram_active: Spread,
    /// Each selected GPU's energy counter and power, by identity: a
    /// ledger follows each counter on its own (a sum over the set would
    /// jump as GPUs come and go).
    pub energy: Vec<GpuEnergy>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Util,
    FbUsed,
    GrEngine,
    Sm,
    Dram,
    Energy,
    Power,
}

impl Field {
    fn of(name: &str) -> Option<Self> {
        Some(match name {
            "DCGM_FI_DEV_GPU_UTIL" => Self::Util,
            "DCGM_FI_DEV_FB_USED" => Self::FbUsed,
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE" => Self::GrEngine,
            "DCGM_FI_PROF_SM_ACTIVE" => Self::Sm,
            "DCGM_FI_PROF_DRAM_ACTIVE" => Self::Dram,
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" => Self::Energy,
            "DCGM_FI_DEV_POWER_USAGE" => Self::Power,
            _ => return None,
        })
    }

    fn plausible(self, value: f64) -> bool {
        // DCGM's blanks: DCGM_INT64_BLANK (0x7ffffffffffffff0) and up for
        // integer fields, DCGM_FP64_BLANK (2^47) and up for float ones.
        // A terabyte of framebuffer is no GPU's either.
        let max = match self {
            Self::Util => 100.0,
            Self::FbUsed => 1024.0 * 1024.0,
            Self::GrEngine | Self::Sm | Self::Dram => 1.0,
            // A kilowatt for three thousand years, in millijoules: below
            // both blanks.
            Self::Energy => 1e17,
            // Ten kilowatts: more than any one GPU draws.
            Self::Power => 10_000.0,
        };
        value.is_finite() && (0.0..=max).contains(&value)
    }

    fn slot(self, figures: &mut GpuFigures) -> &mut Option<f64> {
        match self {
            Self::Util => &mut figures.utilization_percent,
            Self::FbUsed => &mut figures.framebuffer_used_mib,
            Self::GrEngine => &mut figures.graphics_engine_active,
            Self::Sm => &mut figures.sm_active,
            Self::Dram => &mut figures.dram_active,
            Self::Energy => &mut figures.energy_millijoules,
            Self::Power => &mut figures.power_watts,
        }
    }
}

/// What tells one GPU (or MIG instance) from another, in the order GPUs
/// sort: `Hostname`, `gpu` as a number, then as written, `UUID`,
/// `GPU_I_ID`.
type Key = (String, u64, String, String, String);

fn key(sample: &Sample) -> Key {
    let get = |name| sample.label(name).unwrap_or("").to_owned();
    let index = sample.label("gpu").unwrap_or("");
    (
        get("Hostname"),
        index.parse().unwrap_or(u64::MAX),
        get("gpu"),
        get("UUID"),
        get("GPU_I_ID"),
    )
}

/// Reads the GPUs of a DCGM exporter's page; see the module documentation.
pub fn read_gpus(page: &Page) -> GpuReading {
    let mut reading = GpuReading::default();
    let mut gpus: BTreeMap<Key, Gpu> = BTreeMap::new();
    for sample in page.samples() {
        let field = Field::of(&sample.name);
        let is_gpu = sample.name.starts_with("DCGM_FI_")
            && (sample.label("gpu").is_some() || sample.label("UUID").is_some());
        if is_gpu {
            // Every field the exporter writes for a GPU shows the GPU, so
            // one whose figures are all blank (or not collected) is still
            // counted.
            let gpu = gpus.entry(key(sample)).or_insert_with(|| Gpu {
                labels: sample.labels.clone(),
                figures: GpuFigures::default(),
            });
            if let Some(field) = field.filter(|f| f.plausible(sample.value)) {
                // A field written twice for one GPU (pod labels that
                // differ) is the same reading; the first is kept.
                field.slot(&mut gpu.figures).get_or_insert(sample.value);
                continue;
            }
        }
        match field {
            Some(_) if is_gpu => reading.refused += 1,
            _ => reading.ignored += 1,
        }
    }
    reading.gpus = gpus.into_values().collect();
    reading
}

impl GpuReading {
    /// The selected GPUs, aggregated.
    pub fn aggregate(&self, selector: &GpuSelector) -> GpuAggregate {
        let gpus: Vec<&Gpu> = self
            .gpus
            .iter()
            .filter(|gpu| selector.matches(gpu))
            .collect();
        let selected: Vec<&GpuFigures> = gpus.iter().map(|gpu| &gpu.figures).collect();
        let spread = |get: fn(&GpuFigures) -> Option<f64>| {
            Spread::of(selected.iter().filter_map(|f| get(f)))
        };
        GpuAggregate {
            count: selected.len(),
            utilization_percent: spread(|f| f.utilization_percent),
            framebuffer_used_mib: spread(|f| f.framebuffer_used_mib),
            graphics_engine_active: spread(|f| f.graphics_engine_active),
            sm_active: spread(|f| f.sm_active),
            dram_active: spread(|f| f.dram_active),
            energy: gpus
                .iter()
                .map(|gpu| GpuEnergy {
                    id: gpu.identity(),
                    energy_millijoules: gpu.figures.energy_millijoules,
                    power_watts: gpu.figures.power_watts,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
// Panicking on unexpected input is how a test fails.
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::parse::{Limits, parse};

    fn read(text: &str) -> GpuReading {
        read_gpus(&parse(text.as_bytes(), &Limits::default()).unwrap())
    }

    #[test]
    fn blanks_and_out_of_range_values_are_unknown() {
        let r = read(
            r#"DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="a"} 9223372036854775794
DCGM_FI_PROF_DRAM_ACTIVE{gpu="0",UUID="a"} 140737488355328
DCGM_FI_DEV_FB_USED{gpu="0",UUID="a"} 1024
DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="a"} 1410
"#,
        );
        assert_eq!((r.gpus.len(), r.refused, r.ignored), (1, 2, 1));
        let f = r.gpus[0].figures;
        assert_eq!(f.utilization_percent, None);
        assert_eq!(f.dram_active, None);
        assert_eq!(f.framebuffer_used_mib, Some(1024.0));
    }

    #[test]
    fn gpus_sort_by_host_and_index_as_numbers() {
        let r = read(
            r#"DCGM_FI_DEV_GPU_UTIL{gpu="10",UUID="c",Hostname="a"} 1
DCGM_FI_DEV_GPU_UTIL{gpu="2",UUID="b",Hostname="a"} 1
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="d",Hostname="b"} 1
"#,
        );
        let order: Vec<_> = r.gpus.iter().map(|g| g.label("UUID").unwrap()).collect();
        assert_eq!(order, ["b", "c", "d"]);
    }

    #[test]
    fn a_gpu_without_a_figure_still_counts() {
        let r = read(
            r#"DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="a"} 9223372036854775794
DCGM_FI_DEV_SM_CLOCK{gpu="1",UUID="b"} 1410
DCGM_FI_DEV_GPU_UTIL{gpu="2",UUID="c"} 40
DCGM_FI_DEV_GPU_UTIL 50
"#,
        );
        assert_eq!((r.gpus.len(), r.refused, r.ignored), (3, 1, 2));
        let all = r.aggregate(&GpuSelector::all());
        assert_eq!(all.count, 3);
        assert_eq!(all.utilization_percent.mean, Some(40.0));
        assert_eq!(all.utilization_percent.reporting, 1);
    }

    #[test]
    fn each_selected_gpu_keeps_its_own_energy_figures_by_identity() {
        let r = read(
            r#"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0",UUID="a"} 1000
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="1",UUID="b"} 2500
DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="a"} 250.5
DCGM_FI_DEV_POWER_USAGE{gpu="1",UUID="b"} 9223372036854775794
DCGM_FI_DEV_POWER_USAGE{gpu="2",Hostname="n1"} 100
DCGM_FI_DEV_POWER_USAGE{gpu="3",UUID="d",GPU_I_ID="2"} 50
"#,
        );
        assert_eq!(r.refused, 1, "a blank power");
        let first_two = GpuSelector::all().with(GpuLabel::Gpu, ["0".to_owned(), "1".to_owned()]);
        let two = r.aggregate(&first_two);
        let energy = |id: &str, mj, w| GpuEnergy {
            id: id.to_owned(),
            energy_millijoules: mj,
            power_watts: w,
        };
        assert_eq!(
            two.energy,
            [
                energy("a", Some(1000.0), Some(250.5)),
                energy("b", Some(2500.0), None)
            ]
        );
        let all = r.aggregate(&GpuSelector::all());
        let ids: Vec<&str> = all.energy.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "d/2", "n1:2"]);
    }

    #[test]
    fn an_empty_selection_has_no_figures() {
        let r = read(r#"DCGM_FI_DEV_GPU_UTIL{gpu="0"} 50"#);
        let none = r.aggregate(&GpuSelector::all().with(GpuLabel::Gpu, ["7".to_owned()]));
        assert_eq!(none, GpuAggregate::default());
        let all = r.aggregate(&GpuSelector::all());
        assert_eq!(all.count, 1);
        assert_eq!(all.utilization_percent.mean, Some(50.0));
    }
}
