//! Config errors and warnings: every one names the file, the document and the field path.

pub use crate::code::Code;
use std::fmt;
use std::path::PathBuf;

/// Where a problem is: file, line, 1-based document index, `kind/name`, and a field path.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Location {
    pub file: PathBuf,
    /// 1-based line of the field (or of the nearest enclosing node), when known.
    pub line: Option<usize>,
    /// 1-based index of the (non-empty) document within its file; 0 for whole-file problems.
    pub document: usize,
    /// `Kind/name`, or empty when the envelope itself could not be read.
    pub object: String,
    /// Field path such as `spec.http[0].route[1].weight`; empty for whole-document problems.
    pub field: String,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if self.document > 0 {
            write!(f, ": document {}", self.document)?;
        }
        if !self.object.is_empty() {
            write!(f, " ({})", self.object)?;
        }
        if !self.field.is_empty() {
            write!(f, ", field {}", self.field)?;
        }
        Ok(())
    }
}

/// One error or warning.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    pub location: Location,
    pub message: String,
    /// What kind of finding this is, for tools (`warden check --strict`, the snapshot builder):
    /// Istio's analyzer code where Istio has one (`IST0101`), else warden's (`WDN…`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<Code>,
}

impl Problem {
    /// A problem without a code.
    pub fn new(location: Location, message: impl Into<String>) -> Self {
        Self {
            location,
            message: message.into(),
            code: None,
        }
    }

    /// A problem carrying an analyzer code.
    pub fn coded(code: Code, location: Location, message: impl Into<String>) -> Self {
        Self {
            location,
            message: message.into(),
            code: Some(code),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.location, self.message)?;
        match self.code {
            // In brackets, as Istio's analyzer output shows it (`Error [IST0101] (...)`); last,
            // so the line still reads as place then message.
            Some(code) => write!(f, " [{}]", code.id()),
            None => Ok(()),
        }
    }
}

impl Location {
    /// A problem with a whole file (unreadable, not YAML).
    pub fn file(file: impl Into<PathBuf>, line: Option<usize>) -> Self {
        Self {
            file: file.into(),
            line,
            ..Self::default()
        }
    }
}

/// All errors of one load, reported together, with the load's warnings (a user fixing the
/// errors should see those too, not meet them one reload later).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors {
    pub errors: Vec<Problem>,
    pub warnings: Vec<Problem>,
}

impl ConfigErrors {
    pub fn new(errors: Vec<Problem>) -> Self {
        ConfigErrors {
            errors,
            warnings: Vec::new(),
        }
    }

    pub fn with_warnings(mut self, warnings: impl IntoIterator<Item = Problem>) -> Self {
        self.warnings.extend(warnings);
        self
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} config error(s):", self.errors.len())?;
        for p in &self.errors {
            write!(f, "\n  {p}")?;
        }
        if !self.warnings.is_empty() {
            write!(f, "\nwarnings ({}):", self.warnings.len())?;
            for p in &self.warnings {
                write!(f, "\n  {p}")?;
            }
        }
        Ok(())
    }
}
