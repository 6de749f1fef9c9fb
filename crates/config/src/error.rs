//! Configuration errors that point at the file, line, column and key they are about.

use std::fmt;
use std::path::PathBuf;

/// Where in the configuration a value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The file the value was read from.
    pub file: PathBuf,
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
    /// Key path inside the document, e.g. `api.flow[0].return.status`.
    pub key: String,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            // Not a place inside a file (a file that cannot be read): the file alone.
            write!(f, "{}", self.file.display())?;
        } else {
            write!(f, "{}:{}:{}", self.file.display(), self.line, self.column)?;
        }
        if !self.key.is_empty() {
            write!(f, ": {}", self.key)?;
        }
        Ok(())
    }
}

/// One problem found while loading or compiling configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Where the problem is.
    pub location: Location,
    /// What is wrong, in words a user can act on.
    pub message: String,
}

impl ConfigError {
    /// Builds an error at `location`.
    pub fn new(location: Location, message: impl Into<String>) -> Self {
        ConfigError {
            location,
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.location, self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Every problem found in one load; never empty when returned as an error.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    /// Adds one error.
    pub fn push(&mut self, e: ConfigError) {
        self.0.push(e);
    }
    /// Orders the errors by file, line and column.
    pub fn sort(&mut self) {
        self.0.sort_by(|a, b| {
            (&a.location.file, a.location.line, a.location.column).cmp(&(
                &b.location.file,
                b.location.line,
                b.location.column,
            ))
        });
        self.0.dedup();
    }

    /// Appends all errors of `other`.
    pub fn extend(&mut self, other: ConfigErrors) {
        self.0.extend(other.0);
    }

    /// True when nothing was reported.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// `Ok(v)` when no error was collected, else `Err(self)`.
    pub fn into_result<T>(self, v: T) -> Result<T, ConfigErrors> {
        if self.0.is_empty() {
            Ok(v)
        } else {
            Err(self)
        }
    }
}

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

impl std::error::Error for ConfigErrors {}

impl From<ConfigError> for ConfigErrors {
    fn from(e: ConfigError) -> Self {
        ConfigErrors(vec![e])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_place_without_a_line_is_the_file_alone() {
        let at = |line| Location {
            file: PathBuf::from("gw.yaml"),
            line,
            column: 3,
            key: String::new(),
        };
        assert_eq!(at(0).to_string(), "gw.yaml");
        assert_eq!(at(4).to_string(), "gw.yaml:4:3");
    }
}
