//! Building config [`Problem`]s that name the file, the document and the field.

use warden_config::{Doc, Location, Problem};

/// The document being compiled; every problem found in it is reported against it.
#[derive(Debug, Clone)]
pub(crate) struct DocSite {
    location: Location,
}

impl DocSite {
    pub(crate) fn of<T>(doc: &Doc<T>) -> Self {
        Self {
            location: Location {
                file: doc.file.clone(),
                document: doc.index,
                object: doc.id(),
                // Line numbers are only known to the loader.
                ..Location::default()
            },
        }
    }

    pub(crate) fn location(&self) -> &Location {
        &self.location
    }

    pub(crate) fn problem(&self, field: impl Into<String>, message: impl Into<String>) -> Problem {
        Problem {
            code: None,
            location: Location {
                field: field.into(),
                ..self.location.clone()
            },
            message: message.into(),
        }
    }
}
