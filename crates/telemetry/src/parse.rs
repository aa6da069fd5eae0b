//! The Prometheus text exposition format (0.0.4), and OpenMetrics' text as
//! far as its samples go, read into [`Sample`]s: a name, its labels and a
//! value.
//!
//! What a conforming page may hold is accepted: comments, `HELP`, `TYPE` and
//! `UNIT` lines, blank lines, `\r\n` line ends, whitespace after the commas
//! of a label set, a trailing comma, escaped label values, `NaN` and `±Inf`,
//! timestamps (integer milliseconds or OpenMetrics' float seconds),
//! OpenMetrics exemplars and `# EOF`, and the quoted metric and label names
//! of Prometheus 3. Anything else on a sample line refuses the whole page,
//! as Prometheus refuses a scrape: a page that does not parse is more likely
//! an error page than a server's figures, and half a reading is worse than
//! none.
//!
//! The parser holds at most [`Limits::max_samples`] samples and looks at no
//! line longer than [`Limits::max_line_len`], so its memory is bounded by
//! the limits rather than the input; the size of the body itself is the
//! caller's to bound before the bytes are read. It never panics, whatever
//! the bytes.

use std::collections::HashMap;

/// Bounds on what one page may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Samples kept from one page; one more refuses the page. vLLM's page
    /// for one model is about 500 samples, a DCGM exporter's for eight GPUs
    /// about 300.
    pub max_samples: usize,
    /// Bytes of one line, its end excluded. A sample line of an inference
    /// server is well under 1 KiB; a longer line is not a sample worth
    /// reading.
    pub max_line_len: usize,
    /// Labels of one sample (DCGM's, with Kubernetes' pod labels, are about
    /// ten).
    pub max_labels: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_samples: 100_000,
            max_line_len: 64 * 1024,
            max_labels: 64,
        }
    }
}

/// The type a `# TYPE` line declares for a metric family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricType {
    Counter,
    Gauge,
    Histogram,
    GaugeHistogram,
    Summary,
    Info,
    StateSet,
    /// `untyped` (0.0.4), `unknown` (OpenMetrics), or a word neither knows.
    Unknown,
}

impl MetricType {
    fn from_word(word: &str) -> Self {
        match word {
            "counter" => Self::Counter,
            "gauge" => Self::Gauge,
            "histogram" => Self::Histogram,
            "gaugehistogram" => Self::GaugeHistogram,
            "summary" => Self::Summary,
            "info" => Self::Info,
            "stateset" => Self::StateSet,
            _ => Self::Unknown,
        }
    }
}

/// One sample: a metric name, its labels in page order, and its value.
/// Timestamps and exemplars are read past and dropped: a reader of live
/// figures takes the scrape's time.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Sample {
    /// The value of label `name`, if the sample has it.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

/// The samples of one page and the types its families declared.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Page {
    samples: Vec<Sample>,
    types: HashMap<String, MetricType>,
}

impl Page {
    /// Every sample, in page order.
    pub fn samples(&self) -> &[Sample] {
        &self.samples
    }

    /// The type declared by `# TYPE family ...`, if any. A family is named
    /// as its `TYPE` line names it: a counter `x` of OpenMetrics is
    /// declared as `x` and sampled as `x_total`; the 0.0.4 writers of
    /// Python's client declare and sample `x_total`.
    pub fn declared_type(&self, family: &str) -> Option<MetricType> {
        self.types.get(family).copied()
    }

    /// Whether the page held no sample.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }
}

/// Why a page was refused.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// The format is UTF-8; a line that is not is not a metrics page.
    #[error("line {line} is not UTF-8")]
    NotUtf8 {
        line: usize,
        #[source]
        source: std::str::Utf8Error,
    },
    #[error("line {line} is longer than {max} bytes")]
    LineTooLong { line: usize, max: usize },
    #[error("the page holds more than {max} samples")]
    TooManySamples { max: usize },
    #[error("line {line} has more than {max} labels")]
    TooManyLabels { line: usize, max: usize },
    /// A sample line that is not `name{labels} value [timestamp]`.
    #[error("line {line}: {problem}")]
    Syntax { line: usize, problem: Syntax },
    /// A value or timestamp that is not a number.
    #[error("line {line}: {what} is not a number")]
    Number {
        line: usize,
        what: &'static str,
        #[source]
        source: std::num::ParseFloatError,
    },
}

impl ParseError {
    /// A short, bounded label for metrics and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::NotUtf8 { .. } => "not_utf8",
            Self::LineTooLong { .. } => "line_too_long",
            Self::TooManySamples { .. } => "too_many_samples",
            Self::TooManyLabels { .. } => "too_many_labels",
            Self::Syntax { .. } => "syntax",
            Self::Number { .. } => "number",
        }
    }
}

/// What is wrong with a sample line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Syntax {
    #[error("no metric name")]
    NoName,
    #[error("a label name is missing or malformed")]
    LabelName,
    #[error("a label has no '=' after its name")]
    NoEquals,
    #[error("a label value is not quoted")]
    UnquotedValue,
    #[error("a quoted name or value is not closed")]
    Unclosed,
    #[error("labels are not separated by ','")]
    NoComma,
    #[error("a label is given twice")]
    DuplicateLabel,
    #[error("no value")]
    NoValue,
    #[error("unexpected text after the timestamp")]
    Trailing,
}

/// Reads a whole page; see the module documentation for what is accepted.
pub fn parse(input: &[u8], limits: &Limits) -> Result<Page, ParseError> {
    let mut page = Page::default();
    for (index, raw) in input.split(|&byte| byte == b'\n').enumerate() {
        let line = index + 1;
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        if raw.len() > limits.max_line_len {
            return Err(ParseError::LineTooLong {
                line,
                max: limits.max_line_len,
            });
        }
        let text =
            std::str::from_utf8(raw).map_err(|source| ParseError::NotUtf8 { line, source })?;
        let text = text.trim_start_matches([' ', '\t']);
        if text.is_empty() {
            continue;
        }
        if let Some(comment) = text.strip_prefix('#') {
            match read_comment(comment) {
                Comment::Eof => break,
                Comment::Type(family, kind) => {
                    if page.types.len() >= limits.max_samples {
                        return Err(ParseError::TooManySamples {
                            max: limits.max_samples,
                        });
                    }
                    page.types.insert(family.to_owned(), kind);
                }
                Comment::Other => {}
            }
            continue;
        }
        if page.samples.len() >= limits.max_samples {
            return Err(ParseError::TooManySamples {
                max: limits.max_samples,
            });
        }
        let sample = Line { text, pos: 0, line }.sample(limits)?;
        page.samples.push(sample);
    }
    Ok(page)
}

enum Comment<'a> {
    Type(&'a str, MetricType),
    Eof,
    Other,
}

/// A `#` line: only `TYPE` and `EOF` matter; `HELP`, `UNIT` and free text
/// are read past, and a `TYPE` line without a name is a comment like any.
fn read_comment(comment: &str) -> Comment<'_> {
    let mut words = comment.split_ascii_whitespace();
    match words.next() {
        Some("EOF") => Comment::Eof,
        Some("TYPE") => match (words.next(), words.next()) {
            (Some(family), Some(kind)) => Comment::Type(family, MetricType::from_word(kind)),
            _ => Comment::Other,
        },
        _ => Comment::Other,
    }
}

/// A cursor over one sample line.
struct Line<'a> {
    text: &'a str,
    pos: usize,
    line: usize,
}

impl Line<'_> {
    fn error(&self, problem: Syntax) -> ParseError {
        ParseError::Syntax {
            line: self.line,
            problem,
        }
    }

    fn rest(&self) -> &str {
        self.text.get(self.pos..).unwrap_or("")
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    fn skip_blanks(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.pos += 1;
        }
    }

    /// Advances over bytes that `keep` accepts and returns them.
    fn take_while(&mut self, keep: impl Fn(usize, u8) -> bool) -> &str {
        let start = self.pos;
        while let Some(byte) = self.peek() {
            if !keep(self.pos - start, byte) {
                break;
            }
            self.pos += 1;
        }
        // Only ASCII bytes are accepted, so both ends are char boundaries.
        self.text.get(start..self.pos).unwrap_or("")
    }

    fn sample(mut self, limits: &Limits) -> Result<Sample, ParseError> {
        let mut name = self
            .take_while(|at, byte| is_name_byte(byte, at == 0, true))
            .to_owned();
        self.skip_blanks();
        let mut labels = Vec::new();
        if self.peek() == Some(b'{') {
            self.pos += 1;
            self.labels(&mut name, &mut labels, limits)?;
        }
        if name.is_empty() {
            return Err(self.error(Syntax::NoName));
        }
        self.skip_blanks();
        let value = self.take_while(|_, byte| byte != b' ' && byte != b'\t');
        if value.is_empty() {
            return Err(self.error(Syntax::NoValue));
        }
        let value = number(value).map_err(|source| ParseError::Number {
            line: self.line,
            what: "the value",
            source,
        })?;
        self.skip_blanks();
        if !self.rest().is_empty() && !self.rest().starts_with('#') {
            let stamp = self.take_while(|_, byte| byte != b' ' && byte != b'\t');
            number(stamp).map_err(|source| ParseError::Number {
                line: self.line,
                what: "the timestamp",
                source,
            })?;
            self.skip_blanks();
        }
        // An OpenMetrics exemplar (`# {labels} value`) is all that may
        // follow; it says nothing of the sample's own value.
        if !self.rest().is_empty() && !self.rest().starts_with('#') {
            return Err(self.error(Syntax::Trailing));
        }
        Ok(Sample {
            name,
            labels,
            value,
        })
    }

    /// The label set after its `{`, through its `}`. A quoted string that
    /// stands alone is the metric name (Prometheus 3's UTF-8 names), when
    /// none came before the brace.
    fn labels(
        &mut self,
        name: &mut String,
        labels: &mut Vec<(String, String)>,
        limits: &Limits,
    ) -> Result<(), ParseError> {
        loop {
            self.skip_blanks();
            let (key, quoted) = match self.peek() {
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(());
                }
                Some(b'"') => {
                    self.pos += 1;
                    (self.quoted()?, true)
                }
                _ => {
                    let key = self.take_while(|at, byte| is_name_byte(byte, at == 0, false));
                    if key.is_empty() {
                        return Err(self.error(Syntax::LabelName));
                    }
                    (key.to_owned(), false)
                }
            };
            self.skip_blanks();
            if quoted && name.is_empty() && matches!(self.peek(), Some(b',' | b'}')) {
                *name = key;
            } else {
                if self.peek() != Some(b'=') {
                    return Err(self.error(Syntax::NoEquals));
                }
                self.pos += 1;
                self.skip_blanks();
                if self.peek() != Some(b'"') {
                    return Err(self.error(Syntax::UnquotedValue));
                }
                self.pos += 1;
                let value = self.quoted()?;
                if labels.iter().any(|(seen, _)| *seen == key) {
                    return Err(self.error(Syntax::DuplicateLabel));
                }
                if labels.len() >= limits.max_labels {
                    return Err(ParseError::TooManyLabels {
                        line: self.line,
                        max: limits.max_labels,
                    });
                }
                labels.push((key, value));
            }
            self.skip_blanks();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {}
                _ => return Err(self.error(Syntax::NoComma)),
            }
        }
    }

    /// A quoted string after its opening `"`, through its closing one, with
    /// `\\`, `\"` and `\n` unescaped. Another escape is kept as written, as
    /// a lenient reader does: the value is a label, not a program.
    fn quoted(&mut self) -> Result<String, ParseError> {
        let mut out = String::new();
        let mut chars = self.rest().char_indices();
        while let Some((at, c)) = chars.next() {
            match c {
                '"' => {
                    self.pos += at + 1;
                    return Ok(out);
                }
                '\\' => match chars.next() {
                    Some((_, 'n')) => out.push('\n'),
                    Some((_, '\\')) => out.push('\\'),
                    Some((_, '"')) => out.push('"'),
                    Some((_, other)) => {
                        out.push('\\');
                        out.push(other);
                    }
                    None => break,
                },
                c => out.push(c),
            }
        }
        Err(self.error(Syntax::Unclosed))
    }
}

/// `[a-zA-Z_:][a-zA-Z0-9_:]*` for metric names; label names take no `:`.
fn is_name_byte(byte: u8, first: bool, colon: bool) -> bool {
    byte.is_ascii_alphabetic()
        || byte == b'_'
        || (colon && byte == b':')
        || (!first && byte.is_ascii_digit())
}

/// A value as Go's `ParseFloat` reads it for Prometheus: decimal and
/// exponent forms, `NaN`, `Inf`, `+Inf`, `-Inf` in any case. Rust's parser
/// takes the same words; Go's hexadecimal and underscore forms are not
/// written by any exporter.
fn number(text: &str) -> Result<f64, std::num::ParseFloatError> {
    text.parse::<f64>()
}

#[cfg(test)]
// Panicking on unexpected input is how a test fails.
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn one(line: &str) -> Sample {
        let page = parse(line.as_bytes(), &Limits::default()).unwrap();
        assert_eq!(page.samples().len(), 1, "{line}");
        page.samples()[0].clone()
    }

    fn refused(line: &str) -> ParseError {
        parse(line.as_bytes(), &Limits::default()).unwrap_err()
    }

    #[test]
    fn names_labels_and_values() {
        let s = one(r#"vllm:num_requests_running{engine="0",model_name="m"} 2.0"#);
        assert_eq!(s.name, "vllm:num_requests_running");
        assert_eq!(s.label("model_name"), Some("m"));
        assert_eq!(s.label("engine"), Some("0"));
        assert_eq!(s.value, 2.0);
        let s = one("tgi_queue_size 3");
        assert!(s.labels.is_empty());
        assert_eq!(s.value, 3.0);
        let s = one(r#"DCGM_FI_DEV_GPU_UTIL{gpu="0", UUID="GPU-1" , } 7"#);
        assert_eq!(s.labels.len(), 2);
        assert_eq!(s.label("UUID"), Some("GPU-1"));
        let s = one("x{} 1e+06");
        assert_eq!(s.value, 1e6);
    }

    #[test]
    fn special_values_and_timestamps() {
        assert!(one("x NaN").value.is_nan());
        assert_eq!(one("x +Inf").value, f64::INFINITY);
        assert_eq!(one("x -Inf 1700000000000").value, f64::NEG_INFINITY);
        assert_eq!(one("x 1.5 1700000000.123").value, 1.5);
        assert_eq!(
            one(r#"x_bucket{le="0.1"} 4 # {trace_id="a"} 0.05 1.7e9"#).value,
            4.0
        );
        assert_eq!(one(r#"x_total 4 # {trace_id="a"} 1"#).value, 4.0);
    }

    #[test]
    fn escapes_and_quoted_names() {
        let s = one(r#"x{a="q\"uo\\te\nd",b="k\eep"} 1"#);
        assert_eq!(s.label("a"), Some("q\"uo\\te\nd"));
        assert_eq!(s.label("b"), Some(r"k\eep"));
        let s = one(r#"{"my.metric", "label.name"="v"} 2"#);
        assert_eq!(s.name, "my.metric");
        assert_eq!(s.label("label.name"), Some("v"));
        let s = one(r##"x{a="{}, =\"#"} 1"##);
        assert_eq!(s.label("a"), Some("{}, =\"#"));
    }

    #[test]
    fn comments_types_and_eof() {
        let page = parse(
            b"# HELP a_total A help with \"quotes\"\r\n# TYPE a_total counter\r\n\
              # TYPE b gauge\n# UNIT b seconds\n#free text\n\n   \na_total 1\r\nb 2\n# EOF\nc{",
            &Limits::default(),
        )
        .unwrap();
        assert_eq!(page.samples().len(), 2);
        assert_eq!(page.declared_type("a_total"), Some(MetricType::Counter));
        assert_eq!(page.declared_type("b"), Some(MetricType::Gauge));
        assert_eq!(page.declared_type("c"), None);
        let page = parse(b"# TYPE x untyped\n# TYPE\nx 1", &Limits::default()).unwrap();
        assert_eq!(page.declared_type("x"), Some(MetricType::Unknown));
    }

    #[test]
    fn garbage_is_refused() {
        for (line, kind) in [
            ("<html><body>502</body></html>", "syntax"),
            ("x", "syntax"),
            ("x{", "syntax"),
            ("x{a} 1", "syntax"),
            ("x{a=b} 1", "syntax"),
            (r#"x{a="b} 1"#, "syntax"),
            (r#"x{a="b" c="d"} 1"#, "syntax"),
            (r#"x{a="b",a="c"} 1"#, "syntax"),
            ("{} 1", "syntax"),
            ("{a} 1", "syntax"),
            ("x one", "number"),
            ("x 1 two", "number"),
            ("x 1 2 3", "syntax"),
            ("9x 1", "syntax"),
        ] {
            assert_eq!(refused(line).kind(), kind, "{line}");
        }
        let error = parse(b"x 1\n\xff 2", &Limits::default()).unwrap_err();
        assert!(matches!(error, ParseError::NotUtf8 { line: 2, .. }));
        assert!(std::error::Error::source(&error).is_some());
    }

    #[test]
    fn limits_are_kept() {
        let limits = Limits {
            max_samples: 2,
            max_line_len: 16,
            max_labels: 1,
        };
        assert!(parse(b"a 1\nb 2", &limits).is_ok());
        assert_eq!(
            parse(b"a 1\nb 2\nc 3", &limits).unwrap_err().kind(),
            "too_many_samples"
        );
        assert_eq!(
            parse(b"a_very_long_metric_name 1", &limits)
                .unwrap_err()
                .kind(),
            "line_too_long"
        );
        assert_eq!(
            parse(br#"a{x="",y=""} 1"#, &limits).unwrap_err().kind(),
            "too_many_labels"
        );
        let types = b"# TYPE a gauge\n# TYPE b gauge\n# TYPE c gauge\n";
        assert_eq!(
            parse(types, &limits).unwrap_err().kind(),
            "too_many_samples"
        );
    }
}
