//! A problem found in a config, with its file, line, column and key: the
//! error of every part of the module, so it depends on none of them.

use std::fmt;

/// File name used in errors about command-line values.
pub const FLAGS_FILE: &str = "<flags>";

/// One problem found in a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// File the problem is in (as given by the user), or `<flags>`.
    pub file: String,
    /// 1-based line, when known.
    pub line: Option<u64>,
    /// 1-based column (in characters), when known.
    pub column: Option<u64>,
    /// Dotted key path, e.g. `routes[1].timeouts.idle`.
    pub key: String,
    /// What is wrong, as a sentence fragment.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(col) = self.column {
                write!(f, ":{col}")?;
            }
        }
        if self.key.is_empty() {
            write!(f, ": {}", self.message)
        } else {
            write!(f, ": {}: {}", self.key, self.message)
        }
    }
}

/// Every problem found, in file order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}
